"""Tests for dspark_lite.harness.widgets (chapter 05): the threshold panel's callback redraws
what the recorded blocks give, without a browser (scripts/bench_interactive.py times it)."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_lite import calibration
from dspark_lite.harness.widgets import ThresholdPanel
from dspark_lite.record import Rounds

pytestmark = pytest.mark.usefixtures("one_thread")
THRESHOLDS = [round(0.05 * i, 2) for i in range(19)]


def records(blocks: int, gamma: int = 7, seed: int = 1) -> Rounds:
    """Synthetic full blocks (chapter 05's known model) in three domains."""
    logits, accepted = calibration.synthetic_rollouts(blocks, gamma, seed=seed)[:2]
    domains = np.array(["math", "code", "chat"])[np.arange(blocks) % 3]
    return Rounds.of(np.full(blocks, gamma), accepted, logits, domain=domains)


def test_the_panel_shows_the_domains_sweep():
    p = ThresholdPanel(records(600), THRESHOLDS)
    png = p.update("code", 0.3)
    assert png.startswith(b"\x89PNG")
    rows = p.domains == "code"
    expected = calibration.threshold_sweep(p.confidences[rows], p.n_accepted[rows], THRESHOLDS)
    accepted_bars = p.axes[0].patches[: len(THRESHOLDS)]  # drawn first: accepted, then rejected on top
    assert [bar.get_height() for bar in accepted_bars] == pytest.approx(expected["accepted_per_round"].tolist())
    assert p.axes[0].get_title().startswith("code: threshold 0.30")
    p.update("math", 0.7)
    expected = calibration.threshold_sweep(p.confidences[p.domains == "math"], p.n_accepted[p.domains == "math"],
                                           THRESHOLDS)
    assert [bar.get_height() for bar in accepted_bars] == pytest.approx(expected["accepted_per_round"].tolist())
    assert p.axes[0].get_title().startswith("math: threshold 0.70")


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="no round proposed a full block"):
        ThresholdPanel(Rounds.of([4, 2], [1, 1]), THRESHOLDS)  # no confidences recorded
    with pytest.raises(ValueError, match="unknown domain"):
        ThresholdPanel(records(30, gamma=4, seed=2), THRESHOLDS).update("poetry", 0.5)
