"""Run at the start of every kernel of the book build (ci/run_notebooks.py, IPKernelApp.exec_files).

A static page cannot update a progress widget: executed headless, tqdm's notebook bar is saved
at its first state ("0%"). In the build, tqdm.auto's bar is tqdm's text bar instead, written to
stdout every 10 s or so and at the end, so the executed notebook keeps the final line (steps,
elapsed time, rate) and the runner can echo progress and tell a working cell from a stuck one.
In Jupyter and on Colab, nothing here runs and the widgets stay.
"""
import sys

import tqdm.auto
import tqdm.autonotebook
import tqdm.std


class TextBar(tqdm.std.tqdm):
    """tqdm's text bar on stdout, redrawn at most every 10 s."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("file", sys.stdout)
        kwargs.setdefault("mininterval", 10.0)
        kwargs.setdefault("ncols", 100)
        super().__init__(*args, **kwargs)


tqdm.auto.tqdm = tqdm.autonotebook.tqdm = TextBar
tqdm.auto.trange = tqdm.autonotebook.trange = lambda *args, **kwargs: TextBar(range(*args), **kwargs)
