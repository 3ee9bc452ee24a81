"""Interactive panels over recorded rollouts (chapter 05).

`ThresholdPanel` holds a domain dropdown and a threshold slider. Each change recomputes that
domain's static-threshold sweep from the recorded blocks (`calibration.threshold_sweep`) and
redraws two panels: accepted and rejected draft tokens per round with the acceptance rate
(Figure 5), and tau against the tokens verified per round. `update` is the callback; it is
plain Python, so a test can time it without a browser. It blits: the axes, ticks and legend
are rendered once, and each call redraws only the artists that move (bars, lines, titles).
"""
from __future__ import annotations

import io
from typing import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image

from .. import calibration
from ..record import Rounds


class ThresholdPanel:
    """The chapter-05 threshold panel over the full blocks of a record of rounds: their
    confidences c = sigmoid(logits) [N, gamma], accepted counts [N] and domains [N]."""

    def __init__(self, records: Rounds, thresholds: Sequence[float]) -> None:
        blocks = records.full_blocks()
        self.confidences, self.n_accepted, self.domains = blocks.confidences(), blocks.accepted, blocks.domain
        self.thresholds = np.asarray(sorted(thresholds), dtype=float)
        self.figure = Figure(figsize=(11, 3.4), dpi=72)
        self.canvas = FigureCanvasAgg(self.figure)
        self.axes = self.figure.subplots(1, 2)

    @property
    def domain_names(self) -> list[str]:
        return sorted(set(self.domains.tolist()))

    def sweep(self, domain: str):
        """The domain's sweep over the panel's thresholds, recomputed from its blocks."""
        if domain not in self.domain_names:
            raise ValueError(f"unknown domain {domain!r}; expected one of {self.domain_names}")
        rows = self.domains == domain
        return calibration.threshold_sweep(self.confidences[rows], self.n_accepted[rows], self.thresholds)

    def update(self, domain: str, threshold: float) -> bytes:
        """The callback: recompute `domain`'s sweep, redraw both panels with `threshold`
        marked, and return the figure as PNG bytes (what the notebook shows)."""
        sweep = self.sweep(domain)
        chosen = sweep.index[np.abs(sweep.index.to_numpy() - threshold).argmin()]
        if not hasattr(self, "_artists"):
            self._artists = self._draw_frame(sweep)
        accepted, rejected, marker, rate, curve, point = self._artists
        for bar, a, r in zip(accepted, sweep["accepted_per_round"], sweep["rejected_per_round"]):
            bar.set_height(a)
        for bar, a, r in zip(rejected, sweep["accepted_per_round"], sweep["rejected_per_round"]):
            bar.set_y(a)
            bar.set_height(r)
        marker.set_xdata([chosen, chosen])
        rate.set_ydata(sweep["acceptance_rate"])
        curve.set_data(sweep["verified_per_round"], sweep["tau"])
        point.set_data([sweep.loc[chosen, "verified_per_round"]], [sweep.loc[chosen, "tau"]])
        bars, trade = self.axes
        bars.set_title(f"{domain}: threshold {chosen:.2f}, acceptance {sweep.loc[chosen, 'acceptance_rate']:.1%}")
        trade.set_title(f"tau {sweep.loc[chosen, 'tau']:.2f} for {sweep.loc[chosen, 'verified_per_round']:.2f} "
                        "verified tokens")
        return self._blit([*accepted, *rejected, marker, rate, curve, point, bars.title, trade.title])

    def _blit(self, moving: list) -> bytes:
        """Restore the static frame, draw the moving artists on it, return the PNG bytes."""
        if not hasattr(self, "_background"):
            for artist in moving:
                artist.set_animated(True)  # left out of the full draw below
            self.canvas.draw()
            self._background = self.canvas.copy_from_bbox(self.figure.bbox)
        self.canvas.restore_region(self._background)
        for artist in moving:
            self.figure.draw_artist(artist)
        buffer = io.BytesIO()
        Image.fromarray(np.asarray(self.canvas.buffer_rgba())).save(buffer, format="png")
        return buffer.getvalue()

    def _draw_frame(self, sweep):
        """Create the artists once; `update` only moves them."""
        bars, trade = self.axes
        x = sweep.index.to_numpy()
        width = 0.8 * float(np.min(np.diff(x))) if len(x) > 1 else 0.08
        accepted = bars.bar(x, sweep["accepted_per_round"], width, color="#31a354", label="accepted")
        rejected = bars.bar(x, sweep["rejected_per_round"], width, bottom=sweep["accepted_per_round"],
                            color="#de2d26", label="rejected")
        marker = bars.axvline(x[0], color="black", lw=1, ls=":")
        bars.set_ylim(0, self.confidences.shape[1] + 0.2)
        bars.set_xlabel("static threshold")
        bars.set_ylabel("draft tokens per round")
        bars.legend(fontsize=8, loc="upper right")
        rate_axis = bars.twinx()
        (rate,) = rate_axis.plot(x, sweep["acceptance_rate"], "o-", color="black", ms=3)
        rate_axis.set_ylim(0, 1.02)
        rate_axis.set_ylabel("acceptance rate")
        (curve,) = trade.plot(sweep["verified_per_round"], sweep["tau"], "o-", color="#3182bd", ms=3)
        (point,) = trade.plot([], [], "o", color="black", ms=8)
        trade.set_xlabel("tokens verified per round")
        trade.set_ylabel("tau (tokens per round)")
        trade.set_xlim(0.8, self.confidences.shape[1] + 1.2)
        trade.set_ylim(0.8, self.confidences.shape[1] + 1.2)
        for ax in (bars, trade):
            ax.set_title("placeholder")  # leave room for the titles `update` writes
        self.figure.tight_layout()
        return accepted, rejected, marker, rate, curve, point

    def widget(self):
        """The ipywidgets panel: a domain dropdown, a threshold slider, and the redrawn figure."""
        import ipywidgets as widgets

        domain = widgets.Dropdown(options=self.domain_names, description="domain")
        threshold = widgets.SelectionSlider(options=[round(float(t), 2) for t in self.thresholds],
                                            description="threshold")
        image = widgets.Image(format="png")

        def redraw(_=None) -> None:
            image.value = self.update(domain.value, threshold.value)

        domain.observe(redraw, names="value")
        threshold.observe(redraw, names="value")
        redraw()
        return widgets.VBox([widgets.HBox([domain, threshold]), image])
