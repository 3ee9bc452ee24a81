"""Run at the start of every kernel of the book build (ci/run_notebooks.py, IPKernelApp.exec_files).

A static page cannot update a progress widget: executed headless, tqdm's notebook bar is saved
at its first state ("0%"). In the build, tqdm.auto's bar is tqdm's text bar instead, written to
stdout every 10 s or so and at the end, so the executed notebook keeps the final line (steps,
elapsed time, rate) and the runner can echo progress and tell a working cell from a stuck one.

A cell shows one bar, its outermost: a bar opened while another is running prints nothing of
its own (a text line cannot hold two bars) and instead writes its progress, every 10 s, into
the outer bar's line, so the output keeps moving while a long inner loop runs.
In Jupyter and on Colab, nothing here runs and the widgets stay.
"""
import sys as _sys
import time as _time

import tqdm.auto as _tqdm_auto
import tqdm.autonotebook as _tqdm_autonotebook
import tqdm.std as _tqdm_std


class TextBar(_tqdm_std.tqdm):
    """tqdm's text bar on stdout, redrawn at most every 10 s; nested bars report to the outer one."""

    def __init__(self, *args, **kwargs):
        running = [bar for bar in list(_tqdm_std.tqdm._instances)
                   if bar is not self and isinstance(bar, TextBar) and not getattr(bar, "disable", True)]
        self._outer = running[0] if running else None
        if self._outer is not None:
            kwargs["disable"] = True
        kwargs.setdefault("file", _sys.stdout)
        kwargs.setdefault("mininterval", 10.0)
        kwargs.setdefault("ncols", 88)  # one line of the page column (ci/sphinxext/static/book.css)
        super().__init__(*args, **kwargs)
        iterable = args[0] if args else kwargs.get("iterable")
        self._label = kwargs.get("desc") or "inner"
        self._size = kwargs.get("total") or (len(iterable) if hasattr(iterable, "__len__") else None)
        self._count, self._told = kwargs.get("initial", 0), 0.0

    def _tell_outer(self, n):
        self._count += n
        now = _time.time()
        if now - self._told >= 10.0:
            self._told = now
            size = f"/{self._size}" if self._size else ""
            self._outer.set_postfix_str(f"{self._label} {self._count}{size}", refresh=True)

    def close(self):
        if self._outer is not None and not self._outer.disable:  # no stale "inner 191/200" on the final line
            self._outer.set_postfix_str("", refresh=False)
        return super().close()

    def update(self, n=1):
        if self._outer is not None:
            self.n += n  # still counted: a caller that updates by `target - bar.n` must not add its total again
            self._tell_outer(n)
            return None
        return super().update(n)

    def __iter__(self):
        if self._outer is None:
            yield from super().__iter__()
            return
        for item in self.iterable:
            yield item
            self._tell_outer(1)


_tqdm_auto.tqdm = _tqdm_autonotebook.tqdm = TextBar
_tqdm_auto.trange = _tqdm_autonotebook.trange = lambda *args, **kwargs: TextBar(range(*args), **kwargs)


# Interactive figures (dspark_lite/harness/book/interactive.py, Altair): in the build every chart
# is one output that draws offline in any notebook viewer, its Vega-Lite spec beside a PNG of it,
# loading no script (ci/vega_figures.py). Only the copy of the notebook that the rendered book
# draws gets the HTML that loads Vega from the book's own _static/vega/ (ci/build_book.py), so the
# executed notebooks and the book's download copies never point there. In Jupyter and on Colab
# Altair's own default applies.
try:
    import altair as _alt  # noqa: F401
except ImportError:  # not installed: the chapters that need it say so when they import it
    pass
else:
    from ci.vega_figures import enable as _enable_offline_figures

    _enable_offline_figures()


# Figures: every PNG a chapter shows (IPython's inline backend saves each through
# FigureCanvasBase.print_figure) carries the figure's width and smallest text
# (dspark_lite.harness.book.plots.figure_report) in a PNG text chunk, where ci/check_notebooks.py fails
# a figure wider than the page or with text below 9 px on it, and ci/browser_check.py reports
# the size each figure's text renders at in the browser.
def _install_figure_report():
    import json
    import matplotlib.backend_bases as _backend_bases

    original = _backend_bases.FigureCanvasBase.print_figure
    if getattr(original, "_dspark_reports", False):
        return

    def print_figure(self, filename, *args, **kwargs):
        fmt = kwargs.get("format") or (str(filename).rsplit(".", 1)[-1] if isinstance(filename, str) else None)
        if fmt == "png":
            try:
                from dspark_lite.harness.book.plots import PNG_KEY, figure_report

                dpi = kwargs.get("dpi")
                report = figure_report(self.figure, None if dpi in (None, "figure") else dpi)
                kwargs["metadata"] = {**(kwargs.get("metadata") or {}), PNG_KEY: json.dumps(report)}
            except ImportError:  # dspark_lite not importable: the figure goes out unmeasured
                pass
        return original(self, filename, *args, **kwargs)

    print_figure._dspark_reports = True
    _backend_bases.FigureCanvasBase.print_figure = print_figure


_install_figure_report()
