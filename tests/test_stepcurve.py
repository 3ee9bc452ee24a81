"""Tests for dspark_lite.stepcurve (chapters 06, 06b): the step curve SPS(B), its interpolation and tables."""
import json

import numpy as np
import pytest

from dspark_lite.stepcurve import StepCurve


def test_step_curve_is_exact_at_sizes_linear_between_and_refuses_outside():
    curve = StepCurve((2, 4, 8), (1.0, 0.8, 0.4))
    assert curve.sps(4) == 0.8 and curve.sps(8) == 0.4
    np.testing.assert_allclose(curve.sps(np.array([2, 3, 6])), [1.0, 0.9, 0.6])
    with pytest.raises(ValueError, match=r"\[1, 9\] outside the profiled range \[2, 8\].*extrapolate"):
        curve.sps(np.array([1, 5, 9]))
    with pytest.raises(ValueError, match="integers"):
        curve.sps(2.5)


@pytest.mark.parametrize("sizes, rates, message", [
    ((1, 2), (1.0, -0.5), "positive and finite"),
    ((1, 2), (1.0, 0.0), "positive and finite"),
    ((1, 2), (1.0, float("inf")), "positive and finite"),
    ((1, 2, 3), (1.0, 0.5), "same length"),
    ((2, 1), (1.0, 0.5), "strictly increasing"),
    ((1, 1), (1.0, 0.5), "strictly increasing"),
    ((0, 1), (1.0, 0.5), "positive"),
    ((1.5, 2), (1.0, 0.5), "integers"),
    ((), (), "non-empty"),
])


def test_bad_step_curves_are_refused(sizes, rates, message):
    with pytest.raises(ValueError, match=message):
        StepCurve(sizes, rates)


def test_step_curve_constructors_and_json_round_trip():
    curve = StepCurve.from_latencies([1, 2, 4], [0.01, 0.02, 0.05], meta={"device": "cpu"})
    np.testing.assert_allclose(curve.steps_per_second, [100.0, 50.0, 20.0])
    again = StepCurve.from_dict(json.loads(json.dumps(curve.to_dict())))
    assert again == curve and again.meta == {"device": "cpu"}
    with pytest.raises(ValueError, match="positive and finite"):
        StepCurve.from_latencies([1, 2], [0.01, float("nan")])
    with pytest.raises(ValueError, match="missing"):
        StepCurve.from_dict({"sizes": [1]})
    synthetic = StepCurve.analytic(16, knee=4, base_sps=2.0)
    assert synthetic.meta["kind"] == "synthetic"
    np.testing.assert_allclose(synthetic.sps(np.array([1, 4, 8, 16])), [2.0, 2.0, 1.0, 0.5])


def test_analytic_slope_steepens_the_compute_bound_part():
    steep = StepCurve.analytic(16, knee=4, base_sps=2.0, slope=2.0)
    np.testing.assert_allclose(steep.sps(np.array([1, 4, 8, 16])), [2.0, 2.0, 0.5, 0.125])
    assert steep.meta["slope"] == 2.0 and StepCurve.analytic(16, knee=4).meta["slope"] == 1.0
    with pytest.raises(ValueError, match="slope must be positive and finite"):
        StepCurve.analytic(16, knee=4, slope=0.0)


def test_dense_interpolates_step_time_at_every_size_and_never_lets_it_fall():
    # 10 ms at B = 1, a noisy 40 ms at B = 2, 30 ms at B = 4, 50 ms at B = 8.
    profiled = StepCurve.from_latencies([1, 2, 4, 8], [0.01, 0.04, 0.03, 0.05], {"device": "cpu"})
    dense = profiled.dense()
    assert dense.sizes == tuple(range(1, 9))
    seconds = 1.0 / np.array(dense.steps_per_second)
    # B = 2 is lowered to B = 4's 30 ms (pad up to the faster, larger batch); time is linear in between.
    np.testing.assert_allclose(seconds, [0.01, 0.03, 0.03, 0.03, 0.035, 0.04, 0.045, 0.05])
    assert np.all(np.diff(seconds) >= 0)
    assert dense.meta["times_lowered"] == 1 and dense.meta["device"] == "cpu"
    assert "step time" in dense.meta["interpolation"]
    # A clean curve keeps its profiled times; between them SPS is 1 / interpolated time, below the SPS chord.
    clean = StepCurve.from_latencies([2, 6], [0.01, 0.03]).dense()
    assert clean.sizes == (2, 3, 4, 5, 6) and clean.meta["times_lowered"] == 0
    np.testing.assert_allclose(clean.sps(np.array([2, 4, 6])), [100.0, 50.0, 1 / 0.03])
    assert clean.sps(4) < StepCurve.from_latencies([2, 6], [0.01, 0.03]).sps(4)


def test_affine_fits_the_step_time_as_a_line_at_every_size():
    # Times 10 + 2 B ms exactly, then with noise around that line.
    exact = StepCurve.from_latencies([1, 3, 5], [0.012, 0.016, 0.020], {"device": "cpu"}).affine()
    assert exact.sizes == (1, 2, 3, 4, 5) and exact.meta["device"] == "cpu"
    np.testing.assert_allclose(1.0 / np.array(exact.steps_per_second), [0.012, 0.014, 0.016, 0.018, 0.020])
    assert exact.meta["fixed_seconds"] == pytest.approx(0.010) and exact.meta["seconds_per_token"] == pytest.approx(0.002)
    assert exact.meta["r2"] == pytest.approx(1.0)
    noisy = StepCurve.from_latencies([1, 2, 3, 4], [0.013, 0.013, 0.017, 0.017]).affine()
    seconds = 1.0 / np.array(noisy.steps_per_second)
    np.testing.assert_allclose(seconds, [0.0126, 0.0142, 0.0158, 0.0174])  # least squares: 11 + 1.6 B ms
    assert 0 < noisy.meta["r2"] < 1
    falling = StepCurve.from_latencies([1, 2], [0.02, 0.01]).affine()  # noise on a flat table: slope 0
    np.testing.assert_allclose(1.0 / np.array(falling.steps_per_second), [0.015, 0.015])
    # Noise on a table proportional to B: least squares gives 3 B - 0.58 ms, negative at B = 1
    # (a smoke run of chapter 06b measured such a table); the line goes through the origin instead.
    proportional = StepCurve.from_latencies([1, 3, 5], [0.0025, 0.0090, 0.0145]).affine()
    assert proportional.meta["fixed_seconds"] == 0.0
    assert proportional.meta["seconds_per_token"] == pytest.approx(0.102 / 35)  # sum(B t) / sum(B^2)
    np.testing.assert_allclose(1.0 / np.array(proportional.steps_per_second), np.arange(1, 6) * 0.102 / 35)
    assert StepCurve.from_latencies([4], [0.5]).affine().sizes == (4,)
