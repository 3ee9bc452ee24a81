"""Notebook hygiene: what is committed in `chapters/` is clean and matches `_toc.yml`.

    python ci/check_notebooks.py          # exit 1 and print the problems, if any

Checks: no outputs and no execution counts, every cell has an id, exactly one code cell tagged
`parameters`, display math (`$$ ... $$`) is a paragraph of its own (MyST leaves it as raw text
otherwise), every toc chapter exists, and every `chapters/*.ipynb` is in the toc. A chapter reads the
same in JupyterLab, Colab and the rendered book: no MyST role in a markdown cell (`{glue:md}`,
`{term}`, `{paper}`, ...: only myst-nb fills them) and no MyST directive (```` ```{admonition} ````:
a code block there; `<details>` hides solutions everywhere), no `results.glue` call (what a run measured is
said by its cell's Markdown output, `results.say`), no code cell over `LONGEST_CODE_CELL` lines
(a notebook viewer shows every code cell, whatever its tags), and no line of a code cell the book shows
wider than `WIDEST_SHOWN_LINE` characters (its code column).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, cells, toc_markdown, toc_notebooks

DISPLAY_MATH = re.compile(r"\$\$.+?\$\$", re.S)
MYST_ROLE = re.compile(r"\{[a-z][a-z-]*(?::[a-z-]+)?\}`[^`]*`")
MYST_DIRECTIVE = re.compile(r"^ {0,3}(?:`{3,}|:{3,})\{[a-z][a-z-]*\}.*$", re.M)  # ```{admonition} ...: a code block elsewhere
GLUE_CALL = re.compile(r"\bglue\(")
LONGEST_CODE_CELL = 30
WIDEST_SHOWN_LINE = 80  # the rendered book's code column, in characters
HIDDEN_INPUT = {"hide-input", "remove-input", "remove-cell"}
CLEAR_HINT = "clear them before committing (Jupyter: Edit > Clear Outputs of All Cells)"


def check_notebook(path: Path, name: str | None = None) -> list[str]:
    """Problems in one committed notebook; `name` is how messages refer to it (default: its path)."""
    name = name or str(path)
    try:  # raw JSON, so that nothing (e.g. missing ids) is repaired on the way in
        raw_cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return [f"{name}: cannot be read as a notebook ({type(e).__name__}: {e})"]
    problems = []
    with_outputs = [i for i, c in enumerate(raw_cells) if c.get("cell_type") == "code" and c.get("outputs")]
    counted = [i for i, c in enumerate(raw_cells)
               if c.get("cell_type") == "code" and c.get("execution_count") is not None]
    no_id = [i for i, c in enumerate(raw_cells) if not c.get("id")]
    if with_outputs:
        problems.append(f"{name}: cells {with_outputs} have outputs; {CLEAR_HINT}")
    if counted:
        problems.append(f"{name}: cells {counted} have execution counts; {CLEAR_HINT}")
    if no_id:
        problems.append(f"{name}: cells {no_id} have no id; save the notebook with nbformat >= 4.5 "
                        "(Jupyter does this) so every cell gets one")
    for i, c in enumerate(raw_cells):
        if c.get("cell_type") == "markdown":
            source = c.get("source", "")
            for math in display_math_problems(source if isinstance(source, str) else "".join(source)):
                problems.append(f"{name}: cell {i}: display math '{math}...' shares a paragraph with text; "
                                "put a blank line before and after it")
    for i, c in enumerate(raw_cells):
        source = c.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        if c.get("cell_type") == "markdown":
            roles = MYST_ROLE.findall(source)
            if roles:
                problems.append(f"{name}: cell {i}: MyST role(s) {', '.join(roles[:3])}: only the rendered book fills "
                                "them; write a glossary term as [**term**](92_glossary.md), a paper number as "
                                "'(the paper: 4.80)', and say what the run measured from its cell (results.say)")
            directives = MYST_DIRECTIVE.findall(source)
            if directives:
                problems.append(f"{name}: cell {i}: MyST directive(s) {', '.join(d.strip() for d in directives[:3])}: "
                                "JupyterLab and Colab show them as code blocks; hide solutions in "
                                "<details><summary>Solutions</summary> ... </details>, set a note off as a "
                                "> blockquote")
        elif c.get("cell_type") == "code":
            if GLUE_CALL.search(source):
                problems.append(f"{name}: cell {i}: a glue call; say what the run measured as the cell's Markdown "
                                "output (dspark_lite.harness.book.results.say) instead")
            source_lines = source.splitlines()
            lines = len(source_lines)
            tags = set(c.get("metadata", {}).get("tags", []))
            wide = [n for n, line in enumerate(source_lines, 1) if len(line) > WIDEST_SHOWN_LINE]
            if wide and not tags & HIDDEN_INPUT:
                problems.append(f"{name}: cell {i}: line {wide[0]} is wider than the page's code column "
                                f"({WIDEST_SHOWN_LINE} characters; {len(wide)} such line(s)); the book shows this "
                                "cell, so wrap it (a trailing comment moves above its line)")
            if lines > LONGEST_CODE_CELL:
                problems.append(f"{name}: cell {i}: {lines} lines of code; a notebook viewer shows every code cell, "
                                f"so keep each to {LONGEST_CODE_CELL} lines (split the cell where its steps part, or "
                                "move a generic helper into dspark_lite/harness/book/)")
    params = [i for i, c in enumerate(raw_cells)
              if c.get("cell_type") == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(params) != 1:
        found = "none" if not params else f"{len(params)} (cells {params})"
        problems.append(f"{name}: expected exactly one code cell tagged `parameters` "
                        f"(defining PROFILE = \"full\", DEVICE, SEED), found {found}")
    return problems


def display_math_problems(markdown: str) -> list[str]:
    """Display-math blocks that share a paragraph with text: MyST typesets `$$ ... $$` only when a
    blank line (or the cell's edge) stands before and after it."""
    problems = []
    for m in DISPLAY_MATH.finditer(markdown):
        before, after = markdown[: m.start()], markdown[m.end():]
        alone_before = before.strip() == "" or before.rstrip(" ").endswith("\n\n")
        alone_after = after.strip() == "" or after.lstrip(" ").startswith("\n\n")
        if not (alone_before and alone_after):
            problems.append(m.group(0).replace("\n", " ")[:60])
    return problems


PROGRESS_LINE = re.compile(r"\d+%\|.*\| *\d+/\d+ \[")
WARNING_TEXT = re.compile(r"\b\w*Warning\b|\bwarnings\.warn\b|\bdeprecated\b", re.I)


def _visible_lines(text: str) -> list[str]:
    """Stream text as a reader sees it: a carriage return starts the line over."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


# Reprs where a reader expects a sentence: numpy's scalar reprs or a path anywhere in the output,
# and a bare string returned by a cell's last line.
RAW_REPR = re.compile(r"PosixPath\(|np\.(True|False)_|np\.float64\(")
RAW_RESULT = re.compile(r"^'[^'\n]*'$|^\"[^\"\n]*\"$")
# An absolute path of the build machine: its usual roots (not inside a URL or a relative path).
MACHINE_PATH = re.compile(r"(?<![\w.:/~$-])/(?:tmp|home|work|root|Users|mnt|scratch|var/folders|private/var)/[^\s'\"<>)]*")


def machine_path_roots() -> list[str]:
    """This machine's own folders that a page must not print: the repository (and so the default
    artifact cache inside it), $DSPARK_CACHE, $DSPARK_RESULTS, the temporary folder, the home folder."""
    import os
    import tempfile

    roots = [str(REPO), os.environ.get("DSPARK_CACHE"), os.environ.get("DSPARK_RESULTS"), tempfile.gettempdir(),
             os.path.expanduser("~")]
    return sorted({r.rstrip("/") for r in roots if r and len(r.rstrip("/")) > 1}, key=len, reverse=True)


def machine_paths(text: str) -> list[str]:
    """The build machine's absolute paths in `text` (a cell's output as a reader sees it)."""
    found = [m.group(0) for m in MACHINE_PATH.finditer(text)]
    found += [root for root in machine_path_roots() if re.search(re.escape(root) + r"(?![\w.-])", text)]
    return found


def _output_text(out: dict) -> str:
    """Everything a reader can see of one output, as text (streams, text/plain, html, markdown, errors)."""
    if out.get("output_type") == "stream":
        return "".join(out.get("text", ""))
    if out.get("output_type") == "error":
        return "\n".join([out.get("evalue", ""), *out.get("traceback", [])])
    data = out.get("data", {})
    return "\n".join("".join(data.get(kind, "")) for kind in ("text/plain", "text/html", "text/markdown", "text/latex")
                     if kind in data)


def figure_output_problems(out: dict) -> list[str]:
    """A matplotlib PNG measured by the build (ci/kernel_setup.py) that is wider than the page or
    whose smallest text renders below 9 px on it (dspark_lite.harness.book.plots.figure_problems)."""
    import base64

    png = out.get("data", {}).get("image/png")
    if not png:
        return []
    from dspark_lite.harness.book.plots import figure_problems, png_report

    report, width = png_report(base64.b64decode("".join(png)))
    return figure_problems(report, width) if report is not None else []


def output_problems(executed: Path, name: str | None = None) -> list[str]:
    """What an executed notebook's outputs must not show: a cell with more than one progress bar
    (the package makes nested bars transient; a cell running several long calls wraps them in one
    bar of its own), warning text, anything on stderr, a raw repr where a reader expects a
    sentence (a cell whose last line returns a string or a path, numpy's np.True_), or a figure
    that a notebook viewer cannot draw offline (ci/vega_figures.py: an output that loads from
    the built site's _static/vega, an interactive figure without a static image)."""
    name = name or str(executed)
    problems = []
    for i, cell, _ in cells(executed, "code"):
        where = f"cell {i} (id {cell.get('id', '?')})"
        streams = [out for out in cell.get("outputs", []) if out.get("output_type") == "stream"]
        text = "".join("".join(out.get("text", "")) for out in streams)
        bars = [line.strip() for line in _visible_lines(text) if PROGRESS_LINE.search(line)]
        if len(bars) > 1:
            problems.append(f"{name}: {where} shows {len(bars)} progress bars: {[b[:40] for b in bars]}")
        warned = [line.strip() for line in _visible_lines(text) if WARNING_TEXT.search(line)]
        if warned:
            problems.append(f"{name}: {where} prints a warning: {warned[0][:120]}")
        stderr = "".join("".join(out.get("text", "")) for out in streams if out.get("name") == "stderr").strip()
        if stderr:
            problems.append(f"{name}: {where} writes to stderr: {stderr[:120]}")
        results = ["".join(out.get("data", {}).get("text/plain", "")) for out in cell.get("outputs", [])
                   if out.get("output_type") == "execute_result"]
        raw = [m.group(0) for r in results + [text] for m in [RAW_REPR.search(r)] if m]
        raw += [r for r in results if RAW_RESULT.match(r.strip())]
        if raw:
            problems.append(f"{name}: {where} shows a raw repr: {raw[0][:80]}")
        paths = [p for out in cell.get("outputs", []) for p in machine_paths(_output_text(out))]
        if paths:
            problems.append(f"{name}: {where} prints a path of the build machine: {paths[0][:100]} (print a "
                            "path relative to the repository or $DSPARK_RESULTS: harness.gpu.describe_path)")
        figures = [out for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
        for k, out in enumerate(figures, start=1):
            problems += [f"{name}: {where} figure {k}: {p}" for p in figure_output_problems(out)]
    from ci.vega_figures import offline_problems

    return problems + offline_problems(json.loads(Path(executed).read_text(encoding="utf-8")), name)


def check_book(root: Path = REPO) -> list[str]:
    """Problems across the book: every toc notebook and every `chapters/*.ipynb` under `root`."""
    try:
        listed = toc_notebooks(root) + toc_markdown(root)
    except (OSError, ValueError) as e:
        return [f"_toc.yml: {e}"]
    problems = [f"_toc.yml lists {p} but there is no such file" for p in listed
                if not (root / p).is_file()]
    listed_set = {p.as_posix() for p in listed}
    on_disk = sorted((root / "chapters").glob("*.ipynb"))
    problems += [f"{p.relative_to(root)} is not in _toc.yml; add it (or delete the file)"
                 for p in [*on_disk, *sorted((root / "chapters").glob("*.md"))]
                 if p.relative_to(root).as_posix() not in listed_set]
    for p in on_disk:
        problems += check_notebook(p, str(p.relative_to(root)))
    return problems


def main() -> int:
    """CLI: print the problems and return 1, or say all is clean and return 0."""
    problems = check_book(REPO)
    for p in problems:
        print(p)
    if not problems:
        print("notebooks: clean")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
