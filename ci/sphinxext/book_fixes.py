"""A Sphinx extension with the book's fixes for its pinned toolchain (loaded from `_config.yml`),
and the `{paper}` role.

`{paper}`4.80`` marks a number quoted from the DSpark paper (not measured by the chapter's run):
it renders as the number, with a tooltip saying where it comes from, and `ci/check_prose.py`
accepts it where it refuses a typed-in measured number.

Sphinx 7.4 adds every inline script registered with `app.add_js_file(None, body=...)` twice
(once with filename None, once with ''), so sphinx-thebe's `const THEBE_JS_URL = ...` is declared
twice and the page logs a SyntaxError. Drop exact duplicates before each page is written.

pydata-sphinx-theme puts `_static/scripts/fontawesome.js` (Font Awesome's SVG framework, 1.5 MB)
in every page "so that users can add custom icons". The book adds none: the theme's icons are
drawn by its stylesheet from Font Awesome's webfonts (about 0.15 MB, loaded only when an icon is
shown), so the script is dropped from every page and from the output. That is a third of what a
chapter page loads, and it keeps the pages with interactive figures under the browser check's
weight limit. `ci/browser_check.py` fails a page whose icons do not render from the webfont.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.errors import ExtensionError

FONTAWESOME_JS = re.compile(r'[ \t]*<script[^>]*\ssrc="[^"]*_static/scripts/fontawesome\.js[^"]*"[^>]*></script>\n?')


def dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """Keep the first of scripts that have the same file, priority and attributes."""
    seen: set[tuple] = set()
    unique = []
    for js in context.get("script_files", []):
        key = (js.filename or "", js.priority, tuple(sorted(js.attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    context["script_files"] = unique


def without_fontawesome_js(html: str) -> tuple[str, int]:
    """The page without the theme's fontawesome.js script tag, and how many tags were removed."""
    return FONTAWESOME_JS.subn("", html)


def drop_fontawesome_js(app: Any, exception: Exception | None) -> None:
    """After an HTML build: remove the script tag from every page and the script from _static.
    Fails the build when no page had the tag (a theme that changed how it loads the icons)."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.builder.outdir)
    removed = 0
    for page in out.rglob("*.html"):
        html, n = without_fontawesome_js(page.read_text(encoding="utf-8"))
        if n:
            page.write_text(html, encoding="utf-8")
            removed += n
    if removed == 0:
        raise ExtensionError("book_fixes: no page loads _static/scripts/fontawesome.js; the theme changed "
                             "how it loads its icons: update ci/sphinxext/book_fixes.py")
    for script in (out / "_static" / "scripts").glob("fontawesome.js*"):
        script.unlink()


def paper_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
               options: dict | None = None, content: list | None = None) -> tuple[list, list]:
    """`{paper}`4.80``: the paper's number, shown as text with a tooltip."""
    node = nodes.abbreviation(rawtext, text, classes=["paper-number"],
                              explanation="quoted from the DSpark paper, not measured by this run")
    return [node], []


STATIC = Path(__file__).parent / "static"  # book.css: the page styles


def add_static(app: Any) -> None:
    """Serve this extension's static folder (book.css) beside the theme's."""
    app.config.html_static_path.append(str(STATIC))


def setup(app: Any) -> dict[str, Any]:
    """Register the fixes (run late: after other extensions add their page scripts), the role and
    the book's stylesheet."""
    app.add_role("paper", paper_role)
    app.connect("builder-inited", add_static)
    app.add_css_file("book.css")
    app.connect("html-page-context", dedupe_scripts, priority=900)
    app.connect("build-finished", drop_fontawesome_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
