"""ci/notebook_view_check.py on planted notebooks: a chapter whose run speaks in Markdown outputs
reads clean as a notebook viewer shows it; role text, a raw Markdown repr and a verdict box without a measured
sentence are each found."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from ci.browser_check import CHROMIUM
from ci.notebook_view_check import MATH, _fragments, check_notebooks, expected, markdown_text
from dspark_lite.harness.book import results

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason="needs Debian's Chromium (make chromium)")

SAID = "**Run time.** This run accepted 4.21 tokens per round against DFlash's 3.80: above, outside the interval."


@pytest.fixture(autouse=True)
def _results_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planted verdict boxes write their result files into the test's folder, not the book's."""
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))


def chapter(tmp_path: Path, markdown_cell: str = "# 9. A planted chapter\n\nWhat to look for, and why.",
            said: str | None = SAID, box: bool = True, raw: bool = False, chart: dict | None = None) -> Path:
    """An executed notebook: a markdown cell, one cell whose output says what it measured, a verdict box
    (and `chart`, an output's mimebundle, first when given)."""
    outputs = [] if chart is None else [nbformat.v4.new_output("display_data", data=chart)]
    if said is not None:
        outputs.append(nbformat.v4.new_output("display_data", data={"text/markdown": said, "text/plain": "<Markdown>"}))
    if raw:
        outputs.append(nbformat.v4.new_output("execute_result", data={"text/plain": "<IPython.core.display.Markdown object>"},
                                              execution_count=1))
    if box:
        table = results.run_shows([("DSpark beats DFlash in every domain", "+16.3%", "+14.1%", "reproduced"),
                                   ("the head costs almost nothing", "0.2-1.3%", "n/a", None)],
                                  chapter="09_planted", profile="smoke")
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
    assert exp.markdown == [markdown_text(SAID, math=MATH)]
    assert exp.verdict_rows == [("DSpark beats DFlash in every domain", "reproduced"),
                                ("the head costs almost nothing", "not testable here")]


def test_a_portable_chapter_reads_clean(tmp_path: Path) -> None:
    problems, seen = check_notebooks([chapter(tmp_path)])
    assert problems == []
    assert seen == {"09_planted": {"markdown_outputs": 1, "verdict_rows": 2, "figures": 0}}


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


def _spec() -> dict:
    import altair as alt

    x = alt.param(name="x", value=1, bind=alt.binding_range(min=0, max=3, step=1, name="x "))
    data = alt.Chart(alt.Data(values=[{"x": i, "y": i * i} for i in range(4)]))
    return (data.mark_line().encode(x="x:Q", y="y:Q")
            + data.transform_filter("datum.x == x").mark_point(size=200).encode(x="x:Q", y="y:Q")).add_params(x).to_dict()


def test_a_chart_as_the_build_shows_it_draws_in_a_notebook_viewer(tmp_path: Path) -> None:
    """The build kernel's output (ci/vega_figures.py: the spec beside its PNG) draws offline in nbconvert's HTML."""
    from ci.vega_figures import offline_bundle

    bundle, _ = offline_bundle(_spec())
    problems, seen = check_notebooks([chapter(tmp_path, chart=bundle)])
    assert problems == [] and seen["09_planted"]["figures"] == 1, (problems, seen)


def test_a_chart_pointed_at_the_built_sites_vega_does_not_draw(tmp_path: Path) -> None:
    """What the build wrote before: HTML that loads ../_static/vega, which no notebook viewer has:
    the page says 'Error loading script', and the notebook is named for pointing there."""
    from ci.vega_figures import page_html, vendored_versions

    vega = f"vega@{vendored_versions()['vega']}?noext"
    old = {"text/html": page_html(_spec(), "vis", vendored_versions()), "text/plain": "<VegaLite 6 object>"}
    problems, seen = check_notebooks([chapter(tmp_path, chart=old)])
    assert seen["09_planted"]["figures"] == 0
    assert f"09_planted: a figure does not draw in a notebook viewer: Error loading script: ../_static/vega/{vega}" \
        in problems, problems
    assert f"09_planted: a local file does not load: _static/vega/{vega}" in problems, problems
    assert any("loads Vega from ../_static/vega" in p for p in problems), problems


def test_a_fragment_never_spans_a_formula() -> None:
    """A sentence that ends (or begins) with a formula is looked for in the words around it, which the
    page shows whether MathJax typesets the formula or not."""
    text = markdown_text("the acceptance stayed within 0.0017 of $1 - \\mathrm{TV}$.", math=MATH)
    assert _fragments(text) == ["the acceptance stayed within 0.0017 of"]
    text = markdown_text("STS has the lowest mean ECE of $a_k$ for 2 of 2 seeds; the lowest per seed: STS and STS.", math=MATH)
    found = _fragments(text)
    assert len(found) == 2 and "STS has the lowest mean ECE of" in found
    assert any(f != "STS has the lowest mean ECE of" and "for 2 of 2 seeds; the lowest per seed: STS and STS.".endswith(f)
               for f in found)
