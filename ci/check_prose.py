"""The prose of a chapter states only numbers its own run produced (or the paper's, marked so).

    python ci/check_prose.py              # exit 1 and list every unmarked measured number

The rule, per markdown cell of every chapter in `_toc.yml`: after removing code spans, math,
links' targets, `{glue...}` roles (numbers the notebook computed and glued), `{paper}` roles
and plain-text paper quotes ("the paper: 4.80 / 4.44 / 2.95", up to the next parenthesis,
semicolon or full stop; numbers quoted from the paper, shown as such on every page), no
*measured number* may remain. (A number a run measured belongs in that cell's Markdown output,
`results.say`, never in a markdown cell.)
A measured number is
  - a decimal (4.62, 0.85), unless it names a section, equation, figure, table, algorithm,
    appendix or chapter ("Section 3.2.2"), or is a version (5.10.2);
  - a percentage (12%, 12.2 %, 12 percent);
  - a multiplier (2.1x, 3x);
  - a number with a unit of time, size or rate (431 s, 14 minutes, 205 us, 16 GB, 3.67M parameters,
    500 tokens/s).
Integers that count or size things in the recipe ("4 layers", "gamma 7", "1,000 calls") are
allowed: they are the profile's settings, which chapter 00 prints from one table.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, cells, toc_notebooks

# What a reader does not read as prose: fenced and inline code, math, roles with their content
# (glue, paper, and any other role: {doc}, {ref}, ...), link targets, HTML tags and comments, and the
# exercises' solutions (a <details> block: worked answers by hand, not what a run measured).
STRIP = [
    re.compile(r"```.*?```", re.S),
    re.compile(r"\$\$.*?\$\$", re.S),
    re.compile(r"\{[a-z:]+\}`[^`]*`"),
    PAPER_QUOTE := re.compile(r"\b(?:the paper|paper's|paper)(?: reports)?:\s[^);.\n]*(?:\.\d[^);.\n]*)*", re.I),
    re.compile(r"`[^`]*`"),
    re.compile(r"(?<!\\)\$[^$\n]+?\$"),
    re.compile(r"\]\([^)]*\)"),
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"<details>.*?</details>", re.S),          # an exercise's worked solutions: hand calculations
    re.compile(r"<[^>]+>"),
    re.compile(r"^#+\s*[\d.]+", re.M),                   # a heading's section number
    re.compile(r"\b[A-Z][\w.]*-\d[\w.]*"),                # a name: Qwen3-4B, DeepSeek-V4, Qwen3-8B
]
NUMBER = r"\d[\d,]*(?:\.\d+)?"
UNITS = (r"(?:s|ms|us|µs|μs|ns|sec|secs|seconds?|min|mins|minutes?|h|hours?|GiB|GB|MiB|MB|KiB|KB|"
         r"TFLOPs?|GFLOP/s|tokens/s|tok/s|it/s|[kMB]-?param\w*|[kMB] param\w*)")
MEASURED = re.compile(
    rf"(?<![\w.])(?:"
    rf"{NUMBER}\s?(?:%|percent\b)"                        # a percentage
    rf"|{NUMBER}\s?[x×](?![\w])"                          # a multiplier
    rf"|{NUMBER}\s?{UNITS}(?![\w/])"                      # a quantity with a unit
    rf"|\d+\.\d+(?![\d.])"                                # a decimal
    rf")")
NAMED = re.compile(r"(?:Section|Sections|Sec\.|Eq\.|Eqs\.|Equation|Figure|Figures|Fig\.|Table|Tables|Algorithm|"
                   r"Appendix|Chapter|chapter|section|sections|footnote|v|version|transformers|torch|Python|vLLM)")
NAMED_LIST = re.compile(NAMED.pattern + r"\s*(?:[\d.]+(?:,\s*|\s+and\s+|\s*-\s*))*$")


def prose(markdown: str) -> str:
    """The text of a markdown cell as a reader reads it, without code, math, roles and links."""
    for pattern in STRIP:
        markdown = pattern.sub(" ", markdown)
    return markdown


def measured_numbers(markdown: str) -> list[str]:
    """The measured numbers left in a markdown cell's prose, each with a little context."""
    text = prose(markdown)
    found = []
    for m in MEASURED.finditer(text):
        if NAMED_LIST.search(text[max(0, m.start() - 40): m.start()]):
            continue  # "Section 3.2", "sections 3.6 and 3.8", "transformers 5.10"
        if re.match(r"\d+\.\d+\.\d+", text[m.start():]):
            continue  # a version number
        context = " ".join(text[max(0, m.start() - 40): m.end() + 20].split())
        found.append(f"{m.group(0)!r} in '...{context}...'")
    return found


def check_notebook(path: Path, name: str | None = None) -> list[str]:
    """Every unmarked measured number in one notebook's markdown cells."""
    name = name or str(path)
    return [f"{name}: cell {i}: {hit}" for i, _, source in cells(path, "markdown") for hit in measured_numbers(source)]


def check_book(root: Path = REPO) -> list[str]:
    """The prose problems of every chapter in the toc."""
    problems = []
    for rel in toc_notebooks(root):
        problems += check_notebook(root / rel, str(rel))
    return problems


def main() -> int:
    problems = check_book()
    for p in problems:
        print(p)
    print(f"prose: {len(problems)} measured number(s) in markdown cells that are not the paper's"
          if problems else "prose: every measured number is the paper's (the run's are said by its cells)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
