"""Issue 63, figures that survive a download (ci/vega_figures.py): an executed notebook shows each
Altair chart as its Vega-Lite spec beside a PNG and names no `_static/vega`, so it draws offline
in JupyterLab, nbconvert's HTML and a static viewer; the rendered book still draws the chart live
from its own `_static/vega/`, and the notebook its download button offers is the offline one.

Seconds, but for one tiny kernel run and one one-page book build (Jupyter Book, about a minute).
"""
from __future__ import annotations

import base64
import json
import re
import shutil
import tomllib
from importlib import metadata
from pathlib import Path

import altair as alt
import nbformat
import pytest
from packaging.requirements import Requirement

from ci import vega_figures
from ci.browser_check import CHROMIUM
from ci.check_notebooks import output_problems
from ci.toc import REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHART_CELL = """import altair as alt

x = alt.param(name="x", value=1, bind=alt.binding_range(min=0, max=3, step=1, name="x "))
data = alt.Chart(alt.Data(values=[{"x": i, "y": i * i} for i in range(4)]))
line = data.mark_line().encode(x="x:Q", y="y:Q")
point = data.transform_filter("datum.x == x").mark_point(size=200, filled=True).encode(x="x:Q", y="y:Q")
(line + point).add_params(x)"""


def chart() -> alt.LayerChart:
    """The chart CHART_CELL draws: a slider that moves a point along a line."""
    namespace: dict = {}
    exec(CHART_CELL.rsplit("\n", 1)[0], namespace)
    return (namespace["line"] + namespace["point"]).add_params(namespace["x"])


def source_notebook() -> nbformat.NotebookNode:
    """A chapter as committed: a title, the parameters cell, one cell that shows a chart."""
    params = nbformat.v4.new_code_cell('PROFILE = "full"')
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A figure\n\nDrag the slider."), params,
                                         nbformat.v4.new_code_cell(CHART_CELL)])
    nb.metadata.update(kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
                       language_info={"name": "python"})
    return nb


def executed_notebook() -> nbformat.NotebookNode:
    """`source_notebook` as the build's kernel leaves it (the chart through `vega_figures.offline_bundle`)."""
    nb = source_notebook()
    bundle, meta = vega_figures.offline_bundle(chart().to_dict())
    nb.cells[-1].execution_count = 1
    nb.cells[-1].outputs = [nbformat.v4.new_output("execute_result", data=bundle, metadata=meta, execution_count=1)]
    return nb


def chart_outputs(nb: dict) -> list[dict]:
    return [out for cell in nb["cells"] for out in cell.get("outputs", [])
            if vega_figures.VEGALITE_MIME in out.get("data", {})]


# ------------------------------------------------------------------ the executed notebook


def test_a_chart_run_by_the_build_kernel_draws_offline(tmp_path: Path) -> None:
    """ci/run_notebooks.py's kernel (ci/kernel_setup.py) shows a chart as its spec, a PNG of it and a
    line of text: no script, no `_static/vega` anywhere in the executed notebook."""
    from ci.run_notebooks import run_notebook

    src = tmp_path / "figure.ipynb"
    nbformat.write(source_notebook(), src)
    run_notebook(src, tmp_path / "out" / "figure.ipynb", "smoke", tmp_path / "results", timeout=120)
    text = (tmp_path / "out" / "figure.ipynb").read_text(encoding="utf-8")
    assert "_static/vega" not in text and "vegaEmbed" not in text
    nb = json.loads(text)
    [out] = chart_outputs(nb)
    assert set(out["data"]) == {vega_figures.VEGALITE_MIME, "image/png", "text/plain"}
    # The same chart; its `config` is the theme, which an earlier test of this process may have set.
    without_theme = lambda spec: {key: value for key, value in spec.items() if key != "config"}
    assert without_theme(out["data"][vega_figures.VEGALITE_MIME]) == without_theme(chart().to_dict())
    png = base64.b64decode(out["data"]["image/png"])
    assert png.startswith(PNG_MAGIC)
    shown = out["metadata"]["image/png"]
    assert 300 < shown["width"] < 400 and 300 < shown["height"] < 400  # the chart's own size, drawn at 2x
    assert int.from_bytes(png[16:20], "big") == vega_figures.PNG_SCALE * shown["width"]
    assert output_problems(tmp_path / "out" / "figure.ipynb", "figure") == []
    nbformat.validate(nbformat.reads(text, as_version=4))  # the spec's MIME type is a JSON one (+json)


def test_a_figure_a_viewer_cannot_draw_offline_is_found() -> None:
    """An output pointing at `_static/vega` (the old build renderer), a chart drawn by script only
    (Altair's default html renderer, a CDN), a spec with no static image: each is named."""
    spec = chart().to_dict()
    versions = vega_figures.vendored_versions()
    site_only = {"text/html": vega_figures.page_html(spec, "vis", versions), "text/plain": "chart"}
    cdn = {"text/html": alt.utils.html.spec_to_html(spec, mode="vega-lite", vega_version="6", vegaembed_version="7",
                                                    vegalite_version="6.4.1", template="universal", fullhtml=False),
           "text/plain": "chart"}
    bare = {vega_figures.VEGALITE_MIME: spec, "text/plain": "chart"}
    good, _ = vega_figures.offline_bundle(spec)
    cells = [nbformat.v4.new_code_cell("chart", outputs=[nbformat.v4.new_output("display_data", data=data)])
             for data in (site_only, cdn, bare, good)]
    nb = json.loads(nbformat.writes(nbformat.v4.new_notebook(cells=cells)))
    problems = vega_figures.offline_problems(nb, "x")
    assert len(problems) == 3, problems
    assert problems[0].startswith("x: cell 0 ") and "loads Vega from ../_static/vega" in problems[0]
    assert problems[1].startswith("x: cell 1 ") and "with a script only" in problems[1]
    assert problems[2].startswith("x: cell 2 ") and "without a static image" in problems[2]


def test_only_the_page_copy_gets_the_html_that_loads_the_sites_vega() -> None:
    """`for_the_page` adds, beside the spec and the PNG, the HTML that draws the spec from
    ../_static/vega/<library>@<vendored version>, with an element id from the cell's id."""
    nb = json.loads(nbformat.writes(executed_notebook()))
    before = json.dumps(nb)
    versions = vega_figures.vendored_versions()
    assert set(versions) == {"vega", "vega-lite", "vega-embed"}
    spec = chart_outputs(nb)[0]["data"][vega_figures.VEGALITE_MIME]
    assert vega_figures.for_the_page(nb, versions) == 1
    [out] = nb["cells"][-1]["outputs"]
    assert set(out["data"]) == {"text/html", "text/plain"}  # myst-nb renders every type: only the page's
    page = out["data"]["text/html"]
    assert json.dumps(spec) in page
    for library, version in versions.items():
        assert f'"{library}": "../_static/vega/{library}@{version}?noext"' in page
    cell_id = nb["cells"][-1]["id"]
    assert f'<div id="vega-{cell_id}-0"></div>' in page and '"renderer": "svg"' in page
    assert vega_figures.for_the_page(nb, versions) == 0  # once
    assert "_static/vega" not in before


def test_the_static_image_is_declared_at_the_pinned_version() -> None:
    """vl-convert-python: pyproject.toml declares exactly the version requirements.txt pins and the
    tests run, and that version draws the Vega-Lite Altair writes."""
    import vl_convert

    declared = [Requirement(d) for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]]
    [req] = [r for r in declared if r.name == "vl-convert-python"]
    pinned = dict(line.split("==") for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line)
    installed = metadata.version("vl-convert-python")
    assert str(req.specifier) == f"=={pinned['vl-convert-python']}" == f"=={installed}"
    assert vega_figures.VL_CONVERT_VERSION in vl_convert.get_vegalite_versions()


# ------------------------------------------------------------------ the rendered book


@pytest.fixture(scope="module")
def tiny_book(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-page book built by ci/build_book.py from an executed notebook with one chart."""
    from ci.build_book import build_book

    tmp = tmp_path_factory.mktemp("book")
    root = tmp / "repo"
    (root / "chapters").mkdir(parents=True)
    shutil.copy2(REPO / "_config.yml", root / "_config.yml")
    (root / "_toc.yml").write_text("format: jb-book\nroot: chapters/00_figure\n")
    (root / "_vendor").symlink_to(REPO / "_vendor", target_is_directory=True)
    shutil.copytree(REPO / "ci" / "sphinxext", root / "ci" / "sphinxext")
    nbformat.write(source_notebook(), root / "chapters" / "00_figure.ipynb")
    (tmp / "executed" / "chapters").mkdir(parents=True)
    nbformat.write(executed_notebook(), tmp / "executed" / "chapters" / "00_figure.ipynb")
    return build_book(tmp / "executed", tmp / "site", root)


def test_the_rendered_page_draws_the_chart_from_the_sites_own_vega(tiny_book: Path) -> None:
    page = (tiny_book / "chapters" / "00_figure.html").read_text(encoding="utf-8")
    versions = vega_figures.vendored_versions()
    assert f'"vega": "../_static/vega/vega@{versions["vega"]}?noext"' in page and "vegaEmbed(" in page
    assert not re.search(r"https?://[^\"']*/vega(-lite|-embed)?@", page), "the page loads Vega from a CDN"
    assert (tiny_book / "_static" / "vega" / f"vega@{versions['vega']}").is_file()
    assert "_images/" not in page  # the page draws the chart, not its PNG


def test_the_download_button_offers_the_offline_notebook(tiny_book: Path) -> None:
    page = (tiny_book / "chapters" / "00_figure.html").read_text(encoding="utf-8")
    assert "_sources/chapters/00_figure.ipynb" in page  # the download button's link
    copy = tiny_book / "_sources" / "chapters" / "00_figure.ipynb"
    text = copy.read_text(encoding="utf-8")
    assert "_static/vega" not in text and "vegaEmbed" not in text
    [out] = chart_outputs(json.loads(text))
    assert base64.b64decode(out["data"]["image/png"]).startswith(PNG_MAGIC)
    assert [p.relative_to(tiny_book).as_posix() for p in tiny_book.rglob("*.ipynb")] == ["_sources/chapters/00_figure.ipynb"]
    assert vega_figures.download_problems(tiny_book) == []


@pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason="needs Debian's Chromium (make chromium)")
def test_the_rendered_chart_keeps_its_slider_offline(tiny_book: Path) -> None:
    """ci/browser_check.py on the one-page book: the chart draws with no request leaving the machine,
    and moving its slider redraws it."""
    from ci.browser_check import check_site

    shots = tiny_book.parent / "shots"
    assert check_site(tiny_book, shots, chapters=["chapters/00_figure.html"], wait_ms=8000) == []
    assert {"chapters__00_figure__fig0__x_0.png", "chapters__00_figure__fig0__x_1.png"} <= {f.name for f in shots.glob("*.png")}


def test_a_chart_whose_text_holds_a_control_character_still_gets_its_png() -> None:
    """vl-convert draws text through SVG and aborts the process on a character XML forbids (chapter
    07's random model decoded a token to U+0003): the PNG is drawn from the spec with each replaced."""
    chart = alt.Chart(alt.Data(values=[{"x": 1, "t": "a\x03b"}, {"x": 2, "t": "tab\tok"}])).mark_text().encode(
        x="x:Q", text="t:N")
    spec = chart.to_dict()
    assert vega_figures._xml_safe(spec)["data"]["values"] == [{"x": 1, "t": "a\ufffdb"}, {"x": 2, "t": "tab\tok"}]
    image = vega_figures.static_png(spec)
    assert image is not None and base64.b64decode(image[0]).startswith(b"\x89PNG")
    assert spec["data"]["values"][0]["t"] == "a\x03b"  # the notebook keeps the spec as the chart made it
