"""Tests for dspark_lite.harness.serving.costs' step-curve profiler (chapter 06b): SPS(B) measured on a tiny
random Qwen3 target, and its JSON round trip."""
from __future__ import annotations

import json

import pytest
import torch

from dspark_lite.harness.serving.costs import (concurrency_batch_sizes, load_step_curve, load_step_curves,
                                               profile_step_curve, profile_step_curves, save_step_curve,
                                               save_step_curves, spread_tokens)
from dspark_lite.harness.serving.simulator import curve_at
from dspark_lite.stepcurve import StepCurve
from test_drafters import tiny_target

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def test_spread_tokens_is_as_even_as_possible():
    assert spread_tokens(10, 4) == [3, 3, 2, 2]
    assert spread_tokens(3, 8) == [1, 1, 1]
    assert spread_tokens(16, 4) == [4, 4, 4, 4]


def test_profiler_measures_a_valid_curve_and_round_trips_through_json(target, tmp_path):
    curve = profile_step_curve(target, [8, 1, 2, 4], requests=4, context_len=12, repeats=2, warmup=1)
    assert curve.sizes == (1, 2, 4, 8)
    assert all(s > 0 for s in curve.steps_per_second)
    meta = curve.meta
    assert meta["kind"] == "measured" and meta["device"] == "cpu" and meta["torch"] == torch.__version__
    assert (meta["context_len"], meta["requests"], meta["repeats"]) == (12, 4, 2)
    assert meta["dtype"] == "float32" and meta["cpu"]
    path = save_step_curve(curve, tmp_path / "curves" / "tiny.json")
    again = load_step_curve(path)
    assert again == curve and again.meta == json.loads(json.dumps(curve.meta))


def test_profiler_and_loader_reject_bad_input(target, tmp_path):
    with pytest.raises(ValueError, match="requests must be an integer >= 1"):
        profile_step_curve(target, [1, 2], requests=0, context_len=8, repeats=1)
    with pytest.raises(ValueError, match="each batch size must be an integer >= 1"):
        profile_step_curve(target, [0, 2], requests=2, context_len=8, repeats=1)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        profile_step_curve(target, [2], requests=1, context_len=255, repeats=1)
    with pytest.raises(FileNotFoundError, match="no step curve at"):
        load_step_curve(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_step_curve(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_step_curve(tmp_path / "list.json")
    (tmp_path / "keys.json").write_text('{"sizes": [1, 2]}')
    with pytest.raises(ValueError, match="not a valid step curve.*steps_per_second"):
        load_step_curve(tmp_path / "keys.json")
    (tmp_path / "rates.json").write_text('{"sizes": [1, 2], "steps_per_second": [1.0, -1.0]}')
    with pytest.raises(ValueError, match="positive and finite"):
        load_step_curve(tmp_path / "rates.json")


def test_concurrency_batch_sizes_run_from_anchors_only_to_whole_blocks():
    assert concurrency_batch_sizes(4, 7, 8) == [4, 8, 12, 16, 20, 24, 28, 32]
    assert concurrency_batch_sizes(1, 7, 3) == [1, 4, 8]
    assert concurrency_batch_sizes(2, 3, 20) == list(range(2, 9))  # no size twice
    with pytest.raises(ValueError, match="gamma must be an integer >= 1"):
        concurrency_batch_sizes(2, 0, 4)


def test_per_concurrency_profiles_spread_over_exactly_r_requests_and_round_trip(target, tmp_path):
    curves = profile_step_curves(target, [3, 1], gamma=3, points=3, context_len=8, repeats=1)
    assert sorted(curves) == [1, 3]
    assert curves[3].sizes == (3, 8, 12) and curves[3].meta["requests"] == 3
    assert curves[1].sizes == (1, 2, 4) and curves[1].meta["requests"] == 1
    assert curve_at(curves, 3) is curves[3]
    one = StepCurve.analytic(16, knee=4)
    assert curve_at(one, 7) is one  # a single table serves every R
    with pytest.raises(ValueError, match=r"no step curve was profiled for R = 2; profiled: R in \[1, 3\]"):
        curve_at(curves, 2)
    path = save_step_curves(curves, tmp_path / "curves.json")
    assert load_step_curves(path) == curves
    (tmp_path / "bad.json").write_text('{"1": {"sizes": [1]}}')
    with pytest.raises(ValueError, match="not a valid set of step curves"):
        load_step_curves(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="no step curves at"):
        load_step_curves(tmp_path / "missing.json")
