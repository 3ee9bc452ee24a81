"""ci/notebook_view_check.py on planted notebooks: a chapter whose run speaks in Markdown outputs
reads clean as a notebook viewer shows it; role text, a raw Markdown repr and a verdict box without a measured
sentence are each found."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from ci.browser_check import CHROMIUM
from ci.notebook_view_check import check_notebooks, expected, markdown_text
from dspark_lite.harness.book import results

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason="needs Debian's Chromium (make chromium)")

SAID = "**Run time.** This run accepted 4.21 tokens per round against DFlash's 3.80: above, outside the interval."


def chapter(tmp_path: Path, markdown_cell: str = "# 9. A planted chapter\n\nWhat to look for, and why.",
            said: str | None = SAID, box: bool = True, raw: bool = False) -> Path:
    """An executed notebook: a markdown cell, one cell whose output says what it measured, a verdict box."""
    outputs = []
    if said is not None:
        outputs.append(nbformat.v4.new_output("display_data", data={"text/markdown": said, "text/plain": "<Markdown>"}))
    if raw:
        outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": "<IPython.core.display.Markdown object>"},
                                              execution_count=1))
    if box:
        table = results.run_shows([("DSpark beats DFlash in every domain", "+16.3%", "+14.1%", True),
                                   ("the head costs almost nothing", "0.2-1.3%", "n/a", None)])
        outputs.append(nbformat.v4.new_output("display_data", data={"text/html": table.to_html(), "text/plain": "box"}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(markdown_cell),
                                         nbformat.v4.new_code_cell("measure()", outputs=outputs, execution_count=1)])
    path = tmp_path / "09_planted.ipynb"
    nbformat.write(nb, path)
    return path


def test_markdown_text_reads_markup_as_a_reader_does() -> None:
    assert markdown_text("**Run time.** The [glossary](92_glossary.md) says `tau` = $a_k$ *here*") == \
        "Run time. The glossary says tau = here"


def test_expected_reads_the_sentences_and_the_verdict_rows(tmp_path: Path) -> None:
    exp = expected(chapter(tmp_path))
    assert exp.markdown == [markdown_text(SAID)]
    assert exp.verdict_rows == [("DSpark beats DFlash in every domain", "reproduced"),
                                ("the head costs almost nothing", "not testable here")]


def test_a_portable_chapter_reads_clean(tmp_path: Path) -> None:
    problems, seen = check_notebooks([chapter(tmp_path)])
    assert problems == []
    assert seen == {"09_planted": {"markdown_outputs": 1, "verdict_rows": 2}}


@pytest.mark.parametrize("plant, expect", [
    (dict(markdown_cell="DSpark gains {glue:md}`gain` over [**DFlash**](92_glossary.md)."), "role text"),
    (dict(markdown_cell="The {term}`drafter <Target / drafter>` drafts."), "role text"),
    (dict(markdown_cell="## Exercises\n\n````{admonition} Solutions\n:class: dropdown\n1. Yes.\n````"), "directive text"),
    (dict(raw=True), "instead of its content"),
    (dict(said=None), "no Markdown output"),
])
def test_what_a_notebook_reader_would_trip_over_is_found(tmp_path: Path, plant: dict, expect: str) -> None:
    problems, _ = check_notebooks([chapter(tmp_path, **plant)])
    assert any(expect in p for p in problems), problems
