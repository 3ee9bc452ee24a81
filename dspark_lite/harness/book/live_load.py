"""Chapter 06b's load figure, computed in two places from one function.

`load_state(blocks, curve)` is what the figure shows for one concurrency R and one cost curve:
per scheduler the lengths it chooses for R recorded blocks, the expected throughput Theta of
those lengths (Algorithm 1's objective, `scheduler.expected_throughput`) and the mean budget
1 + mean l_r, plus how many requests DSpark sends each l = 0..gamma. Two callers:

- `load_states` evaluates it at every point of a grid (R x knee x slope of the synthetic curve)
  when the chapter runs, for the precomputed Altair figure (`interactive.load_chart`) that the
  rendered book redraws in the browser without a kernel;
- `LoadExplorer`, the ipywidgets controls a reader moves in a running kernel (JupyterLab,
  Colab), calls it again on every move, on any knee and slope or on one of the chapter's own
  cost tables (its measured table, its synthetic GPU-like one).

Both draw the blocks of each R with `draw_blocks` (one generator, R after R), so at a point of
the grid the live numbers are the figure's. The controls show only in a reader's running kernel
(`interactive.live_kernel`); the book build shows the precomputed figure alone.
"""
from __future__ import annotations

import html
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ... import scheduler
from ...stepcurve import StepCurve
from ..serving.simulator import curve_at, resolve_scheduler
from .interactive import live_kernel  # the one test of a reader's running kernel, shared with chapter 05

SCHEDULERS = ("dspark", "fixed", "mtp1", "threshold")
SYNTHETIC = "synthetic: knee and slope"  # the live control's name for StepCurve.analytic(max_batch, knee, slope)


def draw_blocks(confidences: np.ndarray, concurrencies: Sequence[int], seed: int = 0) -> dict[int, np.ndarray]:
    """The R blocks each concurrency serves: for R in `concurrencies`, in that order, R rows drawn
    with replacement from `confidences` [N, gamma] by one generator seeded with `seed`."""
    c = np.asarray(confidences, dtype=float)
    if c.ndim != 2 or len(c) == 0:
        raise ValueError(f"confidences must be a non-empty [N, gamma] array; got shape {c.shape}")
    rng = np.random.default_rng(seed)
    return {int(R): c[rng.integers(0, len(c), size=R)] for R in concurrencies}


def load_state(blocks: np.ndarray, curve: StepCurve, schedulers: Sequence[str] = SCHEDULERS) -> list[dict]:
    """The figure at one point: for R = len(blocks) requests and the step curve `curve`, one row
    per scheduler with "scheduler", "theta" (expected throughput of its lengths) and "budget"
    (1 + mean l_r); DSpark's row also counts the requests that send each l ("l=0".."l=gamma")."""
    blocks = np.asarray(blocks, dtype=float)
    gamma = blocks.shape[1]
    rows = []
    for name in schedulers:
        lengths = resolve_scheduler(name)[1](blocks, curve, blocks)
        row = {"scheduler": name, "theta": scheduler.expected_throughput(blocks, lengths, curve),
               "budget": 1.0 + float(np.mean(lengths))}
        if name == "dspark":
            counts = np.bincount(lengths, minlength=gamma + 1)
            row.update({f"l={l}": int(n) for l, n in enumerate(counts)})
        rows.append(row)
    return rows


def load_states(confidences: np.ndarray, concurrencies: Sequence[int], knees: Sequence[int], slopes: Sequence[float],
                max_batch: int, seed: int = 0, schedulers: Sequence[str] = SCHEDULERS) -> pd.DataFrame:
    """Every state of the precomputed load figure (`interactive.load_chart`): `load_state` at each R
    (blocks from `draw_blocks`), knee and slope of the SYNTHETIC curve
    `StepCurve.analytic(max_batch, knee, slope=slope)`, with columns R, knee, slope first."""
    rows = []
    for R, blocks in draw_blocks(confidences, concurrencies, seed).items():
        for knee in knees:
            for slope in slopes:
                curve = StepCurve.analytic(max_batch, knee, slope=slope)
                rows += [{"R": R, "knee": int(knee), "slope": float(slope), **row}
                         for row in load_state(blocks, curve, schedulers)]
    return pd.DataFrame(rows)


class LoadExplorer:
    """ipywidgets controls for the load figure that recompute in the kernel: R (the
    concurrencies of the figure, with its blocks), the cost curve (the synthetic knee-and-slope
    curve of the figure, or one of `tables`: name -> StepCurve or R -> StepCurve), its knee and
    slope. Every move calls `load_state` and redraws `view`; `state` holds the numbers shown."""

    def __init__(self, confidences: np.ndarray, concurrencies: Sequence[int], max_batch: int, seed: int = 0,
                 tables: Mapping[str, StepCurve | Mapping[int, StepCurve]] | None = None,
                 knee: int | None = None, slope: float = 1.0, schedulers: Sequence[str] = SCHEDULERS) -> None:
        import ipywidgets as widgets

        self.blocks = draw_blocks(confidences, concurrencies, seed)
        self.max_batch, self.schedulers, self.tables = int(max_batch), tuple(schedulers), dict(tables or {})
        Rs = list(self.blocks)
        self.R = widgets.SelectionSlider(options=Rs, value=Rs[len(Rs) // 2], description="R (requests)",
                                         continuous_update=False)
        self.table = widgets.Dropdown(options=[SYNTHETIC, *self.tables], value=SYNTHETIC, description="cost curve")
        self.knee = widgets.IntSlider(value=int(knee or max(1, max_batch // 8)), min=1, max=self.max_batch,
                                      description="knee", continuous_update=False)
        self.slope = widgets.FloatSlider(value=float(slope), min=0.25, max=3.0, step=0.25, description="slope",
                                         continuous_update=False)
        self.view = widgets.HTML()
        for control in (self.R, self.table, self.knee, self.slope):
            control.observe(self._redraw, names="value")
        self.box = widgets.VBox([widgets.HBox([self.R, self.table]), widgets.HBox([self.knee, self.slope]), self.view])
        self.state = pd.DataFrame()
        self._redraw()

    def curve(self) -> StepCurve:
        """The step curve the controls pick, at the chosen R."""
        if self.table.value == SYNTHETIC:
            return StepCurve.analytic(self.max_batch, int(self.knee.value), slope=float(self.slope.value))
        return curve_at(self.tables[self.table.value], int(self.R.value))

    def _redraw(self, change: object = None) -> None:
        synthetic = self.table.value == SYNTHETIC
        self.knee.disabled = self.slope.disabled = not synthetic
        self.state = pd.DataFrame(load_state(self.blocks[int(self.R.value)], self.curve(), self.schedulers))
        self.view.value = self._html()

    def _html(self) -> str:
        state = self.state.set_index("scheduler")
        where = (f"knee {self.knee.value}, slope {self.slope.value:g}" if self.table.value == SYNTHETIC
                 else html.escape(str(self.table.value)) + " table")
        best = state["theta"].idxmax()
        counts = state.loc["dspark", [c for c in state.columns if c.startswith("l=")]].astype(int)
        bars = "".join(f"<tr><td>{html.escape(str(l))}</td><td>{n}</td><td style='text-align:left'>"
                       f"<span style='display:inline-block;background:#31a354;height:0.8em;width:{4 * n}px'></span>"
                       f"</td></tr>" for l, n in counts.items())
        table = "".join(f"<tr><td>{html.escape(name)}</td><td>{row.theta:.4g}</td><td>{row.budget:.2f}</td></tr>"
                        for name, row in state.iterrows())
        return (f"<p><b>R = {self.R.value}, {where}</b>: DSpark's budget {state.loc['dspark', 'budget']:.2f} tokens "
                f"per request; the highest expected throughput here is {html.escape(best)}'s.</p>"
                "<div style='display:flex;gap:2em'>"
                f"<table><tr><th>scheduler</th><th>Theta</th><th>budget</th></tr>{table}</table>"
                f"<table><tr><th>l_r</th><th>requests</th><th></th></tr>{bars}</table></div>")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)


def show_live(confidences: np.ndarray, concurrencies: Sequence[int], max_batch: int, seed: int = 0,
              tables: Mapping[str, StepCurve | Mapping[int, StepCurve]] | None = None,
              knee: int | None = None) -> LoadExplorer | None:
    """The live load controls, shown only in a reader's running kernel (`live_kernel`); the
    book build and a headless run get None and show nothing, the precomputed figure stays."""
    if not live_kernel():
        return None
    from IPython.display import display

    explorer = LoadExplorer(confidences, concurrencies, max_batch, seed=seed, tables=tables, knee=knee)
    display(explorer.box)
    return explorer
