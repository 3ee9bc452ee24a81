"""A Sphinx extension with the book's fixes for its pinned toolchain (loaded from `_config.yml`),
and the `{paper}` role.

`{paper}`4.80`` marks a number quoted from the DSpark paper (not measured by the chapter's run):
it renders as the number, with a tooltip saying where it comes from, and `ci/check_prose.py`
accepts it where it refuses a typed-in measured number.

Sphinx 7.4 adds every inline script registered with `app.add_js_file(None, body=...)` twice
(once with filename None, once with ''), so sphinx-thebe's `const THEBE_JS_URL = ...` is declared
twice and the page logs a SyntaxError. Drop exact duplicates before each page is written.
"""
from __future__ import annotations

from typing import Any

from docutils import nodes


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


def paper_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any,
               options: dict | None = None, content: list | None = None) -> tuple[list, list]:
    """`{paper}`4.80``: the paper's number, shown as text with a tooltip."""
    node = nodes.abbreviation(rawtext, text, classes=["paper-number"],
                              explanation="quoted from the DSpark paper, not measured by this run")
    return [node], []


def setup(app: Any) -> dict[str, Any]:
    """Register the fixes (run late: after other extensions add their page scripts) and the role."""
    app.add_role("paper", paper_role)
    app.connect("html-page-context", dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
