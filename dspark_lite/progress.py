"""Progress bars: the one bar policy of the package and the book (chapters 03-05 show
its bars on their long trainings).

A chapter cell shows one bar: the outermost. Every long loop of the package goes through
`progress`, which counts the bars it has open; a bar opened while another is showing is
transient (`leave=False`: it shows while it runs and is gone when it ends), so a cell that
wraps several long calls in a bar of its own keeps only that one, with its rate and time, in
the rendered page.
"""
from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class Bar(tqdm):
    """tqdm's bar (in a notebook, its widget), counted in `Bar.showing` from its start until it
    closes, unless it is disabled."""

    showing = 0  # bars open and shown right now

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.counted = False
        super().__init__(*args, **kwargs)
        self.counted = not self.disable
        Bar.showing += self.counted

    def close(self) -> None:
        """Close the bar (tqdm calls this at the loop's end, on `with` exit and when collected)."""
        Bar.showing -= self.counted
        self.counted = False
        super().close()


def progress(iterable: Any = None, **kwargs: Any) -> Bar:
    """A bar over `iterable` (tqdm's arguments): kept in the output when no other bar is showing,
    transient (`leave=False`) inside another one, unless `leave` is given."""
    kwargs.setdefault("leave", Bar.showing == 0)
    return Bar(iterable, **kwargs)
