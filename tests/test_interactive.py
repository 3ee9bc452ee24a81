"""Tests for dspark_lite.harness.book.interactive (chapters 02, 05, 06b): every state a figure can show
is what the Python function the chapter calls gives for the same inputs (one code path for the
numbers), and every control is bound to a value the data holds. The browser check
(ci/browser_check.py) drives the controls in Chromium."""
from __future__ import annotations

import json
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import pytest

from dspark_lite import calibration, scheduler
from dspark_lite.harness.book import interactive
from dspark_lite.stepcurve import StepCurve
from dspark_lite.harness.serving.simulator import resolve_scheduler
from dspark_lite.record import Rounds, sigmoid
from synthetic import synthetic_rollouts

REPO = Path(__file__).resolve().parents[1]
THRESHOLDS = [round(0.05 * i, 2) for i in range(19)]


def records(blocks: int = 600, gamma: int = 7, seed: int = 1) -> Rounds:
    """Synthetic full blocks (chapter 05's known model) in three domains, and a round without a
    confidence head (which the figures must leave out)."""
    logits, accepted = synthetic_rollouts(blocks, gamma, seed=seed)[:2]
    domains = np.array(["math", "code", "chat"])[np.arange(blocks) % 3]
    full = Rounds.of(np.full(blocks, gamma), accepted, logits, domain=domains)
    return Rounds.concat([full, Rounds.of([3], [1], domain="chat")])


def params(chart: alt.TopLevelMixin) -> dict[str, dict]:
    return {p["name"]: p for p in chart.to_dict()["params"]}


def test_threshold_states_are_the_sweep_the_chapter_computes():
    recorded = records()
    states = interactive.threshold_states(recorded, THRESHOLDS)
    full = recorded.full_blocks()
    for domain in ("math", "chat"):
        rows = full.domain == domain
        expected = calibration.threshold_sweep(full.confidences()[rows], full.accepted[rows], THRESHOLDS)
        got = states[states["domain"] == domain].set_index("threshold")[expected.columns]
        pd.testing.assert_frame_equal(got, expected, check_names=False)
    assert len(states) == 3 * len(THRESHOLDS)


def test_threshold_chart_binds_a_domain_and_every_threshold():
    chart = interactive.threshold_chart(interactive.threshold_states(records(), THRESHOLDS), domain="chat")
    bound = params(chart)
    assert bound["domain"]["value"] == "chat" and bound["domain"]["bind"]["options"] == ["chat", "code", "math"]
    slider = bound["threshold"]["bind"]
    steps = np.arange(slider["min"], slider["max"] + slider["step"] / 2, slider["step"])
    np.testing.assert_allclose(steps, THRESHOLDS, atol=1e-9)  # the slider reaches every threshold, no other
    assert bound["threshold"]["value"] in THRESHOLDS


def test_gamma_chart_shows_the_measured_rows():
    sweep = pd.DataFrame({"gamma": [1, 2, 4, 8], "tau": [1.6, 2.1, 2.6, 2.9],
                          "tokens/s": [40.0, 45.5, 44.0, 38.0]}).set_index("gamma")
    spec = interactive.gamma_chart(sweep, gamma=4).to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert [(r["gamma"], r["tau"], r["tokens_per_s"]) for r in rows] == list(sweep.itertuples(name=None))
    assert params(interactive.gamma_chart(sweep, gamma=4))["gamma"]["bind"]["options"] == [1, 2, 4, 8]


def test_load_states_are_what_the_schedulers_give():
    c = sigmoid(synthetic_rollouts(300, 5, seed=3)[0])
    states = interactive.load_states(c, [2, 8], [4, 16], [1.0, 2.0], max_batch=64, seed=7)
    assert len(states) == 2 * 2 * 2 * 4
    rng = np.random.default_rng(7)  # the blocks each R drew, in the same order
    blocks = {R: c[rng.integers(0, len(c), size=R)] for R in (2, 8)}
    for (R, knee, slope), group in states.groupby(["R", "knee", "slope"]):
        curve = StepCurve.analytic(64, int(knee), slope=float(slope))
        for name, row in group.set_index("scheduler").iterrows():
            lengths = resolve_scheduler(name)[1](blocks[R], curve, blocks[R])
            assert row["theta"] == pytest.approx(scheduler.expected_throughput(blocks[R], lengths, curve))
            assert row["budget"] == pytest.approx(1 + lengths.mean())
            if name == "dspark":
                counts = [row[f"l={l}"] for l in range(6)]
                assert counts == np.bincount(lengths, minlength=6).tolist() and sum(counts) == R
    bound = params(interactive.load_chart(states))
    assert bound["R"]["bind"]["options"] == [2, 8] and bound["knee"]["bind"]["options"] == [4, 16]


def test_the_book_vendors_the_vega_lite_that_altair_writes():
    """The vendored scripts (ci/vendor/package.json) must read the specifications Altair writes."""
    pins = json.loads((REPO / "ci" / "vendor" / "package.json").read_text())["dependencies"]
    assert pins["vega-lite"] == alt.SCHEMA_VERSION.lstrip("v")
    assert pins["vega"].split(".")[0] == alt.VEGA_VERSION and pins["vega-embed"].split(".")[0] == alt.VEGAEMBED_VERSION


def test_curves_chart_keeps_the_frames_panel_order_and_tooltips_every_column():
    frame = pd.DataFrame([{"domain": d, "drafter": "A", "k": k, "acceptance": 0.5 + 0.1 * k}
                          for d in ("math", "code", "chat") for k in (1, 2)])
    spec = interactive.curves_chart(frame, "k", "acceptance", "drafter", column="domain").to_dict()
    assert spec["facet"]["sort"] == ["math", "code", "chat"]  # not alphabetical
    assert spec["columns"] == 2 and "split" in spec["facet"]["header"]["labelExpr"]  # two a row; long titles wrap
    tooltip = spec["spec"]["layer"][0]["encoding"]["tooltip"]
    assert [t["field"] for t in tooltip] == ["domain", "drafter", "k", "acceptance"]
