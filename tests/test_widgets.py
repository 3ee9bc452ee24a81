"""Tests for dspark_lite.widgets (chapter 05): the threshold panel's callback, timed without a
browser, and its inputs checked."""
from __future__ import annotations

import time

import numpy as np
import pytest

from dspark_lite import calibration
from dspark_lite.widgets import ThresholdPanel

pytestmark = pytest.mark.usefixtures("one_thread")
THRESHOLDS = [round(0.05 * i, 2) for i in range(19)]


def panel(blocks: int = 6000) -> ThresholdPanel:
    confidences, accepted = calibration.synthetic_rollouts(blocks, 7, seed=1)[:2]
    domains = np.array(["math", "code", "chat"])[np.arange(blocks) % 3]
    return ThresholdPanel(confidences, accepted, domains, THRESHOLDS)


def test_callback_recomputes_and_redraws_in_under_100_ms():
    """The issue's bound: as many blocks as chapter 05 records (a few thousand), every domain
    and threshold, the sweep recomputed from the blocks and the figure rendered to PNG."""
    p = panel()
    p.update("chat", 0.5)  # the first call builds the figure
    timings = []
    for domain in ("math", "code", "chat"):
        for threshold in THRESHOLDS[::3]:
            start = time.perf_counter()
            png = p.update(domain, threshold)
            timings.append(time.perf_counter() - start)
            assert png.startswith(b"\x89PNG")
    assert float(np.median(timings)) < 0.1, f"median callback {1e3 * np.median(timings):.0f} ms"


def test_the_panel_shows_the_domains_sweep():
    p = panel(600)
    p.update("code", 0.3)
    rows = p.domains == "code"
    expected = calibration.threshold_sweep(p.confidences[rows], p.n_accepted[rows], THRESHOLDS)
    accepted_bars = p._artists[0]
    assert [bar.get_height() for bar in accepted_bars] == pytest.approx(expected["accepted_per_round"].tolist())
    assert p.axes[0].get_title().startswith("code: threshold 0.30")


def test_bad_inputs_are_refused():
    confidences, accepted = calibration.synthetic_rollouts(30, 4, seed=2)[:2]
    with pytest.raises(ValueError, match="mismatched lengths"):
        ThresholdPanel(confidences, accepted, ["math"] * 29, THRESHOLDS)
    with pytest.raises(ValueError, match="unknown domain"):
        ThresholdPanel(confidences, accepted, ["math"] * 30, THRESHOLDS).update("poetry", 0.5)
