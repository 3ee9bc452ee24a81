"""The method's source as a page shows it (chapters 03 and 04 show their equations' code with it):
`show(obj)` displays `inspect.getsource(obj)` dedented, as Python, optionally without its docstring
(the prose beside it says the same). The lines are the package's own: a line wider than the column
scrolls inside its block (the book's stylesheet), it is never rewrapped or wrapped."""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any


def source_of(obj: Any, docstring: bool = True) -> str:
    """The dedented source of a class, function or method; without its docstring when `docstring`
    is False."""
    source = textwrap.dedent(inspect.getsource(obj))
    if docstring:
        return source.rstrip("\n")
    body = ast.parse(source).body[0].body
    lines = source.splitlines()
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines = lines[:first.lineno - 1] + lines[first.end_lineno:]
    return "\n".join(lines).rstrip("\n")


def show(obj: Any, docstring: bool = True) -> None:
    """Display the source of `obj` as Python code (see `source_of`)."""
    from IPython.display import Code, display

    display(Code(source_of(obj, docstring), language="python"))
