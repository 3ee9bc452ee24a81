"""Open every page of the rendered book in a real browser and fail on what a reader would see.

    python ci/browser_check.py _build/html [--screenshots _build/screenshots]

Serves HTML_DIR on 127.0.0.1 and drives Debian's Chromium (Playwright's sync API, no downloaded
browser). A page fails on: a request to any non-local URL (aborted and recorded: the book must
work offline), a local file that does not load, an image that does not load, a JavaScript error,
a Python traceback or error output, widgets or math that do not render, TeX source left as text
outside code (a `$`, `\\command`, `_{` or `^{` that MathJax never typeset), a figure whose smallest
text renders below 9 px (the size the build measured in the PNG, ci/kernel_setup.py, scaled by the
width the browser shows it at; an interactive figure's SVG text, its font size times the scale the
browser draws it at), a visible icon whose webfont did not load, and, for a chapter page, no
figure (an <img> or inline <svg> in a cell output or a figure), an output block or a display
formula wider than the page column, an empty output box, a table column header that is a code name, and the placeholder
$DSPARK_RESULTS in an output. A redirect page (Jupyter
Book's index.html) only needs its target to exist. A full-page screenshot of every other page is
saved in the screenshot folder.

Every page's shape is reported, printed and written to SCREENSHOTS/page_shape.json: the share of
its height that is code (visible input cells) and, per figure, its natural and displayed width and
the size in px of its smallest text; for a chapter, how it reads (JS_READING): its prose share of
the visible text, its prose words.

Interactive figures (Vega-Lite, `dspark_lite/harness/book/interactive.py`): every control of every
figure is moved as a reader moves it, with the mouse and the keyboard (a slider: its thumb dragged
to the right end, then Home; a select: its first two options picked), it must then show that
value, and the figure's SVG must change between the two, with no console error; the figure is screenshotted in both states
(<page>__fig<i>__<control>_<state>.png). A page with an interactive figure must weigh under
PAGE_LIMIT_BYTES with everything it loads. The notebooks the site offers for download (its
_sources copies) must draw their figures outside the site: none may load from _static/vega, and
each interactive figure carries a static image (ci/vega_figures.py, `download_problems`).
"""
from __future__ import annotations

import argparse
import functools
import http.server
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, toc_notebooks

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
NOT_PAGES = {"genindex.html", "search.html", "py-modindex.html"}
NOT_PAGE_DIRS = {"_static", "_sources", "_images", "_downloads", "_panels_static"}
WAIT_MS = 15_000
PAGE_LIMIT_BYTES = 5 * 2**20  # a page with interactive figures, everything it loads included
KNOWN_CONSOLE_ERRORS = (
    "favicon.ico", "404",  # a missing favicon; other 404s are reported from the responses
    "Got invalid theme mode",  # pydata-sphinx-theme, on a browser profile with no stored light/dark mode
)

# Run in the page; each returns JSON-able data.
JS_BROKEN_IMAGES = """() => Array.from(document.images)
    .filter(i => !i.complete || i.naturalWidth === 0).map(i => i.currentSrc || i.src)"""
JS_ERROR_OUTPUTS = """() => [
    document.querySelectorAll('.output.traceback, .output.error').length,
    document.body.innerText.includes('Traceback (most recent call last)'),
    document.body.innerText.includes('An Exception was encountered at')]"""
JS_FIGURES = """() => Array.from(document.querySelectorAll(
    '.cell_output img, .cell_output svg, .output img, .output svg, figure img, figure svg'))
    .filter(e => e.tagName.toLowerCase() !== 'img' || e.naturalWidth > 0).length"""
JS_WIDGETS_RENDERED = """() => {
    const views = document.querySelectorAll(
        'script[type="application/vnd.jupyter.widget-view+json"]').length;
    const shown = Array.from(document.querySelectorAll('.widget-subarea'))
        .filter(e => e.children.length > 0).length;
    return views === 0 || shown >= views;
}"""
JS_MATH_RENDERED = """() => document.querySelectorAll('.math').length === 0
    || document.querySelectorAll('mjx-container').length > 0"""
# Text a reader sees that is still TeX: everything but code, typeset math and scripts, searched for
# a dollar sign, a backslash command, or a sub/superscript group.
JS_LITERAL_TEX = r"""() => {
    const skip = 'pre, code, kbd, samp, script, style, mjx-container, .highlight, .cell_input, .MathJax';
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const tex = /\$|\\[A-Za-z]+|[_^]\{/;
    const found = [];
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const parent = n.parentElement;
        if (!parent || parent.closest(skip) || parent.offsetParent === null) continue;
        const m = n.textContent.match(tex);
        if (m) {
            const i = Math.max(0, m.index - 30);
            found.push(n.textContent.slice(i, m.index + 40).replace(/\s+/g, ' ').trim());
        }
    }
    return found;
}"""
# What a reader sees of code and figures: the height of the visible input cells against the page's,
# and each cell-output image's natural and displayed width (a hidden input has no height).
JS_PAGE_SHAPE = """() => {
    const inputs = Array.from(document.querySelectorAll('.cell_input'))
        .filter(e => e.offsetParent !== null && !e.closest('details:not([open])'))
        .reduce((sum, e) => sum + e.getBoundingClientRect().height, 0);
    const images = Array.from(document.querySelectorAll('.cell_output img, figure img'))
        .filter(i => i.naturalWidth > 0)
        .map(i => ({src: i.getAttribute('src'), natural: i.naturalWidth,
                    shown: i.getBoundingClientRect().width}));
    return {page: document.documentElement.scrollHeight, code: inputs, images: images};
}"""
# Each interactive figure's smallest text as the reader sees it: an SVG text's font size times the
# scale from its user units to screen pixels (the chart may be shrunk to the page's width).
JS_CHART_FONTS = """() => Array.from(document.querySelectorAll('.vega-embed svg')).map((svg, i) => {
    const sizes = Array.from(svg.querySelectorAll('text'))
        .filter(t => t.textContent.trim() && t.getBBox().width > 0)
        .map(t => { const m = t.getScreenCTM();
                    return {px: parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b),
                            text: t.textContent.trim().slice(0, 40)}; });
    if (!sizes.length) return null;
    const least = sizes.reduce((a, b) => (a.px <= b.px ? a : b));
    return {chart: i + 1, font_px: Math.round(least.px * 10) / 10, smallest_text: least.text,
            shown_px: Math.round(svg.getBoundingClientRect().width)};
}).filter(x => x)"""
# How a chapter reads (measured on the page as a reader sees it, inside the article): characters of
# visible text that is prose (markdown, glued values, headings, Markdown outputs) against code-cell inputs and outputs
# (folded cells, figures, scripts and toggle labels not counted); prose words; every output block
# wider than the column or scrolled sideways, and every display formula so; empty output boxes; column headers that are code
# names (snake_case with a word of three letters or more); and the results placeholder in outputs.
JS_READING = r"""() => {
    const article = document.querySelector('article.bd-article') || document.body;
    const skip = 'script, style, svg, .vega-embed, mjx-container, .headerlink, button, summary';
    const counts = {prose: 0, input: 0, output: 0};
    let words = 0;
    const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        const el = n.parentElement;
        if (!el || el.closest(skip) || el.offsetParent === null) continue;
        if (el.closest('details:not([open])')) continue;
        const t = n.textContent.replace(/\s+/g, ' ').trim();
        if (!t) continue;
        // a Markdown output (what a run measured, said in words: results.say) is prose; myst-nb renders
        // it as paragraphs straight in the cell's output box, every other output inside a div.output
        const said = el.closest('.cell_output') && !el.closest('.output, pre, table, .vega-embed, .widget-subarea');
        const kind = el.closest('.cell_input') ? 'input' : (el.closest('.cell_output') && !said) ? 'output' : 'prose';
        counts[kind] += t.length;
        if (kind === 'prose') words += t.split(' ').filter(w => /[A-Za-z]/.test(w)).length;
    }
    const column = article.getBoundingClientRect();
    const wide = [], codeScrolls = [], outputs = Array.from(article.querySelectorAll('.cell_output')).filter(o => o.offsetParent !== null);
    let empty = 0;
    // the text an output holds, without its style sheets, scripts and buttons: asked beside innerText,
    // which is '' for content the browser has not laid out yet (a long page's code far below), while a
    // widget's only words may sit in its buttons
    const ownText = el => {
        let text = '';
        const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        for (let n = w.nextNode(); n; n = w.nextNode()) if (!n.parentElement.closest('style, script, button')) text += n.textContent;
        return text;
    };
    const media = 'img, svg, canvas, iframe, table, .widget-subarea, .vega-embed';
    for (const out of outputs) {
        for (const e of out.querySelectorAll('*')) {
            // typeset math in a Markdown output (its .math span, MathJax's container): MathJax clips its hidden
            // assistive copy on purpose, and a display formula too wide for the column is counted with the
            // others (wideMath)
            if (e.closest('mjx-container, .math')) continue;
            const r = e.getBoundingClientRect();
            if (r.width === 0) continue;
            const ox = getComputedStyle(e).overflowX;
            const scrolled = e.scrollWidth > e.clientWidth + 2 && ['auto', 'scroll', 'hidden'].includes(ox);
            // shown source scrolls inside its own block rather than wrap (book.css): allowed, and counted
            const block = e.closest('div.highlight pre');
            if (block && getComputedStyle(block).overflowX === 'auto' && block.getBoundingClientRect().right <= column.right + 2) {
                if (e === block && e.scrollWidth > e.clientWidth + 2) codeScrolls.push(Math.round(e.scrollWidth));
                continue;
            }
            if (scrolled || r.right > column.right + 2) {
                wide.push({px: Math.round(Math.max(e.scrollWidth, r.width)), text: (e.innerText || '').trim().slice(0, 60)});
                break;
            }
        }
        for (const o of out.children) {  // a copy button (its icon, its tooltip) is not content: a blank stream with one is empty
            const shown = o.matches(media) || Array.from(o.querySelectorAll(media)).some(m => !m.closest('button'));
            if (!(o.innerText || '').trim() && !ownText(o).trim() && !shown) empty += 1;
        }
    }
    const code = /^[a-z][a-z0-9]*(_[a-z0-9]+)+$/i;
    const headers = Array.from(article.querySelectorAll('thead th')).map(th => th.innerText.trim())
        .filter(t => code.test(t) && t.split('_').some(part => part.length >= 3));
    const wideMath = Array.from(article.querySelectorAll("mjx-container[display='true']"))
        .filter(e => e.offsetParent !== null)
        .filter(e => e.scrollWidth > e.clientWidth + 2 || e.getBoundingClientRect().right > column.right + 2)
        .map(e => Math.round(Math.max(e.scrollWidth, e.getBoundingClientRect().width)));
    const total = counts.prose + counts.input + counts.output;
    return {column_px: Math.round(column.width), prose_chars: counts.prose, input_chars: counts.input,
            output_chars: counts.output, prose_share: total ? counts.prose / total : 1, words: words,
            wide: wide, code_scrolls: codeScrolls, wide_math: wideMath, empty: empty, code_headers: Array.from(new Set(headers)),
            placeholder: outputs.some(o => (o.innerText || '').includes('$DSPARK_RESULTS'))};
}"""
MIN_FONT_PX = 9.0  # dspark_lite.harness.book.plots.MIN_FONT_PX (not imported: the check runs without the package)
SHAPE_FILE = "page_shape.json"
REDIRECT = re.compile(r"""<meta[^>]+http-equiv=["']?refresh["']?[^>]*url=([^"'>\s]+)""", re.I)


JS_VEGA_READY = """() => Array.from(document.querySelectorAll('.vega-embed'))
    .every(e => e.querySelector('svg, canvas'))"""
# Icons a reader sees (the theme's Font Awesome classes) whose glyph font has not loaded: drawn as
# empty boxes. The theme's stylesheet draws them from its webfonts (ci/sphinxext/book_fixes.py).
JS_ICONS_MISSING = """async () => {
    await document.fonts.ready;
    const icons = Array.from(document.querySelectorAll('.fa-solid, .fa-regular, .fa-brands, .fas, .far, .fab'))
        .filter(e => e.offsetParent !== null);
    const loaded = new Set(Array.from(document.fonts).filter(f => f.status === 'loaded')
        .map(f => f.family.replace(/["']/g, '')));
    return icons.filter(e => !getComputedStyle(e, '::before').fontFamily.split(',')
        .some(f => loaded.has(f.replace(/["']/g, '').trim()))).map(e => e.className);
}"""


def _drive_interactive(page: Any, rel: str, screenshot_dir: Path | None) -> tuple[list[str], list[str]]:
    """Move every control of every Vega-Lite figure on the page to two values; (problems, what was
    driven). A control whose two values draw the same SVG is a broken control."""
    found, driven = [], []
    figures = page.locator(".vega-embed")
    for i in range(figures.count()):
        figure = figures.nth(i)
        controls = figure.locator(".vega-bindings input, .vega-bindings select")
        if controls.count() == 0:
            continue
        for j in range(controls.count()):
            control = controls.nth(j)
            name = (control.get_attribute("name") or f"control{j}").strip()
            moves = _reader_moves(page, control)
            values = [value for value, _ in moves]
            drawn = []
            for k, (value, move) in enumerate(moves):
                move()
                page.wait_for_timeout(250)
                now = control.input_value()
                if now != value and not _same_number(now, value):
                    found.append(f"interactive figure {i}: `{name}` shows {now} after a reader moved it to {value}")
                drawn.append(figure.locator("svg").first.inner_html())
                if screenshot_dir is not None:
                    stem = rel.removesuffix(".html").replace("/", "__")
                    safe = "".join(ch if ch.isalnum() else "_" for ch in name)
                    figure.screenshot(path=str(Path(screenshot_dir) / f"{stem}__fig{i}__{safe}_{k}.png"))
            driven.append(f"figure {i} {name}: {values}")
            if len(values) < 2 or drawn[0] == drawn[1]:
                found.append(f"interactive figure {i}: moving `{name}` to {values} did not change what is drawn")
    return found, driven


def _reader_moves(page: Any, control: Any) -> list[tuple[str, Any]]:
    """Two moves a reader makes with a control, each with the value it should leave: a select's
    first two options picked; a slider's thumb dragged past the right end of its track with the
    mouse (its max), then the Home key (its min)."""
    if control.evaluate("el => el.tagName") == "SELECT":
        options = control.evaluate("el => Array.from(el.options).map(o => o.value)")[:2]
        return [(value, lambda k=k: control.select_option(index=k)) for k, value in enumerate(options)]

    def drag_to_right_end() -> None:
        control.scroll_into_view_if_needed()
        box = control.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] + 20, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()

    def press_home() -> None:
        control.focus()
        page.keyboard.press("Home")

    return [(control.get_attribute("max"), drag_to_right_end), (control.get_attribute("min"), press_home)]


def _same_number(a: str, b: str) -> bool:
    """True when two control values are the same number ("0.9" and "0.90")."""
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def _body_size(response: Any) -> int:
    """Bytes of a response's body (0 for a redirect or an aborted request)."""
    try:
        return len(response.body())
    except Exception:  # Playwright raises for responses without a body
        return 0


class ChromiumNotFound(RuntimeError):
    """Chromium is not where we were told to find it, or does not start."""


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve `directory` on 127.0.0.1 (a random free port) in a thread; yield the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep the test output readable
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def site_pages(html_dir: Path) -> list[str]:
    """Every content page of a built site (relative paths), index first."""
    pages = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                   if p.name not in NOT_PAGES
                   and not NOT_PAGE_DIRS & set(p.relative_to(html_dir).parts))
    return sorted(pages, key=lambda p: p != "index.html")


def toc_pages(root: Path = REPO) -> list[str]:
    """The book's notebook pages as the toc lists them (preface included): each must show a figure.
    Markdown pages (the appendices) are checked like every page, but need no figure."""
    return [f"{nb.with_suffix('').as_posix()}.html" for nb in toc_notebooks(root)]


def _redirect_target(path: Path) -> str | None:
    """Where a meta-refresh page (Jupyter Book's index.html) sends the reader, else None."""
    m = REDIRECT.search(path.read_text(encoding="utf-8", errors="replace"))
    return m.group(1).split("#")[0] if m else None


def _is_local(url: str) -> bool:
    """True for URLs that stay on this machine (the test server, data:, blob:, about:)."""
    parts = urlsplit(url)
    return parts.scheme in ("data", "blob", "about") or parts.hostname in ("127.0.0.1", "localhost")


def check_site(html_dir: Path, screenshot_dir: Path | None = None, *,
               chapters: list[str] | None = None, chromium: str = CHROMIUM,
               wait_ms: int = WAIT_MS) -> list[str]:
    """Open every page of `html_dir` in Chromium; return human-readable problems (empty: all good).

    `chapters` are the pages that must show a figure (default: every page but the index);
    each of them must exist. `wait_ms` bounds each wait (network idle; widgets and math
    rendered). Raises `ChromiumNotFound` when Chromium is missing or won't start.
    """
    html_dir = Path(html_dir)
    if not Path(chromium).is_file():
        raise ChromiumNotFound(f"Chromium not found at {chromium}: run `make chromium` "
                               "or `apt-get install chromium`")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    pages = site_pages(html_dir)
    problems: list[str] = []
    shapes: dict[str, dict] = {}
    if not pages:
        return [f"{html_dir}: no HTML pages (was the book built?)"]
    if chapters is None:
        chapters = [p for p in pages if p != "index.html"]
    problems += [f"{c}: chapter page missing from the build" for c in chapters if c not in pages]
    from ci.vega_figures import download_problems

    problems += download_problems(html_dir)
    if screenshot_dir is not None:
        Path(screenshot_dir).mkdir(parents=True, exist_ok=True)

    with serve(html_dir) as base, tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        try:
            context = pw.chromium.launch_persistent_context(
                profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 900}, service_workers="block")
        except PlaywrightError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ChromiumNotFound(f"Chromium at {chromium} did not start: {first}") from None
        try:
            for rel in pages:
                target = _redirect_target(html_dir / rel)
                if target is None:
                    problems += _check_page(context, base, rel, rel in chapters, screenshot_dir, wait_ms, shapes, html_dir)
                elif not (html_dir / rel).parent.joinpath(target).is_file():
                    problems.append(f"{rel}: redirects to {target}, which does not exist")
        finally:
            context.close()
    if shapes:
        print(page_shapes_summary(shapes))
        if screenshot_dir is not None:
            import json

            (Path(screenshot_dir) / SHAPE_FILE).write_text(json.dumps(shapes, indent=1) + "\n")
    return problems


def figure_fonts(html_dir: Path, rel: str, images: list[dict]) -> list[dict]:
    """Each image with the smallest text the build measured in it (the PNG text chunk that
    ci/kernel_setup.py writes) scaled by how the browser shows it: font_px = the text's size in
    image pixels * displayed width / natural width. None where the image carries no measurement."""
    import json
    from urllib.parse import unquote

    from PIL import Image

    out = []
    for image in images:
        path = (Path(html_dir) / rel).parent / unquote(image["src"].split("?")[0])
        report = None
        try:
            with Image.open(path) as png:
                text = png.info.get("dspark-figure")
            report = json.loads(text) if text else None
        except (OSError, ValueError):
            pass
        px = report.get("min_font_image_px") if report else None
        scale = image["shown"] / image["natural"] if image["natural"] else 1.0
        out.append({"image": Path(path).name, "natural_px": image["natural"], "shown_px": round(image["shown"]),
                    "width_in": report.get("width_in") if report else None,
                    "smallest_text": report.get("min_font_text") if report else None,
                    "font_px": None if px is None else round(px * scale, 1)})
    return out


def page_shapes_summary(shapes: dict[str, dict]) -> str:
    """A table: per page, the share of its height that is code and its smallest figure text."""
    lines = [f"{'page':<34}{'code share':>11}{'figures':>9}{'smallest text (px)':>20}{'prose share':>13}{'words':>7}"]
    for rel, shape in shapes.items():  # figures: images and charts; prose share and words: chapters only
        fonts = [f["font_px"] for f in shape["figures"] if f["font_px"] is not None]
        fonts += [c["font_px"] for c in shape.get("charts", [])]
        reading = shape.get("reading")
        lines.append(f"{rel:<34}{shape['code_share']:>10.0%} {len(shape['figures']) + len(shape.get('charts', [])):>8}"
                     f"{min(fonts) if fonts else float('nan'):>20.1f}"
                     + (f"{reading['prose_share']:>12.0%} {reading['words']:>6}" if reading else ""))
    return "\n".join(lines)


def _check_page(context: Any, base: str, rel: str, needs_figure: bool,
                screenshot_dir: Path | None, wait_ms: int, shapes: dict | None = None,
                html_dir: Path | None = None) -> list[str]:
    """Load one page, wait for it to settle, and list what is wrong with it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    found: list[str] = []
    page = context.new_page()

    def route(r: Any) -> None:
        if _is_local(r.request.url):
            r.continue_()
        else:
            found.append(f"request to a non-local URL: {r.request.url}")
            r.abort()

    def on_response(resp: Any) -> None:
        if resp.status >= 400 and not resp.url.endswith("/favicon.ico"):
            found.append(f"HTTP {resp.status} for {resp.url.removeprefix(base)}")

    def on_failed(req: Any) -> None:
        if _is_local(req.url) and not req.url.endswith("/favicon.ico"):
            found.append(f"failed to load {req.url.removeprefix(base)}: {req.failure}")

    responses: list[Any] = []  # their bodies, summed once the page has settled, are its weight

    page.route("**/*", route)  # routing also turns the browser cache off: every page pays in full
    page.on("response", lambda response: responses.append(response))
    page.on("console", lambda m: found.append(f"console error: {m.text}")
            if m.type == "error" and not any(known in m.text for known in KNOWN_CONSOLE_ERRORS) else None)
    page.on("response", on_response)
    page.on("requestfailed", on_failed)
    page.on("pageerror", lambda e: found.append(f"JavaScript error: {e}"))
    try:
        page.goto(base + rel, wait_until="load")
        try:
            page.wait_for_load_state("networkidle", timeout=wait_ms)
        except PlaywrightTimeout:
            found.append(f"page still loading after {wait_ms / 1000:g} s")
        try:  # one wait for both, then say which one is missing
            page.wait_for_function(f"() => ({JS_WIDGETS_RENDERED})() && ({JS_MATH_RENDERED})()",
                                   timeout=wait_ms)
        except PlaywrightTimeout:
            if not page.evaluate(JS_WIDGETS_RENDERED):
                found.append(f"widgets did not render within {wait_ms / 1000:g} s")
            if not page.evaluate(JS_MATH_RENDERED):
                found.append(f"math did not render (MathJax) within {wait_ms / 1000:g} s")
        found += [f"TeX source shown as text (display math must be a paragraph of its own): ...{t}..."
                  for t in page.evaluate(JS_LITERAL_TEX)[:5]]
        # images may be lazy: ask for all of them, then wait until each has loaded or failed
        page.evaluate("() => Promise.all(Array.from(document.images).map(i => "
                      "{ i.loading = 'eager'; return i.decode().catch(() => null); }))")
        found += [f"image does not load: {src.removeprefix(base)}"
                  for src in page.evaluate(JS_BROKEN_IMAGES)]
        n_err, has_tb, has_pm = page.evaluate(JS_ERROR_OUTPUTS)
        if n_err:
            found.append(f"{n_err} error output(s) (a cell raised)")
        if has_tb or has_pm:
            found.append("a Python traceback is shown in the page")
        found += [f"icon does not render (its webfont did not load): {c}"
                  for c in page.evaluate(JS_ICONS_MISSING)[:5]]
        if needs_figure and page.evaluate(JS_FIGURES) == 0:
            found.append("chapter page without a figure (no <img> or <svg> in a cell output)")
        if page.locator(".vega-embed").count():
            try:
                page.wait_for_function(JS_VEGA_READY, timeout=wait_ms)
            except PlaywrightTimeout:
                found.append(f"interactive figures did not draw within {wait_ms / 1000:g} s")
            weight = [sum(_body_size(r) for r in responses)]
            problems, _ = _drive_interactive(page, rel, screenshot_dir)
            found += problems
            if weight[0] > PAGE_LIMIT_BYTES:
                found.append(f"page weighs {weight[0] / 2**20:.1f} MB with what it loads (limit "
                             f"{PAGE_LIMIT_BYTES / 2**20:g} MB)")
            print(f"{rel}: {page.locator('.vega-embed').count()} interactive figure(s), page weight "
                  f"{weight[0] / 2**20:.2f} MB")
        if shapes is not None and html_dir is not None:
            shape = page.evaluate(JS_PAGE_SHAPE)
            figures = figure_fonts(html_dir, rel, shape["images"])
            charts = page.evaluate(JS_CHART_FONTS)
            shapes[rel] = {"page_px": round(shape["page"]), "code_px": round(shape["code"]),
                           "code_share": shape["code"] / shape["page"] if shape["page"] else 0.0, "figures": figures,
                           "charts": charts}
            found += [f"interactive figure {c['chart']}: its smallest text ({c['smallest_text']!r}) renders at "
                      f"{c['font_px']} px (shown {c['shown_px']} px wide); at least {MIN_FONT_PX:g} px is legible"
                      for c in charts if c["font_px"] < MIN_FONT_PX]
            found += [f"figure {k} ({f['image']}): its smallest text ({f['smallest_text']!r}) renders at {f['font_px']} px "
                      f"(shown {f['shown_px']} px wide of {f['natural_px']}); at least {MIN_FONT_PX:g} px is legible"
                      for k, f in enumerate(figures, start=1) if f["font_px"] is not None and f["font_px"] < MIN_FONT_PX]
        if needs_figure:  # a chapter: how it reads
            reading = page.evaluate(JS_READING)
            if shapes is not None:
                shapes.setdefault(rel, {})["reading"] = {k: v for k, v in reading.items() if k not in ("wide", "wide_math")}
            found += [f"an output block wider than the page column ({w['px']} px in {reading['column_px']} px): "
                      f"{w['text']!r}" for w in reading["wide"][:3]]
            found += [f"a display formula wider than the page column ({px} px in {reading['column_px']} px)"
                      for px in reading["wide_math"][:3]]
            if reading["empty"]:
                found.append(f"{reading['empty']} empty output box(es)")
            found += [f"a table's column header is a code name, not words: {h!r}" for h in reading["code_headers"]]
            if reading["placeholder"]:
                found.append("an output shows the placeholder $DSPARK_RESULTS instead of a place a reader knows")
        if screenshot_dir is not None:
            name = rel.removesuffix(".html").replace("/", "__") + ".png"
            page.screenshot(path=str(Path(screenshot_dir) / name), full_page=True)
    finally:
        page.close()
    return [f"{rel}: {p}" for p in found]


def main(argv: list[str] | None = None) -> int:
    """CLI: check a built book; print problems; exit 1 on problems, 2 without a browser."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("html_dir", type=Path)
    ap.add_argument("--screenshots", type=Path, default=REPO / "_build" / "screenshots")
    ap.add_argument("--chromium", default=CHROMIUM, help="the browser executable")
    args = ap.parse_args(argv)
    try:
        problems = check_site(args.html_dir, args.screenshots,
                              chapters=toc_pages(REPO), chromium=args.chromium)
    except ChromiumNotFound as e:
        print(e, file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    print(f"browser check: {len(problems)} problem(s); screenshots in {args.screenshots}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
