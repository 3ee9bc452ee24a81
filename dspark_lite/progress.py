"""Progress bars: the one bar policy of the package and the book (chapters 03-05 show
its bars on their long trainings).

A chapter cell shows one bar: the outermost. Every long loop of the package goes through
`progress`, which counts the bars it has open; a bar opened while another is showing is
transient (`leave=False`: it shows while it runs and is gone when it ends), so a cell that
wraps several long calls in a bar of its own keeps only that one, with its rate and time, in
the rendered page.

In a worker process (the toy world's harness forks some to use every core), `RELAY` is set:
`progress` then draws no bar, and the worker's outermost loop adds its steps to that shared
counter, which the parent's one bar shows.
"""
from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


RELAY: Any = None  # in a worker process: a shared counter (`multiprocessing.Value`) for the parent's bar


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


class Relay:
    """What `progress` returns in a worker process: no bar; each step of the worker's outermost
    loop adds one to `RELAY` (loops inside it add nothing)."""

    open = 0  # relays open in this process

    def __init__(self, iterable: Any = None, **kwargs: Any) -> None:
        self.iterable, self.outer, self.closed = iterable, Relay.open == 0, False
        Relay.open += 1

    def __iter__(self):
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        if self.outer:
            with RELAY.get_lock():
                RELAY.value += n

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to show in a worker."""

    set_postfix_str = set_description = set_postfix

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            Relay.open -= 1

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(iterable: Any = None, **kwargs: Any) -> Bar | Relay:
    """A bar over `iterable` (tqdm's arguments): kept in the output when no other bar is showing,
    transient (`leave=False`) inside another one, unless `leave` is given; in a worker process, a
    `Relay` to the parent's bar."""
    if RELAY is not None:
        return Relay(iterable, **kwargs)
    kwargs.setdefault("leave", Bar.showing == 0)
    return Bar(iterable, **kwargs)
