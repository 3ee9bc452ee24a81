"""Tests of the CI tools themselves: the browser check, the hygiene check, the notebook runner.

Fast (seconds): one Chromium session over a planted site, tiny notebooks, one tiny kernel run.
"""
from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import nbformat
import pydata_sphinx_theme
import pytest

from ci import browser_check
from ci.browser_check import ChromiumNotFound, check_site
from ci.check_notebooks import check_book, check_notebook, output_problems
from ci.run_notebooks import NotebookFailed, run_notebook
from ci.toc import REPO, toc_markdown, toc_notebooks


def png(width: int = 4, height: int = 3) -> bytes:
    """A valid grey PNG, written by hand so the test needs no image library."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def page(body: str, head: str = "") -> str:
    """A minimal HTML page."""
    return f"<!doctype html><html><head><title>t</title>{head}</head><body>{body}</body></html>"


FIGURE = '<div class="cell_output"><img src="../fig.png" alt="a figure"></div>'
MATH = '<p><span class="math notranslate nohighlight">\\(e^{i\\pi} + 1 = 0\\)</span></p>'


def widget_page(with_js: bool) -> str:
    """A page as myst-nb writes it for a notebook that displayed an IntSlider (optionally without JS)."""
    from ipywidgets.embed import embed_data
    from ipywidgets import IntSlider

    data = embed_data(views=[IntSlider(value=3, min=0, max=10, description="k")])
    head = f'<script type="application/vnd.jupyter.widget-state+json">{json.dumps(data["manager_state"])}</script>'
    if with_js:  # the same scripts, in the same order, as _config.yml makes Sphinx write
        head += ('<script>window.MathJax = {"options": {"processHtmlClass": "math"}}</script>'
                 '<script defer src="../_static/mathjax/tex-chtml.js"></script>'
                 '<script src="../_static/require.js"></script>'
                 '<script src="../_static/widgets/embed-setup.js"></script>'
                 '<script src="../_static/widgets/embed-amd.js"></script>')
    view = f'<script type="application/vnd.jupyter.widget-view+json">{json.dumps(data["view_specs"][0])}</script>'
    return page(FIGURE + MATH + f'<div class="cell_output">{view}</div>', head=head)


def vega_page(live: bool) -> str:
    """A page with one Altair figure rendered as the book build renders it: the executed notebook's
    output (ci/vega_figures.offline_bundle: the spec beside its PNG) with the HTML that only the
    rendered copy gets (vega_figures.for_the_page: the vendored Vega from ../_static/vega, SVG): a
    slider that moves a point, or (not live) a slider bound to nothing the marks read."""
    import altair as alt

    from ci import vega_figures

    versions = vega_figures.vendored_versions()
    x = alt.param(name="x", value=1, bind=alt.binding_range(min=0, max=3, step=1, name="x "))
    data = alt.Chart(alt.Data(values=[{"x": i, "y": i * i} for i in range(4)]))
    chart = data.mark_line().encode(x="x:Q", y="y:Q")
    if live:
        chart += data.transform_filter("datum.x == x").mark_point(size=200, filled=True).encode(x="x:Q", y="y:Q")
    bundle, _ = vega_figures.offline_bundle(chart.add_params(x).to_dict())
    assert "_static/vega" not in json.dumps(bundle) and "image/png" in bundle  # what the executed notebook keeps
    nb = {"cells": [{"cell_type": "code", "id": "fig", "outputs": [{"output_type": "display_data", "data": bundle}]}]}
    assert vega_figures.for_the_page(nb, versions) == 1
    html = nb["cells"][0]["outputs"][0]["data"]["text/html"]
    for library in ("vega", "vega-lite", "vega-embed"):  # the site's own copies, at the vendored versions
        assert f'"{library}": "../_static/vega/{library}@{versions[library]}?noext"' in html, library
    assert '"renderer": "svg"' in html and '<div id="vega-fig-0"></div>' in html
    return page(f'<div class="cell_output">{html}</div>')


def offline_copy() -> str:
    """A notebook as the site offers it for download: its chart as the spec beside a PNG."""
    from ci import vega_figures

    x = {"data": {"values": [{"x": 1}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}}
    bundle, _ = vega_figures.offline_bundle(x)
    return json.dumps({"cells": [{"cell_type": "code", "id": "a", "outputs": [{"output_type": "display_data",
                                                                              "data": bundle}]}]})


def icon_page(with_font: bool) -> str:
    """A page with a theme-style icon (a Font Awesome class drawn by CSS), with or without its webfont."""
    face = ('@font-face { font-family: "Font Awesome 6 Free"; font-weight: 900; '
            'src: url("../fa-solid-900.woff2") format("woff2"); }') if with_font else ""
    style = (f'<style>{face} .fa-solid::before {{ font-family: "Font Awesome 6 Free"; font-weight: 900; '
             'content: "\\f0c9"; }</style>')
    return page(FIGURE + '<button><i class="fa-solid fa-bars"></i></button>', head=style)


THEME_WEBFONT = Path(pydata_sphinx_theme.__file__).parent / "theme/pydata_sphinx_theme/static/vendor/fontawesome/webfonts/fa-solid-900.woff2"
PLANTED = {  # page -> HTML (or a function that writes it); each chapter but "clean" carries exactly one defect
    "index.html": page("", head='<meta http-equiv="Refresh" content="0; url=chapters/clean.html" />'),
    "old.html": page("", head='<meta http-equiv="Refresh" content="0; url=gone.html" />'),
    "chapters/clean.html": page("<h1>Clean</h1>" + FIGURE
                                + '<div class="cell_output"><svg width="10" height="10"></svg></div>'
                                + '<pre>price = "$5"  # code may hold $ and \\alpha</pre>'),
    "chapters/literal_tex.html": page(  # what MyST made of display math inside a paragraph
        FIGURE + "<p>the verification batch holds $$B(l) = \\sum_r (1 + l_r)$$ tokens</p>"),
    "chapters/broken_image.html": page(FIGURE + '<div class="cell_output"><img src="../missing.png"></div>'),
    "chapters/traceback.html": page(
        FIGURE + '<div class="output traceback"><pre>Traceback (most recent call last):\n'
        '  File "x.py", line 1\nValueError: boom</pre></div>'),
    "chapters/external.html": page(FIGURE, head='<script src="https://cdn.example.com/lib.js"></script>'),
    "chapters/no_figure.html": page("<h1>Only words</h1>"),
    "chapters/widgets.html": widget_page(with_js=True),  # clean: slider and math render offline
    "chapters/widgets_no_js.html": widget_page(with_js=False),
    "chapters/interactive.html": lambda: vega_page(live=True),  # clean: its slider redraws it offline
    "chapters/interactive_dead.html": lambda: vega_page(live=False),
    "chapters/interactive_stuck.html": page(  # a slider the reader cannot move (disabled)
        FIGURE + '<div class="cell_output"><div class="vega-embed"><svg width="10" height="10"></svg>'
        '<div class="vega-bindings"><label><input type="range" name="x" min="0" max="3" step="1" value="1" disabled>'
        '</label></div></div></div>'),
    "chapters/wide_output.html": page(FIGURE + '<div class="cell_output"><pre style="white-space: pre; overflow-x: auto">'
                                      + "a long line " * 300 + "</pre></div>"),
    "chapters/wide_math.html": page(FIGURE + '<p>Words.</p><mjx-container display="true" style="display: block; '
                                    'overflow-x: auto"><span style="display: inline-block; width: 2000px">B(l) = ...</span>'
                                    "</mjx-container>"),
    # as the book renders a blank stream (a cleared progress bar's line): its copy button carries an SVG icon
    "chapters/empty_output.html": page(FIGURE + '<div class="cell_output"><div class="output stream"><pre>' + " " * 88
                                       + '\n</pre><button class="copybtn"><svg width="8" height="8"></svg></button></div></div>'),
    "chapters/code_header.html": page(FIGURE + '<div class="cell_output"><table><thead><tr><th>gain_pct</th><th>a_rj</th>'
                                      "<th>tau</th><th>gain (%)</th></tr></thead><tbody><tr><td>1</td><td>2</td><td>3</td>"
                                      "<td>4</td></tr></tbody></table></div>"),
    "chapters/placeholder.html": page(FIGURE + '<div class="cell_output"><pre>wrote $DSPARK_RESULTS/x.json</pre></div>'),
    "chapters/reading.html": page("<p>" + "alpha " * 50 + "</p>" + FIGURE  # clean: 299 prose characters, 50 words
                                  + '<div class="cell"><div class="cell_input"><pre>' + "y" * 100 + "</pre></div>"
                                  + '<div class="cell_output"><pre>' + "z" * 50 + "</pre></div></div>"),
    "chapters/icons.html": icon_page(with_font=True),  # clean: the icon's webfont loads
    "chapters/icons_no_font.html": icon_page(with_font=False),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Check the planted site once; return the problems grouped by page."""
    site = tmp_path_factory.mktemp("site")
    if not (REPO / "_vendor" / "widgets" / "embed-amd.js").is_file():
        pytest.fail("vendored JavaScript missing: run `make vendor`", pytrace=False)
    (site / "_static").symlink_to(REPO / "_vendor", target_is_directory=True)
    (site / "fig.png").write_bytes(png())
    (site / "fa-solid-900.woff2").write_bytes(THEME_WEBFONT.read_bytes())
    for rel, html in PLANTED.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(html() if callable(html) else html)
    (site / "_sources" / "chapters").mkdir(parents=True)  # the notebooks the download buttons offer
    (site / "_sources" / "chapters" / "interactive.ipynb").write_text(offline_copy())
    stale = json.loads(offline_copy())
    stale["cells"][0]["outputs"][0]["data"] = {"text/html": vega_page(live=True), "text/plain": "chart"}
    (site / "_sources" / "chapters" / "stale.ipynb").write_text(json.dumps(stale))
    shots = site.parent / "shots"
    problems = check_site(site, shots, chapters=[p for p in PLANTED if p.startswith("chapters/")],
                          wait_ms=4000)
    by_page: dict[str, list[str]] = {rel: [] for rel in PLANTED}
    for p in problems:
        by_page.setdefault(p.split(": ", 1)[0], []).append(p)
    by_page["_screenshots"] = sorted(f.name for f in shots.glob("*.png"))
    by_page["_shapes"] = json.loads((shots / browser_check.SHAPE_FILE).read_text())
    return by_page


def test_clean_page_with_a_figure_passes(planted: dict[str, list[str]]) -> None:
    assert planted["chapters/clean.html"] == []
    assert planted["index.html"] == []


def test_vendored_widgets_and_math_render_offline(planted: dict[str, list[str]]) -> None:
    assert planted["chapters/widgets.html"] == []


def test_widgets_and_math_that_do_not_render_fail(planted: dict[str, list[str]]) -> None:
    assert any("widgets did not render" in p for p in planted["chapters/widgets_no_js.html"])
    assert any("math did not render" in p for p in planted["chapters/widgets_no_js.html"])


def test_tex_left_as_text_fails(planted: dict[str, list[str]]) -> None:
    problems = planted["chapters/literal_tex.html"]
    assert len(problems) == 1 and "TeX source shown as text" in problems[0] and "\\sum_r" in problems[0]


def test_redirect_to_a_missing_page_fails(planted: dict[str, list[str]]) -> None:
    assert planted["old.html"] == ["old.html: redirects to gone.html, which does not exist"]


def test_broken_image_fails(planted: dict[str, list[str]]) -> None:
    assert any("image does not load" in p and "missing.png" in p for p in planted["chapters/broken_image.html"])


def test_traceback_fails(planted: dict[str, list[str]]) -> None:
    assert any("traceback" in p.lower() or "error output" in p for p in planted["chapters/traceback.html"])


def test_external_request_fails(planted: dict[str, list[str]]) -> None:
    assert any("non-local URL: https://cdn.example.com/lib.js" in p for p in planted["chapters/external.html"])


def test_chapter_without_figure_fails(planted: dict[str, list[str]]) -> None:
    assert any("without a figure" in p for p in planted["chapters/no_figure.html"])


def test_screenshot_per_page(planted: dict[str, list[str]]) -> None:
    assert "chapters__clean.png" in planted["_screenshots"]
    pages = [name for name in planted["_screenshots"] if "__fig" not in name]
    assert len(pages) == len(PLANTED) - 2  # not for the two redirect pages


def test_interactive_figure_redraws_offline_and_a_dead_control_fails(planted: dict[str, list[str]]) -> None:
    assert planted["chapters/interactive.html"] == []
    assert {"chapters__interactive__fig0__x_0.png", "chapters__interactive__fig0__x_1.png"} <= set(planted["_screenshots"])
    assert any("moving `x` to ['3', '0'] did not change what is drawn" in p
               for p in planted["chapters/interactive_dead.html"]), planted["chapters/interactive_dead.html"]


def test_a_download_copy_must_draw_its_figures_offline(planted: dict[str, list[str]]) -> None:
    """A notebook the site offers for download whose chart loads from _static/vega (drawn only inside the
    site) fails; one that shows the spec beside its PNG passes."""
    assert "_sources/chapters/interactive.ipynb (download copy)" not in planted
    stale = planted["_sources/chapters/stale.ipynb (download copy)"]
    assert len(stale) == 1 and "cell 0 (id a) loads Vega from ../_static/vega" in stale[0], stale


def test_a_control_a_reader_cannot_move_fails(planted: dict[str, list[str]]) -> None:
    stuck = planted["chapters/interactive_stuck.html"]
    assert "chapters/interactive_stuck.html: interactive figure 0: `x` shows 1 after a reader moved it to 3" in stuck, stuck
    assert "chapters/interactive_stuck.html: interactive figure 0: `x` shows 1 after a reader moved it to 0" in stuck, stuck


def test_icons_render_from_the_webfont_and_a_missing_font_fails(planted: dict[str, list[str]]) -> None:
    assert planted["chapters/icons.html"] == []
    assert planted["chapters/icons_no_font.html"] == [
        "chapters/icons_no_font.html: icon does not render (its webfont did not load): fa-solid fa-bars"]


def test_the_theme_script_for_custom_icons_is_dropped() -> None:
    from ci.sphinxext.book_fixes import without_fontawesome_js

    head = ('<link href="_static/styles/theme.css?digest=1" rel="stylesheet" />\n'
            '  <script defer src="../_static/scripts/fontawesome.js?digest=55c2"></script>\n'
            '  <link rel="preload" as="script" href="../_static/scripts/bootstrap.js?digest=55c2" />\n')
    html, n = without_fontawesome_js(head)
    assert n == 1 and "fontawesome" not in html
    assert html.count("\n") == 2 and "theme.css" in html and "bootstrap.js" in html
    assert without_fontawesome_js(html) == (html, 0)


def test_what_a_reader_cannot_read_in_the_column_fails(planted: dict[str, list[str]]) -> None:
    """Wide outputs and display formulas, empty output boxes, code-name column headers and the results placeholder fail a
    chapter; a header that is a symbol (a_rj, tau) or words passes."""
    assert len(planted["chapters/wide_output.html"]) == 1 and "wider than the page column" in planted["chapters/wide_output.html"][0]
    assert planted["chapters/wide_math.html"] == [
        "chapters/wide_math.html: a display formula wider than the page column (2000 px in "
        + planted["chapters/wide_math.html"][0].split(" px in ")[1]]
    assert planted["chapters/empty_output.html"] == ["chapters/empty_output.html: 1 empty output box(es)"]
    assert planted["chapters/code_header.html"] == [
        "chapters/code_header.html: a table's column header is a code name, not words: 'gain_pct'"]
    assert len(planted["chapters/placeholder.html"]) == 1 and "$DSPARK_RESULTS" in planted["chapters/placeholder.html"][0]


def test_how_a_chapter_reads_is_measured(planted: dict[str, list[str]]) -> None:
    """Prose against code inputs and outputs, in characters of visible text, and prose words."""
    assert planted["chapters/reading.html"] == []
    reading = planted["_shapes"]["chapters/reading.html"]["reading"]
    assert (reading["prose_chars"], reading["input_chars"], reading["output_chars"], reading["words"]) == (299, 100, 50, 50)
    assert reading["prose_share"] == pytest.approx(299 / 449)


def test_missing_chromium_gives_a_clear_message(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(ChromiumNotFound, match="Chromium not found at /nowhere/chromium: run `make chromium`"):
        check_site(tmp_path, chromium="/nowhere/chromium")
    assert browser_check.main([str(tmp_path), "--chromium", "/nowhere/chromium"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "make chromium" in err


# ---- hygiene ---------------------------------------------------------------------------------

def notebook(path: Path, *, parameters: bool = True, outputs: bool = False) -> Path:
    """Write a small notebook (nbformat 4.5, so cells have ids)."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('PROFILE = "full"')
    if parameters:
        params.metadata["tags"] = ["parameters"]
    code = nbformat.v4.new_code_cell("print(1)")
    if outputs:
        code.execution_count = 1
        code.outputs = [nbformat.v4.new_output("stream", text="1\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# T"), params, code]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_clean_notebook_passes(tmp_path: Path) -> None:
    assert check_notebook(notebook(tmp_path / "a.ipynb")) == []


def test_display_math_must_be_its_own_paragraph(tmp_path: Path) -> None:
    path = notebook(tmp_path / "m.ipynb")
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = "# T\n\nthe batch holds\n$$B = \\sum_r l_r$$\nwhere r runs over requests"
    nbformat.write(nb, path)
    problems = check_notebook(path)
    assert len(problems) == 1 and "cell 0: display math" in problems[0] and "blank line" in problems[0]
    nb.cells[0].source = "# T\n\nthe batch holds\n\n$$B = \\sum_r l_r$$\n\nwhere r runs over requests"
    nbformat.write(nb, path)
    assert check_notebook(path) == []


@pytest.mark.parametrize("cell_type, source, expect", [
    ("markdown", "DSpark gains {glue:md}`gain` over DFlash.", "MyST role"),
    ("markdown", "The {term}`drafter <Target / drafter>` drafts; the paper: {paper}`4.80`.", "MyST role"),
    ("markdown", "## Exercises\n\n````{admonition} Solutions\n:class: dropdown\n1. Yes.\n````", "MyST directive"),
    ("markdown", "```{note}\nA note.\n```", "MyST directive"),
    ("code", "results.glue('gain', 0.16)", "a glue call"),
    ("code", "\n".join(f"x{i} = {i}" for i in range(31)), "31 lines of code"),
    ("code", "x = '" + "a" * 80 + "'", "wider than the page's code column"),
])
def test_what_only_the_rendered_book_can_read_is_refused(tmp_path: Path, cell_type: str, source: str,
                                                         expect: str) -> None:
    """A chapter reads the same in a notebook viewer: no MyST roles or directives, no glue, no code cell over
    30 lines; a plain code fence and a <details> block are fine."""
    path = notebook(tmp_path / "r.ipynb")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell(source) if cell_type == "markdown" else nbformat.v4.new_code_cell(source))
    nbformat.write(nb, path)
    problems = check_notebook(path)
    assert len(problems) == 1 and expect in problems[0] and "cell 3" in problems[0], problems
    nb.cells[-1].source = ("DSpark's [**drafter**](92_glossary.md) (the paper: 4.80)\n\n```python\nx = 1\n```\n\n"
                           "<details>\n<summary>Solutions</summary>\n\n1. Yes.\n\n</details>" if cell_type == "markdown"
                           else "\n".join(f"x{i} = {i}" for i in range(30)))
    nbformat.write(nb, path)
    assert check_notebook(path) == []
    if "column" in expect:  # a cell the book does not show may be wide
        nb.cells[-1].source, nb.cells[-1].metadata["tags"] = source, ["hide-input"]
        nbformat.write(nb, path)
        assert check_notebook(path) == []


def test_missing_parameters_cell_is_named(tmp_path: Path) -> None:
    problems = check_notebook(notebook(tmp_path / "02_x.ipynb", parameters=False), "chapters/02_x.ipynb")
    assert len(problems) == 1
    assert "chapters/02_x.ipynb" in problems[0] and "`parameters`" in problems[0] and "none" in problems[0]


def test_outputs_and_counts_are_reported(tmp_path: Path) -> None:
    problems = check_notebook(notebook(tmp_path / "b.ipynb", outputs=True))
    assert any("have outputs" in p for p in problems)
    assert any("execution counts" in p for p in problems)


def test_missing_ids_are_reported(tmp_path: Path) -> None:
    path = notebook(tmp_path / "c.ipynb")
    raw = json.loads(path.read_text())
    raw["nbformat_minor"] = 4
    for cell in raw["cells"]:
        del cell["id"]
    path.write_text(json.dumps(raw))
    assert any("have no id" in p for p in check_notebook(path))


def test_toc_and_chapters_must_match(tmp_path: Path) -> None:
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: chapters/00_a\nchapters:\n  - file: chapters/01_b\n")
    notebook(tmp_path / "chapters" / "00_a.ipynb")
    notebook(tmp_path / "chapters" / "02_stray.ipynb")
    assert [p.as_posix() for p in toc_notebooks(tmp_path)] == ["chapters/00_a.ipynb", "chapters/01_b.ipynb"]
    problems = check_book(tmp_path)
    assert any("lists chapters/01_b.ipynb but there is no such file" in p for p in problems)
    assert any("chapters/02_stray.ipynb is not in _toc.yml" in p for p in problems)


def test_markdown_pages_are_pages_not_notebooks(tmp_path: Path) -> None:
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: chapters/00_a\nchapters:\n  - file: chapters/92_glossary\n")
    notebook(tmp_path / "chapters" / "00_a.ipynb")
    (tmp_path / "chapters" / "92_glossary.md").write_text("# Glossary\n")
    (tmp_path / "chapters" / "93_stray.md").write_text("# Stray\n")
    assert [p.as_posix() for p in toc_notebooks(tmp_path)] == ["chapters/00_a.ipynb"]
    assert [p.as_posix() for p in toc_markdown(tmp_path)] == ["chapters/92_glossary.md"]
    assert check_book(tmp_path) == ["chapters/93_stray.md is not in _toc.yml; add it (or delete the file)"]


# ---- notebook runner -------------------------------------------------------------------------

def test_failing_notebook_names_the_cell_and_exception(tmp_path: Path) -> None:
    src = notebook(tmp_path / "bad.ipynb")
    nb = nbformat.read(src, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("raise ValueError(f'boom in {PROFILE}')"))
    nbformat.write(nb, src)
    with pytest.raises(NotebookFailed) as e:
        run_notebook(src, tmp_path / "out" / "bad.ipynb", "smoke", tmp_path / "results", timeout=120)
    assert "bad.ipynb: cell 3" in str(e.value) and "ValueError: boom in smoke" in str(e.value)
    assert (tmp_path / "out" / "bad.ipynb").is_file()  # partial output kept for inspection


def test_a_silent_cell_is_stopped_but_a_cell_that_progresses_is_not(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = notebook(tmp_path / "slow.ipynb")
    nb = nbformat.read(src, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(  # prints every 0.5 s for 6 s: twice the stall limit
        "import time\nfrom tqdm.auto import tqdm\nprint('train x: resuming from the checkpoint at step 3 of 9')\n"
        "for _ in tqdm(range(12), mininterval=0):\n    time.sleep(0.5)"))
    nbformat.write(nb, src)
    run_notebook(src, tmp_path / "out" / "slow.ipynb", "smoke", tmp_path / "results", stall=3)
    assert "[slow] train x: resuming from the checkpoint at step 3 of 9" in capsys.readouterr().out
    text = "".join(o.get("text", "") for o in nbformat.read(tmp_path / "out" / "slow.ipynb", 4).cells[-1].outputs)
    assert "12/12" in text and "it/s" in text, "the executed notebook keeps the bar's last line, with its rate"

    nb.cells.append(nbformat.v4.new_code_cell("time.sleep(60)"))
    nbformat.write(nb, src)
    with pytest.raises(NotebookFailed, match=r"cell 4 \(id .*\) printed nothing for 3 s \(--stall\)"):
        run_notebook(src, tmp_path / "out" / "slow.ipynb", "smoke", tmp_path / "results", stall=3)


def test_a_failed_chapter_is_rendered_under_a_banner(tmp_path: Path) -> None:
    from ci.build_book import _hide_injected_parameters, failure_banner

    src = notebook(tmp_path / "bad.ipynb")
    entry = {"status": "failed", "error": "bad.ipynb: cell 3 (id x) raised ValueError: `boom`",
             "rerun": "python ci/run_notebooks.py --profile full --out _build/executed --only bad"}
    _hide_injected_parameters(src, tmp_path / "staged.ipynb", failure_banner(entry))
    first = nbformat.read(tmp_path / "staged.ipynb", 4).cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("```{error}")
    assert "ValueError: 'boom'" in first.source and "--only bad" in first.source
    never = failure_banner({"status": "not run", "rerun": "python ci/run_notebooks.py --only later"})
    assert "did not run" in never and "--only later" in never



def test_output_noise_is_found(tmp_path: Path) -> None:
    """Two progress bars in one cell, warning text, stderr, or a raw repr (a returned string, a path,
    np.True_) fail; one bar and plain text pass."""
    bar = "train: 100%|##########| 12/12 [00:03<00:00,  3.9it/s]"
    nb = nbformat.v4.new_notebook()
    clean = nbformat.v4.new_code_cell("train()")
    clean.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"\r{bar}\nDone: tau 4.6\n")]
    two = nbformat.v4.new_code_cell("train(); measure()")
    two.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{bar}\nmeasure: 100%|###| 3/3 [00:01<00:00]\n")]
    warned = nbformat.v4.new_code_cell("fit()")
    warned.outputs = [nbformat.v4.new_output("stream", name="stderr", text="UserWarning: the fit fell back\n")]
    returned = nbformat.v4.new_code_cell("results.glue_old('k', 'beats')")
    returned.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "'beats'"}, execution_count=1)]
    path_shown = nbformat.v4.new_code_cell("save_result(...)")
    path_shown.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "PosixPath('r.json')"},
                                                 execution_count=2)]
    verdict = nbformat.v4.new_code_cell("print(ok)")
    verdict.outputs = [nbformat.v4.new_output("stream", name="stdout", text="goal met: np.True_\n")]
    nb.cells = [clean, two, warned, returned, path_shown, verdict]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    problems = output_problems(path, "x")
    assert len(problems) == 6
    assert all("shows a raw repr" in p for p in problems[3:]), problems[3:]
    assert "cell 1 (id " in problems[0] and "shows 2 progress bars" in problems[0]
    assert "cell 2 (id " in problems[1] and "prints a warning" in problems[1]
    assert "cell 2 (id " in problems[2] and "writes to stderr" in problems[2]


def test_machine_paths_in_outputs_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output that shows a path of the build machine fails, wherever it shows it (a print, a
    table's HTML, a glued phrase); relative paths, $DSPARK_RESULTS/... and URLs pass."""
    cache = tmp_path / "artifact-cache"
    monkeypatch.setenv("DSPARK_CACHE", str(cache))
    nb = nbformat.v4.new_notebook()
    clean = nbformat.v4.new_code_cell("print(where)")
    clean.outputs = [nbformat.v4.new_output("stream", name="stdout", text=(
        "wrote $DSPARK_RESULTS/engines/sglang_sts.json and data/results/gpu.json; "
        "see https://example.org/work/home/x and a temporary folder (tmpab12)\n"))]
    repo = nbformat.v4.new_code_cell("print(corpus_dir)")
    repo.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"records in {REPO}/.cache/dspark/corpus-1\n")]
    tmp = nbformat.v4.new_code_cell("display(table)")
    tmp.outputs = [nbformat.v4.new_output("display_data", data={"text/html": "<td>/tmp/tmpx9/result.json</td>",
                                                                "text/plain": "table"})]
    glued = nbformat.v4.new_code_cell("results.glue('where', cache_dir())")
    glued.outputs = [nbformat.v4.new_output("display_data", data={"text/markdown": f"{cache}/drafter-abc"})]
    home = nbformat.v4.new_code_cell("print(p)")
    home.outputs = [nbformat.v4.new_output("stream", name="stdout", text="saved to /home/builder/out.json\n")]
    nb.cells = [clean, repo, tmp, glued, home]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    problems = output_problems(path, "x")
    assert [p.split(" (id ")[0] for p in problems] == ["x: cell 1", "x: cell 2", "x: cell 3", "x: cell 4"], problems
    assert all("prints a path of the build machine" in p for p in problems), problems
    assert "/tmp/tmpx9/result.json" in problems[1] and str(cache) in problems[2] and "/home/builder" in problems[3]


def test_a_nested_bar_counts_its_steps_once() -> None:
    """In the book build a bar inside another writes into the outer one's line. A caller that
    updates it by the difference to a running total (a training's workers, counted in a shared
    value) must see its count advance: the build once showed "294250/3200" for 3,200 steps."""
    import subprocess
    import sys

    code = f"""
exec(open({str(REPO / "ci" / "kernel_setup.py")!r}).read())
import io
from tqdm.auto import tqdm
outer = tqdm(total=2, desc="figure", file=io.StringIO())
inner = tqdm(total=30, desc="train")
for done in (10, 20, 30):
    inner.update(done - inner.n)
print(inner.n, inner._count)
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO)}).stdout.split()
    assert out == ["30", "30"], out


def _figure_png(width_in: float, legend_pt: float | None) -> bytes:
    """A figure saved as the book build saves it: through ci/kernel_setup.py's hook (run in a fresh
    interpreter, since the hook patches matplotlib for the whole process)."""
    import subprocess
    import sys

    code = f"""
import io, sys
exec(open({str(REPO / "ci" / "kernel_setup.py")!r}).read())
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=({width_in}, 3), dpi=100)
ax.plot([0, 1], [0, 1], label="DSpark")
ax.set_title("tau by domain", fontsize=12)
if {legend_pt!r} is not None:
    ax.legend(fontsize={legend_pt!r})
buf = io.BytesIO()
fig.canvas.print_figure(buf, format="png", dpi=100, bbox_inches="tight")
sys.stdout.buffer.write(buf.getvalue())
"""
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          env={"PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}).stdout


def test_figures_too_wide_or_with_small_text_are_found(tmp_path: Path) -> None:
    """The build stores each figure's width and smallest text in its PNG; a figure wider than the
    page, or whose text renders below 9 px once scaled to the page, fails with the text named."""
    import base64

    from dspark_lite.harness.book import plots

    good, wide, tiny = _figure_png(6.5, 11), _figure_png(18, 11), _figure_png(6.5, 6)
    report, width = plots.png_report(good)
    assert report["width_in"] == 6.5 and report["min_font_pt"] == 11 and 500 < width <= 650, (report, width)
    nb = nbformat.v4.new_notebook()
    for image in (good, wide, tiny):
        cell = nbformat.v4.new_code_cell("plt.show()")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(image).decode(),
                                                                     "text/plain": "<Figure>"})]
        nb.cells.append(cell)
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    problems = output_problems(path, "x")
    assert len(problems) == 3, problems
    assert problems[0].startswith("x: cell 1 ") and "18 in wide, wider than the page" in problems[0]
    assert problems[1].startswith("x: cell 1 ") and "'DSpark', 11 pt) renders at" in problems[1]
    assert problems[2].startswith("x: cell 2 ") and "'DSpark', 6 pt) renders at 8.3 px" in problems[2]


def test_figure_problems_name_a_figure_the_page_cannot_show() -> None:
    """plots.figure_report + figure_problems: a 6.5-inch figure with the theme's fonts passes; 12 inches or 6-pt text do not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dspark_lite.harness.book import plots

    plots.set_theme()
    fig, ax = plt.subplots(figsize=(6.5, 3))
    ax.plot([0, 1], label="a")
    ax.legend()
    report = plots.figure_report(fig)
    assert report["min_font_image_px"] >= 9 and plots.figure_problems(report) == []
    ax.legend(fontsize=6)
    assert any("renders at 8.3 px" in p for p in plots.figure_problems(plots.figure_report(fig)))
    fig.set_figwidth(12)
    ax.legend()
    assert any("12 in wide" in p for p in plots.figure_problems(plots.figure_report(fig)))
    plt.close(fig)


def test_the_runner_drops_the_blank_line_a_transient_bar_leaves() -> None:
    import nbformat

    from ci.run_notebooks import drop_blank_streams

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=" " * 88 + "\r"),
                    nbformat.v4.new_output("stream", name="stdout", text="done\n")]
    nb.cells = [cell, nbformat.v4.new_markdown_cell("text")]
    drop_blank_streams(nb)
    assert [out["text"] for out in nb.cells[0].outputs] == ["done\n"]


def test_glossary_links_go_to_their_term(tmp_path: Path) -> None:
    """Issue 64: a link to the glossary lands on its term's entry, matched by its words (name, alias in
    parentheses, plural); a link no term matches is reported and left as it was."""
    from ci.build_book import link_glossary_terms

    (tmp_path / "92_glossary.html").write_text(
        '<dl><dt id="term-Anchor">Anchor<a class="headerlink" href="#term-Anchor">#</a></dt>'
        '<dt id="term-Markov-head-RNN-head">Markov head (RNN head)</dt>'
        '<dt id="term-Target-drafter">Target, drafter</dt></dl>')
    link = '<a class="reference internal" href="92_glossary.html"><span class="std std-doc"><strong>{}</strong></span></a>'
    page = tmp_path / "04.html"
    page.write_text(" ".join(link.format(t) for t in ("anchors", "RNN head", "drafters", "the moon")))
    assert link_glossary_terms(tmp_path) == ["the moon"]
    text = page.read_text()
    for anchor in ("term-Anchor", "term-Markov-head-RNN-head", "term-Target-drafter"):
        assert f'href="92_glossary.html#{anchor}"' in text
    assert text.count('href="92_glossary.html"') == 1  # the moon's link still opens the glossary
