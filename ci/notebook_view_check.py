"""Read executed chapters as a notebook viewer shows them (JupyterLab, Colab) and fail on what a
reader of the notebook, not of the rendered book, would see.

    python ci/notebook_view_check.py _build/smoke/executed/chapters [--screenshots DIR] [--only 04_markov_head]

Each executed notebook is rendered with nbconvert's HTML exporter (the lab template: every cell's
input and output shown, whatever its tags, as JupyterLab and Colab show them), opened in Debian's
Chromium (Playwright, offline: every non-local request is aborted), and its visible text is read.
A chapter fails on:
- MyST role or placeholder text outside code inputs: `{glue:md}`, `{term}`, `{paper}`, `{doc}`, ...,
  a MyST directive's option line (`:class: dropdown`, shown in a code block),
  a raw `<IPython.core.display.Markdown object>` repr;
- a Markdown output (what `results.say` shows: the sentences a run measured) that is not on the page
  as rendered text (shown raw, its markup would keep its sentences from matching);
- a verdict box ("What this run shows") whose rows' claims and verdicts are not all on the page;
- a chapter that has a verdict box but no Markdown output saying what its run measured;
- a figure that does not draw offline: an image that does not load, a local file that is not there,
  an output that says "Error loading script" (an Altair chart pointed at the built site's
  `../_static/vega`), and, read from the notebook itself, any output that loads from `_static/vega`,
  draws a chart by script only, or shows an interactive figure with no static image beside it
  (ci/vega_figures.py: the build shows each chart as its Vega-Lite spec and a PNG).
Screenshots (`--screenshots`) are full pages, one per chapter, named <chapter>__notebook.png.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.browser_check import CHROMIUM, CHROMIUM_ARGS, ChromiumNotFound, serve
from dspark_lite.harness.book.verdicts import OUTCOMES

# A MyST role as a notebook viewer leaves it: the role's name in braces, its content after it (the
# backticks become a code span). Code inputs are not read (a dict or an f-string has braces too).
ROLE = re.compile(r"\{(?:glue(?::[a-z]+)?|term|paper|doc|ref|numref|eq|cite|download|abbr|index|math)\}")
JS_READER_TEXT = """() => {
    const page = document.body.cloneNode(true);
    page.querySelectorAll('.jp-CodeCell .jp-Cell-inputWrapper, script, style').forEach(e => e.remove());
    document.body.appendChild(page); page.style.position = 'absolute';
    const text = page.innerText; page.remove();
    return text;
}"""
# A MyST directive as a notebook viewer leaves it: a code block whose first line is the option ":class: dropdown".
DIRECTIVE_OPTION = re.compile(r"(?<!\S):(?:class|name|open):(?=\s)")
RAW_REPRS = ("<IPython.core.display.Markdown object>", "<IPython.core.display.HTML object>")
# What a notebook viewer draws of each figure: images that did not load, outputs that say a script did not.
JS_FIGURES = """() => ({
    images: document.querySelectorAll('.jp-OutputArea-output img').length,
    broken: Array.from(document.images).filter(img => !(img.complete && img.naturalWidth > 0))
        .map(img => (img.getAttribute('src') || '').slice(0, 80)),
    errors: Array.from(document.querySelectorAll('.jp-OutputArea-output'))
        .filter(el => /Error loading script|Javascript Error/.test(el.innerText))
        .map(el => el.innerText.trim().split('\\n')[0].slice(0, 160)),
})"""
VERDICT_CAPTION = "What this run shows"
VERDICTS = OUTCOMES  # the verdict box's outcomes (dspark_lite.harness.book.verdicts)


@dataclass
class Expected:
    """What one executed notebook's outputs say a reader must see."""

    markdown: list[str] = field(default_factory=list)  # each Markdown output's text, markup removed
    verdict_rows: list[tuple[str, str]] = field(default_factory=list)  # (claim, verdict) of every box


class _Cells(HTMLParser):
    """The text of each <td> of an HTML table, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell.append(data)


MATH = "\u2063"  # where a formula stood in `markdown_text(..., math=MATH)`: a fragment never spans it


def markdown_text(markdown: str, math: str = " ") -> str:
    """A Markdown output as a reader reads it: links' text, no emphasis marks, no math delimiters'
    contents (MathJax typesets those; offline it may not: each formula becomes `math`), whitespace
    collapsed."""
    text = re.sub(r"\$\$.*?\$\$|(?<!\\)\$[^$\n]+?\$", f" {math} " if math.strip() else " ", markdown, flags=re.S)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"(\*\*|__|(?<!\w)[*_](?=\S)|(?<=\S)[*_](?!\w))", "", text)
    text = re.sub(r"^\s*(?:[-*+]|\d+\.|#+)\s+", "", text, flags=re.M)
    text = text.replace("|", " ")
    return " ".join(text.split())


def expected(notebook: Path) -> Expected:
    """The Markdown outputs and verdict rows of an executed notebook."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    found = Expected()
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {})
            if "text/markdown" in data:
                found.markdown.append(markdown_text("".join(data["text/markdown"]), math=MATH))
            html = "".join(data.get("text/html", ""))
            if VERDICT_CAPTION in html:
                table = _Cells()
                table.feed(html)
                for row in table.rows:
                    if len(row) >= 4 and row[-1] in VERDICTS:
                        found.verdict_rows.append((row[0], row[-1]))
    return found


def _fragments(text: str, size: int = 60) -> list[str]:
    """Pieces of a sentence to look for on the page (the start and the end: a long output wraps, and
    a number in the middle may be typeset math), each within the text between two formulas."""
    pieces = [piece.split() for piece in text.split(MATH) if piece.strip(" .,;:")]
    if not pieces:
        return []
    head, tail = " ".join(pieces[0][:8]), " ".join(pieces[-1][-8:])
    return [f for f in {head[:size], tail[-size:]} if f]


def problems_in(page_text: str, notebook: Path, exp: Expected) -> list[str]:
    """Everything a notebook reader would trip over, given the page's visible text."""
    name = notebook.stem
    found = []
    flat = " ".join(page_text.split())
    for m in ROLE.finditer(flat):
        found.append(f"{name}: role text on the page: '...{flat[max(0, m.start() - 40): m.end() + 30]}...'")
    for m in DIRECTIVE_OPTION.finditer(flat):
        found.append(f"{name}: directive text on the page: '...{flat[max(0, m.start() - 40): m.end() + 30]}...'")
    for raw in RAW_REPRS:
        if raw in flat:
            found.append(f"{name}: an output shows {raw} instead of its content")
    for text in exp.markdown:
        missing = [f for f in _fragments(text) if f not in flat]
        if missing:
            found.append(f"{name}: a Markdown output is not on the page as text: {missing[0]!r}")
    for claim, verdict in exp.verdict_rows:
        short = " ".join(claim.split()[:8])
        if short not in flat:
            found.append(f"{name}: the verdict box's claim is not on the page: {short!r}")
    if exp.verdict_rows and not exp.markdown:
        found.append(f"{name}: a verdict box but no Markdown output saying what this run measured")
    return found


def figure_problems(name: str, drawn: dict, failed: list[str]) -> list[str]:
    """What a notebook viewer could not draw (`JS_FIGURES`'s answer, the local URLs that did not load)."""
    found = [f"{name}: a figure does not draw in a notebook viewer: {error}" for error in drawn["errors"]]
    found += [f"{name}: an image does not load in a notebook viewer: {src}" for src in drawn["broken"]]
    found += [f"{name}: a local file does not load: {url}" for url in dict.fromkeys(failed)]
    return found


def render(notebook: Path, folder: Path) -> Path:
    """The notebook as nbconvert's lab template shows it (every input and output), written to folder."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_filename(str(notebook))
    path = folder / f"{notebook.stem}.html"
    path.write_text(body, encoding="utf-8")
    return path


def check_notebooks(notebooks: list[Path], screenshot_dir: Path | None = None,
                    chromium: str = CHROMIUM) -> tuple[list[str], dict[str, dict]]:
    """(problems, {chapter: {"markdown_outputs", "verdict_rows", "figures"}}) for executed notebooks
    ("figures": the images a notebook viewer shows)."""
    import json

    from playwright.sync_api import sync_playwright

    from ci.vega_figures import offline_problems

    if not Path(chromium).is_file():
        raise ChromiumNotFound(f"Chromium not found at {chromium}: run `make chromium` or `apt-get install chromium`")
    problems, seen = [], {}
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
        failed: list[str] = []
        page.on("requestfailed", lambda r: failed.append(r.url) if r.url.startswith(base) else None)
        page.on("response", lambda r: failed.append(r.url) if r.url.startswith(base) and r.status >= 400 else None)
        for notebook in notebooks:
            html = render(notebook, Path(tmp))
            failed.clear()
            page.goto(f"{base}/{html.name}", wait_until="load")
            try:  # a script that fails to load reports it after the load event
                page.wait_for_load_state("networkidle", timeout=5000)
            except Exception:  # noqa: BLE001 - still loading after 5 s: read what is there
                pass
            text = page.evaluate(JS_READER_TEXT)
            drawn = page.evaluate(JS_FIGURES)
            exp = expected(notebook)
            problems += problems_in(text, notebook, exp)
            problems += figure_problems(notebook.stem, drawn, [u.removeprefix(base) for u in failed])
            problems += offline_problems(json.loads(notebook.read_text(encoding="utf-8")), notebook.stem)
            seen[notebook.stem] = {"markdown_outputs": len(exp.markdown), "verdict_rows": len(exp.verdict_rows),
                                   "figures": drawn["images"]}
            if screenshot_dir is not None:
                screenshot_dir.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot_dir / f"{notebook.stem}__notebook.png"), full_page=True)
        browser.close()
    return problems, seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="a folder of executed notebooks")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these chapters (notebook stems)")
    ap.add_argument("--screenshots", type=Path, help="save a full-page screenshot of each chapter here")
    args = ap.parse_args(argv)
    notebooks = sorted(args.folder.glob("*.ipynb"))
    if args.only:
        notebooks = [nb for nb in notebooks if nb.stem in args.only]
    if not notebooks:
        ap.error(f"no executed notebooks in {args.folder}" + (f" named {args.only}" if args.only else ""))
    problems, seen = check_notebooks(notebooks, args.screenshots)
    for name, counts in seen.items():
        print(f"{name:<28} {counts['markdown_outputs']:>3} Markdown outputs, {counts['verdict_rows']:>3} verdict rows, "
              f"{counts['figures']:>3} figures")
    for p in problems:
        print(p)
    print(f"notebook view: {len(problems)} problem(s)" if problems else "notebook view: every chapter reads clean")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
