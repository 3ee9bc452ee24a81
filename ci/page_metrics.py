"""How much a reader reads: words of prose, tables and figures per notebook, from executed
notebooks (the run's sentences are outputs), and the main path's budget.

    python ci/page_metrics.py _build/executed/chapters            # a table per notebook
    python ci/page_metrics.py _build/executed/chapters --check    # exit 1 when the main path is over budget

Counted per notebook:
  - words: the markdown cells' words and the Markdown outputs' (what `results.say` wrote), without
    fenced code, display math, HTML tags or the exercises' folded solutions (`<details>` blocks);
  - tables: HTML tables in outputs and Markdown tables in cells;
  - figures: outputs that draw (a PNG, an SVG or a Vega-Lite chart, counted once per output) and
    Markdown images.
The budget (the afternoon book): the main path (`_toc.yml`'s first part and the root) at most
MAIN_WORDS words in all, each chapter at most CHAPTER_WORDS words and CHAPTER_ITEMS tables and
figures together.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import MAIN_PART, REPO, toc_parts

MAIN_WORDS, CHAPTER_WORDS, CHAPTER_ITEMS = 14_000, 2_200, 8
NOT_PROSE = [re.compile(p, re.S) for p in (r"<details>.*?</details>", r"```.*?```", r"\$\$.*?\$\$", r"<[^>]+>")]
WORD = re.compile(r"[A-Za-z0-9][\w'’.,%-]*")
FIGURE_TYPES = ("image/png", "image/svg+xml", "application/vnd.vegalite.v5+json", "application/vnd.vegalite.v4+json")


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


def prose_words(markdown: str) -> int:
    """Words a reader reads in a piece of Markdown."""
    for pattern in NOT_PROSE:
        markdown = pattern.sub(" ", markdown)
    return len(WORD.findall(markdown))


def notebook_metrics(path: Path) -> dict[str, int]:
    """{"words", "tables", "figures"} of one (executed) notebook."""
    words = tables = figures = 0
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "markdown":
            source = _text(cell["source"])
            words += prose_words(source)
            tables += len(re.findall(r"^\s*\|?\s*:?-{3,}", source, re.M))
            figures += len(re.findall(r"!\[", source))
            continue
        if "remove-output" in cell.get("metadata", {}).get("tags", []) or "remove-cell" in cell.get(
                "metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "text/markdown" in data:
                words += prose_words(_text(data["text/markdown"]))
            elif "text/html" in data:
                tables += _text(data["text/html"]).count("<table")
            if any(kind in data for kind in FIGURE_TYPES):
                figures += 1
    return {"words": words, "tables": tables, "figures": figures}


def book_metrics(executed: Path, root: Path = REPO) -> dict[str, dict[str, dict[str, int]]]:
    """{part caption: {notebook stem: its metrics}} for every toc notebook found in `executed`."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for caption, entries in toc_parts(root).items():
        for entry in entries:
            path = Path(executed) / f"{Path(entry).name}.ipynb"
            if path.is_file():
                out.setdefault(caption, {})[Path(entry).name] = notebook_metrics(path)
    return out


def over_budget(found: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """What breaks the afternoon book's budget, as sentences (empty when within it)."""
    main = found.get(MAIN_PART, {})
    problems = [f"{stem}: {m['words']} words (at most {CHAPTER_WORDS})" for stem, m in main.items()
                if m["words"] > CHAPTER_WORDS]
    problems += [f"{stem}: {m['tables'] + m['figures']} tables and figures (at most {CHAPTER_ITEMS})"
                 for stem, m in main.items() if m["tables"] + m["figures"] > CHAPTER_ITEMS]
    total = sum(m["words"] for m in main.values())
    if total > MAIN_WORDS:
        problems.append(f"the main path: {total} words (at most {MAIN_WORDS})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("executed", type=Path, help="a folder of executed notebooks (_build/executed/chapters)")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout whose _toc.yml names the parts")
    parser.add_argument("--check", action="store_true", help="exit 1 when the main path is over its budget")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if not args.executed.is_dir():
        parser.error(f"{args.executed} is not a folder of executed notebooks")
    found = book_metrics(args.executed, args.root)
    if args.json:
        print(json.dumps(found, indent=1))
    else:
        for caption, notebooks in found.items():
            total = {k: sum(m[k] for m in notebooks.values()) for k in ("words", "tables", "figures")}
            print(f"{caption}: {total['words']} words, {total['tables']} tables, {total['figures']} figures")
            for stem, m in notebooks.items():
                print(f"  {stem:32} {m['words']:6} words {m['tables']:4} tables {m['figures']:4} figures")
    problems = over_budget(found)
    if args.check and problems:
        print("over the afternoon book's budget:\n  " + "\n  ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
