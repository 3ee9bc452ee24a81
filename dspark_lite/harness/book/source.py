"""The method's source as a page shows it: `show(obj)` displays `inspect.getsource(obj)` with every line
over the column's 88 characters rewrapped (code inside its brackets, docstrings between words), so
shown source never wraps in the rendered book or a notebook viewer. The package's own lines stay as
they are: a module inside the builders' import closure cannot change without retraining the world."""
from __future__ import annotations

import inspect
from typing import Any

WIDTH = 88


def reflow(source: str, width: int = WIDTH) -> str:
    """`source` (inspect.getsource) dedented, with every line over `width` characters broken:
    code inside its brackets (after the shallowest comma, else before an operator) with the
    continuation under the bracket; a docstring's words refilled into the next line."""
    import textwrap
    out, in_doc, carry = [], False, ""
    for line in textwrap.dedent(source).splitlines():
        if carry and in_doc and line.strip() and not line.strip().startswith('"""'):
            indent = len(line) - len(line.lstrip())
            line, carry = line[:indent] + carry + " " + line.lstrip(), ""
        elif carry:
            out.append(carry_indent + carry)
            carry = ""
        starts_doc = not in_doc and line.lstrip().startswith('"""')
        prose = in_doc or starts_doc
        if line.count('"""') % 2:
            in_doc = not in_doc
        first = True
        while len(line) > width:
            indent = len(line) - len(line.lstrip())
            if prose:  # break between words; the rest joins the docstring's next line
                space = line.rfind(" ", indent + 1, width)
                if space <= indent:
                    break
                rest = line[space + 1:]
                line = line[:space]
                if in_doc:
                    carry, carry_indent = rest, " " * indent
                else:
                    out.append(line)
                    line = " " * indent + rest
                continue
            stack, best, quote = ([] if first else [indent]), None, None  # best: (depth, kind, -cut, hang)
            for i, ch in enumerate(line[:width]):
                if quote:
                    quote = None if ch == quote else quote
                elif ch in "\"'":
                    quote = ch
                elif ch in "([{":
                    stack.append(i + 1)
                elif ch in ")]}":
                    stack.pop() if stack else None
                elif stack and ch == "," and line[i + 1:i + 2] == " ":
                    cand = (len(stack), 0, -(i + 1), stack[-1])
                    best = cand if best is None or cand[:3] < best[:3] else best
                elif stack and (line[i:i + 3] in (" + ", " - ", " * ") or line[i:i + 4] in (" if ", " or ")):
                    cand = (len(stack), 1, -(i + 1), stack[-1])
                    best = cand if best is None or cand[:3] < best[:3] else best
            if best is None:
                break
            cut, hang = -best[2], best[3]
            out.append(line[:cut].rstrip())
            line = " " * (hang if hang < 60 else indent + 8) + line[cut:].lstrip()
            first = False
        out.append(line)
    if carry:
        out.append(carry_indent + carry)
    return "\n".join(out)


def show(obj: Any, width: int = WIDTH) -> None:
    """Display the source of `obj` (a class, function or method) as Python code, rewrapped to `width`."""
    from IPython.display import Code, display

    display(Code(reflow(inspect.getsource(obj), width), language="python"))
