"""Every chapter in the smoke profile, then a smoke book build and a browser check of it, then every
executed chapter read as a notebook viewer shows it (ci/notebook_view_check.py).

The order matters and is the toc's: chapters share the trained-artifact cache, so later ones
reuse what earlier ones trained. pytest runs a module's tests in the order they are written.

    _build/smoke/executed/chapters/NAME.ipynb   executed notebooks (kept on failure)
    _build/smoke/results/                       DSPARK_RESULTS of the smoke run
    _build/smoke/_build/html/                   the smoke book
    _build/screenshots/                         one full-page screenshot per page
    _build/screenshots/notebook_view/           one per chapter as a notebook viewer shows it
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ci.browser_check import ChromiumNotFound, check_site, toc_pages
from ci.build_book import BuildError, build_book
from ci.check_notebooks import check_book, output_problems
from ci.notebook_view_check import check_notebooks
from ci.run_notebooks import NotebookFailed, run_notebook
from ci.toc import REPO, toc_notebooks

SMOKE = REPO / "_build" / "smoke"
EXECUTED = SMOKE / "executed"
SCREENSHOTS = REPO / "_build" / "screenshots"
NOTEBOOKS = toc_notebooks(REPO)
FAILED: list[str] = []  # notebooks that failed in this session


def test_notebook_hygiene() -> None:
    """Committed notebooks are clean (no outputs, ids, one parameters cell) and match the toc."""
    problems = check_book(REPO)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[nb.stem for nb in NOTEBOOKS])
def test_notebook_smoke(nb: Path) -> None:
    """The chapter runs top to bottom with PROFILE="smoke" (its asserts are the test)."""
    try:
        seconds = run_notebook(REPO / nb, EXECUTED / nb, "smoke", SMOKE / "results")
    except NotebookFailed as e:
        FAILED.append(nb.stem)
        pytest.fail(str(e), pytrace=False)
    print(f"{nb.stem}: {seconds:.1f} s")
    noise = output_problems(EXECUTED / nb, str(nb))
    assert not noise, "\n".join(noise)


def test_smoke_book_renders_in_a_browser() -> None:
    """The book built from the smoke notebooks renders offline, with figures and no errors."""
    if FAILED:
        pytest.fail(f"not building the book: notebooks failed: {', '.join(FAILED)}", pytrace=False)
    try:
        html = build_book(EXECUTED, SMOKE)
    except BuildError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        problems = check_site(html, SCREENSHOTS, chapters=toc_pages(REPO))
    except ChromiumNotFound as e:
        pytest.fail(str(e), pytrace=False)
    assert not problems, "\n".join(problems)


def test_smoke_chapters_read_in_a_notebook_viewer() -> None:
    """Every executed smoke chapter, as JupyterLab and Colab show it (nbconvert's HTML in Chromium):
    no role or placeholder text, every Markdown output rendered, every verdict row on the page, and
    a chapter with a verdict box says in words what its run measured."""
    if FAILED:
        pytest.fail(f"not reading the notebooks: notebooks failed: {', '.join(FAILED)}", pytrace=False)
    try:
        problems, seen = check_notebooks([EXECUTED / nb for nb in NOTEBOOKS], SCREENSHOTS / "notebook_view")
    except ChromiumNotFound as e:
        pytest.fail(str(e), pytrace=False)
    assert set(seen) == {nb.stem for nb in NOTEBOOKS}
    assert not problems, "\n".join(problems)
