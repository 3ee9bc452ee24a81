"""Render the book from executed notebooks (the book itself never executes anything).

    python ci/build_book.py --executed _build/executed --out .            # -> _build/html
    python ci/build_book.py --executed _build/smoke/executed --out _build/smoke

Stages a book source in OUT/_build/src (the config, the toc, the vendored JavaScript, the
book's Sphinx fixes, the chapters' non-notebook assets and the executed notebooks from
EXECUTED/chapters, papermill's injected-parameters cell hidden), then runs
`jupyter-book build --all -W -n --keep-going`: every warning is an error, all reported at once.

Interactive figures (ci/vega_figures.py): an executed notebook shows each Altair chart as its
Vega-Lite spec and a PNG, which draw offline in any notebook viewer. Only the copy Jupyter Book
renders shows it as the HTML that draws the chart live from the site's own _static/vega/; the
notebook a page's download button offers (OUT/_build/html/_sources/chapters/NAME.ipynb, which
Sphinx copies from the rendered source) is then overwritten with the offline copy, staged in
OUT/_build/downloads.

A chapter that failed or never ran (EXECUTED/status.json, written by ci/run_notebooks.py) is
still rendered, from what executed (or from its source), under a banner at the top of its page
that says what failed, where, and the command that reruns it: a failed chapter costs its own
page, not the book.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci import vega_figures
from ci.toc import REPO, toc_notebooks

VENDORED = ("require.js", "widgets/embed-setup.js", "widgets/embed-amd.js", "mathjax/tex-chtml.js")
VENDORED_DIRS = ("vega",)  # the interactive figures' scripts (ci/vendor_widgets.sh)
SKIP = shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints", "__pycache__")


class BuildError(RuntimeError):
    """The book cannot be staged or rendered; the message says what to do."""


def stage(executed: Path, out: Path, root: Path = REPO) -> Path:
    """Copy a buildable book source into OUT/_build/src and return its path."""
    missing_vendor = [f for f in VENDORED if not (root / "_vendor" / f).is_file()]
    missing_vendor += [f"{d}/" for d in VENDORED_DIRS if not any((root / "_vendor" / d).glob("*@*"))]
    if missing_vendor:
        raise BuildError(f"vendored JavaScript missing ({', '.join(missing_vendor)} in _vendor/): "
                         "run `make vendor`")
    notebooks = toc_notebooks(root)
    status = _read_status(executed)
    missing = [str(executed / nb) for nb in notebooks
               if not (executed / nb).is_file() and Path(nb).stem not in status]
    if missing:
        raise BuildError("executed notebooks missing (run ci/run_notebooks.py first):\n  "
                         + "\n  ".join(missing))
    src, downloads = out / "_build" / "src", out / "_build" / "downloads"
    for folder in (src, downloads):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    for name in ("_config.yml", "_toc.yml", *[p.name for p in root.glob("*.bib")]):
        shutil.copy2(root / name, src / name)
    # hard links: 16 MB of MathJax need not be copied on every build
    shutil.copytree(root / "_vendor", src / "_vendor", copy_function=_link_or_copy)
    shutil.copytree(root / "ci" / "sphinxext", src / "ci" / "sphinxext", ignore=SKIP)
    if (root / "chapters").is_dir():  # figures and other files the chapters refer to
        shutil.copytree(root / "chapters", src / "chapters", ignore=SKIP, dirs_exist_ok=True)
    versions = vega_figures.vendored_versions(root)
    for nb in notebooks:
        for folder in (src, downloads):
            (folder / nb).parent.mkdir(parents=True, exist_ok=True)
        entry = status.get(Path(nb).stem, {"status": "ok"})
        ran = executed / nb if (executed / nb).is_file() else root / nb
        _hide_injected_parameters(ran, downloads / nb, None if entry["status"] == "ok" else failure_banner(entry))
        _for_the_page(downloads / nb, src / nb, versions)
    return src


def _for_the_page(offline: Path, dst: Path, versions: dict[str, str]) -> None:
    """Copy a staged notebook for Jupyter Book to render, each interactive figure shown as the HTML
    that draws it from the site's _static/vega/ (`vega_figures.for_the_page`)."""
    nb = json.loads(offline.read_text(encoding="utf-8"))
    vega_figures.for_the_page(nb, versions)
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def offer_offline_downloads(out: Path, html: Path) -> list[str]:
    """Overwrite each notebook the built site offers for download (html/_sources/...) with its offline
    copy (OUT/_build/downloads); return what still would not draw offline (`vega_figures.download_problems`:
    a chapter executed before its figures were offline-safe, say)."""
    downloads = Path(out) / "_build" / "downloads"
    for offline in sorted(downloads.rglob("*.ipynb")):
        copy = Path(html) / "_sources" / offline.relative_to(downloads)
        if copy.is_file():
            shutil.copy2(offline, copy)
    return vega_figures.download_problems(html)


def _read_status(executed: Path) -> dict[str, dict]:
    path = executed / "status.json"
    return json.loads(path.read_text()) if path.exists() else {}


def failure_banner(entry: dict) -> str:
    """The markdown that tops a chapter which failed or never ran in this build."""
    if entry["status"] == "failed":
        what = ("This chapter **failed** in this build; the outputs below are what ran before the failure, "
                "and the cells after it have no output.")
        error = entry.get("error", "").replace("`", "'")
        detail = "\n".join(f"    {line}" for line in error.splitlines())
    else:
        what, detail = "This chapter **did not run** in this build (the build stopped before it); it has no outputs.", ""
    return (f"```{{error}} Not executed in full\n{what}\n\n" + (f"{detail}\n\n" if detail else "")
            + f"To run it alone: `{entry['rerun']}`, then render the book again with `make book` "
            "or `python ci/build_book.py --executed _build/executed`.\n```")


def _hide_injected_parameters(src: Path, dst: Path, banner: str | None = None) -> None:
    """Copy an executed notebook, tagging papermill's injected-parameters cell `remove-cell`,
    with `banner` (markdown) as its first cell when given."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    if banner is not None:
        nb["cells"].insert(0, {"cell_type": "markdown", "id": "build-failure-banner", "metadata": {},
                               "source": banner})
    dst.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _link_or_copy(a: str, b: str) -> None:
    """Hard-link `a` to `b`, copying when the filesystem refuses."""
    try:
        Path(b).hardlink_to(a)
    except OSError:
        shutil.copy2(a, b)


GLOSSARY_PAGE = "92_glossary.html"
GLOSSARY_TERM = re.compile(r'<dt[^>]*\bid="(term-[^"]+)"[^>]*>(.*?)</dt>', re.S)
GLOSSARY_LINK = re.compile(r'(<a class="reference internal" href=")92_glossary\.html(">)(.*?)(</a>)', re.S)


def _names(text: str) -> set[str]:
    """A glossary term's or a link's words, normalised: lower case, letters and digits, plurals singular;
    a term "Markov head (RNN head)" gives both "markov head" and "rnn head"."""
    plain = re.sub(r"<[^>]+>", "", html.unescape(text))
    parts = [plain] + re.findall(r"\(([^)]*)\)", plain) + [re.sub(r"\s*\([^)]*\)", "", plain)]
    names = set()
    for part in parts:
        for piece in part.split(","):
            words = [w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
                     for w in re.sub(r"[^a-z0-9]+", " ", piece.lower()).split()]
            if words:
                names.add(" ".join(words))
    return names


def glossary_terms(glossary_html: str) -> dict[str, str]:
    """{normalised name: the term's anchor id} of every term on the built glossary page."""
    found = {}
    for anchor, text in GLOSSARY_TERM.findall(glossary_html):
        for name in _names(re.sub(r'<a class="headerlink".*?</a>', "", text, flags=re.S)):
            found.setdefault(name, anchor)
    return found


def link_glossary_terms(html_dir: Path) -> list[str]:
    """Point every link to the glossary at its term's entry (`92_glossary.html#term-...`), matched by the
    link's words (a term's name or its alias in parentheses, plurals singular; else the one term whose
    name holds all the link's words, or whose words the link holds). Returns the link texts no term
    matched (their links still open the glossary)."""
    glossary = next(Path(html_dir).rglob(GLOSSARY_PAGE), None)
    if glossary is None:
        return []
    terms, unmatched = glossary_terms(glossary.read_text(encoding="utf-8")), []

    def anchor_of(text: str) -> str | None:
        names = _names(text)
        for name in names:
            if name in terms:
                return terms[name]
        for name in names:
            words = set(name.split())
            near = {a for t, a in terms.items() if words <= set(t.split()) or set(t.split()) <= words}
            if len(near) == 1:
                return near.pop()
        return None

    def relink(match: re.Match) -> str:
        found = anchor_of(match.group(3))
        if found is None:
            unmatched.append(re.sub(r"<[^>]+>", "", match.group(3)).strip())
            return match.group(0)
        return f"{match.group(1)}{GLOSSARY_PAGE}#{found}{match.group(2)}{match.group(3)}{match.group(4)}"

    for page in sorted(Path(html_dir).rglob("*.html")):
        if page.name == GLOSSARY_PAGE:
            continue
        text = page.read_text(encoding="utf-8")
        new = GLOSSARY_LINK.sub(relink, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
    return [t for t in unmatched if t and t.lower() != "glossary"]


def build_book(executed: Path, out: Path, root: Path = REPO) -> Path:
    """Stage and render the book; return the HTML folder (OUT/_build/html)."""
    src = stage(Path(executed), Path(out), root)
    for old in ("html", ".doctrees", "jupyter_execute"):  # no stale pages from earlier builds
        shutil.rmtree(Path(out) / "_build" / old, ignore_errors=True)
    cmd = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
           "build", str(src), "--path-output", str(out), "--all", "-W", "-n", "--keep-going"]
    print("+ jupyter-book " + " ".join(cmd[3:]), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise BuildError(f"jupyter-book build failed (warnings are errors; see above); source staged in {src}")
    html = Path(out) / "_build" / "html"
    for problem in offer_offline_downloads(Path(out), html):  # ci/browser_check.py fails on these
        print(f"build_book: {problem}", file=sys.stderr)
    for text in link_glossary_terms(html):
        print(f"build_book: a glossary link matches no term, so it opens the glossary's top: {text!r}", file=sys.stderr)
    return html


def main(argv: list[str] | None = None) -> int:
    """CLI: build, print where the HTML is; exit 1 with a one-line reason on failure."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--executed", type=Path, required=True, help="folder with chapters/NAME.ipynb executed")
    ap.add_argument("--out", type=Path, default=Path("."), help="the HTML goes to OUT/_build/html")
    args = ap.parse_args(argv)
    try:
        html = build_book(args.executed, args.out)
    except BuildError as e:
        print(f"build_book: {e}", file=sys.stderr)
        return 1
    print(f"book: {html / 'index.html'}")
    failed = [name for name, entry in _read_status(args.executed).items() if entry["status"] != "ok"]
    if failed:
        print(f"rendered with {len(failed)} chapter(s) marked as not executed in full: {', '.join(failed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
