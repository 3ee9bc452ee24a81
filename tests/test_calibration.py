"""Tests for dspark_lite.calibration (chapter 05): metrics, PAV, the calibrators, validation.

Runs in a few seconds on one CPU thread; every random input has a fixed seed."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dspark_lite import calibration as cal
from dspark_lite import checks
from dspark_lite.calibration import CalibrationWarning
from dspark_lite.record import logit, sigmoid
from dspark_lite.scheduler import survival, threshold_lengths
from synthetic import synthetic_rollouts

# An unexpected CalibrationWarning fails the test; expected ones are caught by pytest.warns.
pytestmark = pytest.mark.filterwarnings("error::dspark_lite.calibration.CalibrationWarning")

GAMMA = 5


@pytest.fixture(scope="module")
def rollouts():
    """20k blocks from a known model: true conditional survival sigmoid(z_k), reported logit
    3 z_k (over-confident); split 50/50 into calibration and test. z: the logits, c their sigmoid."""
    z, n_acc, true = synthetic_rollouts(20_000, GAMMA, overconfidence=3.0, seed=1)
    cal_idx, test_idx = cal.split_calibration_test(len(n_acc), fraction=0.5, seed=0)
    return SimpleNamespace(z=z, c=sigmoid(z), n=n_acc, true=true, cal=cal_idx, test=test_idx)


@pytest.fixture(scope="module")
def sts(rollouts):
    return cal.SequentialTemperatureScaling().fit(rollouts.z[rollouts.cal], rollouts.n[rollouts.cal])


# ----------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------


def test_ece_hand_cases():
    p, y = [0.1, 0.2, 0.9, 0.95], [0, 1, 1, 1]
    # bins=2: bin 0 holds 0.1, 0.2 (mean p .15, mean y .5); bin 1 holds .9, .95 (.925 vs 1).
    assert cal.ece(p, y, bins=2) == pytest.approx(0.5 * 0.35 + 0.5 * 0.075, abs=1e-12)
    assert cal.ece(p, y, bins=1) == pytest.approx(abs(0.75 - 0.5375), abs=1e-12)
    # p = 1.0 lands in the last bin, p = 0.0 in the first: both perfectly calibrated here.
    assert cal.ece([0.0, 1.0], [0, 1], bins=15) == 0.0


def test_ece_small_when_calibrated_large_when_not():
    rng = np.random.default_rng(0)
    n = 20_000
    p = rng.random(n)
    y = rng.random(n) < p
    # Noise floor: each of 15 bins holds ~1333 samples, E|gap| <= sqrt(2/pi) * sqrt(.25/1333)
    # ~ 0.011, and the weighted mean has sd ~ 0.002; 0.02 is far above it.
    assert cal.ece(p, y) < 0.02
    # Predictions shifted up by 0.2: every bin is off by 0.2 in the same direction, so the
    # ECE is 0.2 - (mean(y) - mean(p)), whose sd is sqrt(0.2 / n) ~ 0.003.
    p2 = rng.random(n) * 0.8
    y2 = rng.random(n) < p2
    assert cal.ece(p2 + 0.2, y2) == pytest.approx(0.2, abs=0.015)


def _brute_auroc(p, y):
    pos, neg = p[y], p[~y]
    diff = pos[:, None] - neg[None, :]
    return ((diff > 0).sum() + 0.5 * (diff == 0).sum()) / (pos.size * neg.size)


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_pairwise_count_with_ties(seed):
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 10, size=301) / 10  # heavy ties
    y = rng.random(301) < 0.4
    assert abs(cal.auroc(p, y) - _brute_auroc(p, y)) <= 1e-12


def test_auroc_hand_cases_and_single_class():
    assert cal.auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert cal.auroc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert cal.auroc([0.3, 0.3, 0.3, 0.3], [0, 1, 0, 1]) == 0.5
    assert cal.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    with pytest.warns(CalibrationWarning, match="one class only"):
        assert np.isnan(cal.auroc([0.2, 0.7], [1, 1]))


def test_average_ranks_ties():
    np.testing.assert_array_equal(cal.average_ranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])),
                                  [4.0, 1.0, 4.0, 2.0, 4.0])


def test_brier_hand_case():
    assert cal.brier([0.2, 0.9], [0, 1]) == pytest.approx((0.04 + 0.01) / 2, abs=1e-15)
    assert cal.brier([0.5, 0.5], [True, False]) == 0.25


def test_reliability_curve_hand_case():
    curve = cal.reliability_curve([0.05, 0.15, 0.12, 0.95], [0, 1, 0, 1], bins=10)
    np.testing.assert_array_equal(curve.counts, [1, 2, 0, 0, 0, 0, 0, 0, 0, 1])
    np.testing.assert_allclose(curve.bin_centers, np.arange(10) / 10 + 0.05)
    np.testing.assert_allclose(curve.mean_predicted[[0, 1, 9]], [0.05, 0.135, 0.95])
    np.testing.assert_allclose(curve.observed_frequency[[0, 1, 9]], [0.0, 0.5, 1.0])
    assert np.isnan(curve.mean_predicted[2]) and np.isnan(curve.observed_frequency[5])
    frame = curve.to_frame()
    assert list(frame.columns) == ["bin_center", "mean_predicted", "observed_frequency", "count"]
    assert frame["count"].sum() == 4


# ----------------------------------------------------------------------------------------
# Survival, per-position metrics, splits
# ----------------------------------------------------------------------------------------


def test_survival_targets_and_predicted_survival():
    s = cal.survival_targets([0, 2, 3], 3)
    np.testing.assert_array_equal(s, [[False, False, False], [True, True, False], [True, True, True]])
    c = np.array([[0.9, 0.5, 0.2], [0.4, 0.5, 0.5]])
    np.testing.assert_allclose(survival(c), [[0.9, 0.45, 0.09], [0.4, 0.2, 0.1]])
    np.testing.assert_allclose(survival([0.9, 0.5]), [0.9, 0.45])  # one block


def test_per_position_metrics_matches_manual(rollouts):
    c, n = rollouts.c[:3000], rollouts.n[:3000]
    df = cal.per_position_metrics(c, n)
    assert isinstance(df, pd.DataFrame) and list(df["position"]) == [1, 2, 3, 4, 5]
    a, s = np.cumprod(c, axis=1), cal.survival_targets(n, GAMMA)
    k = 3
    row = df.iloc[k - 1]
    assert row["prefix_ece"] == pytest.approx(cal.ece(a[:, k - 1], s[:, k - 1]), abs=1e-12)
    assert row["prefix_auroc"] == pytest.approx(cal.auroc(a[:, k - 1], s[:, k - 1]), abs=1e-12)
    assert row["prefix_brier"] == pytest.approx(cal.brier(a[:, k - 1], s[:, k - 1]), abs=1e-12)
    assert row["survival_rate"] == pytest.approx(s[:, k - 1].mean(), abs=1e-12)
    reached = n >= k - 1
    y = n[reached] >= k
    assert row["n_reached"] == reached.sum()
    assert row["conditional_acceptance"] == pytest.approx(y.mean(), abs=1e-12)
    assert row["conditional_ece"] == pytest.approx(cal.ece(c[reached, k - 1], y), abs=1e-12)
    assert row["conditional_auroc"] == pytest.approx(cal.auroc(c[reached, k - 1], y), abs=1e-12)
    # At k = 1 every block is reached: prefix and conditional views coincide.
    assert df.iloc[0]["prefix_ece"] == pytest.approx(df.iloc[0]["conditional_ece"], abs=1e-15)


def test_raw_synthetic_confidences_are_overconfident(rollouts):
    df = cal.per_position_metrics(rollouts.c[rollouts.test], rollouts.n[rollouts.test])
    assert (df["prefix_mean_predicted"] > df["survival_rate"] + 0.05).all()
    assert df["prefix_ece"].min() > 0.1


def test_split_calibration_test_is_deterministic_and_disjoint():
    a_cal, a_test = cal.split_calibration_test(101, 0.3, seed=4)
    b_cal, b_test = cal.split_calibration_test(101, 0.3, seed=4)
    np.testing.assert_array_equal(a_cal, b_cal)
    np.testing.assert_array_equal(a_test, b_test)
    assert len(a_cal) == 30 and len(a_test) == 71
    np.testing.assert_array_equal(np.sort(np.r_[a_cal, a_test]), np.arange(101))
    other, _ = cal.split_calibration_test(101, 0.3, seed=5)
    assert not np.array_equal(a_cal, other)
    with pytest.raises(ValueError, match="fraction must lie in"):
        cal.split_calibration_test(10, 1.0)
    with pytest.raises(ValueError, match=r"n \(blocks to split\) must be an integer >= 2; got 1"):
        cal.split_calibration_test(1, 0.5)
    with pytest.raises(ValueError, match=r"calibration side of 0.01 x 10 blocks must lie in \(0, 10\); got 0"):
        cal.split_calibration_test(10, 0.01)


def test_interval_and_count_checks_say_what_was_wrong():
    with pytest.raises(ValueError, match=r"eps must lie in \(0, 0.5\); got 0.5"):
        cal.IsotonicCalibration(eps=0.5)
    with pytest.raises(ValueError, match=r"threshold must lie in \[0, 1\]; got nan"):
        threshold_lengths(np.full((2, 3), 0.5), float("nan"))
    with pytest.raises(ValueError, match="grid must be positive and finite"):
        cal.PerPositionTemperatureScaling(grid=[1.0, np.inf])
    with pytest.raises(ValueError, match="number of grid temperatures must be an integer >= 1; got 0"):
        cal.SequentialTemperatureScaling(grid=[])
    with pytest.raises(ValueError, match="y and weights must be non-empty 1-D arrays of equal length"):
        cal.pool_adjacent_violators([1.0, 2.0], [1.0])


def test_pav_hand_worked_examples():
    # [0, 1, 0] pools the violating (1, 0) to 0.5; later [1, 1, 0] pools to 2/3.
    np.testing.assert_allclose(cal.pool_adjacent_violators([0, 1, 0, 1, 1, 0]),
                               [0, 0.5, 0.5, 2 / 3, 2 / 3, 2 / 3])
    np.testing.assert_allclose(cal.pool_adjacent_violators([1, 3, 2, 4, 3.5, 5]),
                               [1, 2.5, 2.5, 3.75, 3.75, 5])
    # Weights: (3 with weight 3, 1 with weight 1) pools to (9 + 1) / 4 = 2.5.
    np.testing.assert_allclose(cal.pool_adjacent_violators([3, 1], [3, 1]), [2.5, 2.5])


def test_pav_is_monotone_and_keeps_weighted_mean():
    rng = np.random.default_rng(3)
    y, w = rng.random(500), rng.random(500) + 0.1
    fit = cal.pool_adjacent_violators(y, w)
    assert np.all(np.diff(fit) >= 0)
    assert np.sum(w * fit) == pytest.approx(np.sum(w * y), rel=1e-12)
    assert np.sum(w * (fit - y) ** 2) < np.sum(w * (np.sort(y) - y) ** 2)  # closer than sorting


# ----------------------------------------------------------------------------------------
# Calibrators on the known-model rollouts
# ----------------------------------------------------------------------------------------


def _mean_prefix_ece(c, n):
    a, s = survival(c), cal.survival_targets(n, c.shape[1])
    return np.mean([cal.ece(a[:, k], s[:, k]) for k in range(c.shape[1])])


def test_sts_lowers_prefix_ece_on_test_split(rollouts, sts):
    z_test, n_test = rollouts.z[rollouts.test], rollouts.n[rollouts.test]
    before = _mean_prefix_ece(sigmoid(z_test), n_test)
    after = _mean_prefix_ece(sigmoid(sts.transform(z_test)), n_test)
    assert after <= 0.6 * before  # the bar: at least a 40% reduction
    assert after < 0.03 < 0.1 < before  # measured: about 0.17 -> 0.011
    # The true temperature is 3 at every position; the later positions rest on fewer
    # surviving blocks, so allow a wider band there.
    assert np.all(np.abs(sts.temperatures_[:3] - 3.0) < 0.5)
    assert np.all((sts.temperatures_ > 1.5) & (sts.temperatures_ < 5.0))
    assert sts.fallback_positions_ == []


def test_sts_is_sequential_grid_argmin(rollouts, sts):
    # T_k minimises the ECE of a_k over the grid with T_1..T_{k-1} fixed at the fitted values,
    # scored on ALL calibration blocks against the prefix survival s_k.
    z, n = rollouts.z[rollouts.cal], rollouts.n[rollouts.cal]
    s = cal.survival_targets(n, GAMMA)
    grid = cal.default_temperature_grid()
    assert grid.size == 201 and grid[100] == 1.0
    assert grid[0] == pytest.approx(0.05) and grid[-1] == pytest.approx(20)
    for k in (2, 4):
        prior = np.prod(cal.temperature_scale(z[:, : k - 1], sts.temperatures_[: k - 1]), axis=1)
        errors = [cal.ece(prior * cal.temperature_scale(z[:, k - 1], t), s[:, k - 1]) for t in grid]
        chosen = cal.ece(prior * cal.temperature_scale(z[:, k - 1], sts.temperatures_[k - 1]), s[:, k - 1])
        assert sts.temperatures_[k - 1] in grid
        assert chosen == pytest.approx(min(errors), abs=1e-15)


def test_sts_preserves_per_position_ranking(rollouts, sts):
    c_test, n_test = rollouts.c[rollouts.test], rollouts.n[rollouts.test]
    c_new = sigmoid(sts.transform(rollouts.z[rollouts.test]))
    raw = cal.per_position_metrics(c_test, n_test)
    new = cal.per_position_metrics(c_new, n_test)
    np.testing.assert_allclose(new["conditional_auroc"], raw["conditional_auroc"], rtol=0, atol=1e-6)
    assert new["prefix_auroc"][0] == pytest.approx(raw["prefix_auroc"][0], abs=1e-6)  # a_1 = c'_1
    # The per-position orders themselves are identical, not just their AUROC.
    for k in range(GAMMA):
        order = np.argsort(c_test[:, k], kind="mergesort")
        assert np.all(np.diff(c_new[order, k]) >= 0)


def test_sts_does_not_preserve_prefix_ranking_in_general(rollouts, sts):
    # Hand case with two temperatures: A = (0.9, 0.55) beats B = (0.6, 0.8) on the raw a_2,
    # and loses after T = (3, 1).
    c = np.array([[0.9, 0.55], [0.6, 0.8]])
    a_raw = survival(c)[:, 1]
    a_new = survival(cal.temperature_scale(logit(c), np.array([3.0, 1.0])))[:, 1]
    assert a_raw[0] > a_raw[1] and a_new[0] < a_new[1]
    # Even one shared temperature reorders a pair.
    c = np.array([[0.99, 0.3], [0.6, 0.6]])
    a_raw, a_new = survival(c)[:, 1], survival(cal.temperature_scale(logit(c), 3.0))[:, 1]
    assert a_raw[0] < a_raw[1] and a_new[0] > a_new[1]
    # Measured on the rollouts: the AUROC of a_k, k >= 2, moves (here it rises, towards the
    # ranking by the true survival probability, which uses T = 3 exactly).
    c_test, n_test = rollouts.c[rollouts.test], rollouts.n[rollouts.test]
    raw = cal.per_position_metrics(c_test, n_test)["prefix_auroc"].to_numpy()
    new = cal.per_position_metrics(sigmoid(sts.transform(rollouts.z[rollouts.test])), n_test)["prefix_auroc"].to_numpy()
    assert np.all(new[1:] - raw[1:] > 1e-3)


def test_sts_keeps_dominance_order(rollouts, sts):
    rng = np.random.default_rng(7)
    upper = rollouts.c[rollouts.test][:2000]
    lower = upper * rng.uniform(0.5, 1.0, size=upper.shape)  # dominated position by position
    calibrated = lambda c: survival(sigmoid(sts.transform(logit(c))))
    assert np.all(calibrated(upper) >= calibrated(lower))


def test_per_position_temperature_scaling_recovers_temperature(rollouts):
    pp = cal.PerPositionTemperatureScaling().fit(rollouts.z[rollouts.cal], rollouts.n[rollouts.cal])
    assert np.all(np.abs(pp.temperatures_ - 3.0) < 0.5)
    c_test, n_test = rollouts.c[rollouts.test], rollouts.n[rollouts.test]
    raw = cal.per_position_metrics(c_test, n_test)
    new = cal.per_position_metrics(sigmoid(pp.transform(rollouts.z[rollouts.test])), n_test)
    assert new["conditional_ece"].mean() <= 0.4 * raw["conditional_ece"].mean()
    np.testing.assert_allclose(new["conditional_auroc"], raw["conditional_auroc"], rtol=0, atol=1e-6)


def test_isotonic_calibration_lowers_conditional_ece(rollouts):
    iso = cal.IsotonicCalibration().fit(rollouts.z[rollouts.cal], rollouts.n[rollouts.cal])
    c_test, n_test = rollouts.c[rollouts.test], rollouts.n[rollouts.test]
    out = sigmoid(iso.transform(rollouts.z[rollouts.test]))
    assert out.shape == c_test.shape and out.min() >= 1e-4 - 1e-12 and out.max() <= 1 - 1e-4 + 1e-12
    for k in range(GAMMA):  # non-decreasing in c_k
        order = np.argsort(c_test[:, k], kind="mergesort")
        assert np.all(np.diff(out[order, k]) >= 0)
    raw = cal.per_position_metrics(c_test, n_test)
    new = cal.per_position_metrics(out, n_test)
    assert new["conditional_ece"].mean() <= 0.4 * raw["conditional_ece"].mean()
    assert _mean_prefix_ece(out, n_test) <= 0.6 * _mean_prefix_ece(c_test, n_test)


def test_isotonic_hand_worked_example():
    # Ties merged first: x .2 -> 1/2 (2 blocks), .4 -> 1, .6 -> 0 (2 blocks), .8 -> 1.
    # PAV pools (1, 0, 0) to 1/3, then (1/2, 1/2, 1/3 x3) to 0.4: knots (.2 .4 .6 .8) -> (.4 .4 .4 1).
    c = np.array([[0.2], [0.2], [0.4], [0.6], [0.6], [0.8]])
    iso = cal.IsotonicCalibration(eps=1e-4).fit(logit(c), [0, 1, 1, 0, 0, 1])
    out = sigmoid(iso.transform(logit(np.array([[0.1], [0.5], [0.7], [0.9]]))))[:, 0]
    np.testing.assert_allclose(out, [0.4, 0.4, 0.7, 1 - 1e-4], rtol=0, atol=1e-12)


@pytest.mark.parametrize("make", [cal.SequentialTemperatureScaling, cal.PerPositionTemperatureScaling,
                                  cal.IsotonicCalibration])
def test_transform_one_block_matches_batch(rollouts, make):
    model = make().fit(rollouts.z[:2000], rollouts.n[:2000])
    batch = model.transform(rollouts.z[:3])
    np.testing.assert_array_equal(model.transform(rollouts.z[1]), batch[1])
    assert np.isfinite(batch).all() and not np.allclose(batch, rollouts.z[:3])


# ----------------------------------------------------------------------------------------
# Degenerate calibration splits
# ----------------------------------------------------------------------------------------


def _no_rejection_split():
    """gamma 3; blocks accept 0 or all 3: positions 2 and 3 see no rejection."""
    rng = np.random.default_rng(2)
    c = rng.uniform(0.1, 0.9, size=(200, 3))
    return logit(c), np.where(np.arange(200) % 2 == 0, 0, 3)


@pytest.mark.parametrize("make,fallback", [(cal.SequentialTemperatureScaling, "T = 1"),
                                           (cal.PerPositionTemperatureScaling, "T = 1"),
                                           (cal.IsotonicCalibration, "the identity")])
def test_no_rejection_position_warns_and_falls_back(make, fallback):
    z, n = _no_rejection_split()
    with pytest.warns(CalibrationWarning) as record:
        model = make().fit(z, n)
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    for k, message in zip((2, 3), messages):
        assert f"position {k} of the calibration split: no rejections" in message
        assert f"falling back to {fallback} for position {k}" in message
    assert model.fallback_positions_ == [2, 3]
    out = model.transform(z)
    np.testing.assert_array_equal(out[:, 1:], z[:, 1:])  # the fallback leaves the logits as they are
    assert not np.allclose(out[:, 0], z[:, 0], atol=1e-3)  # position 1 was calibrated
    if hasattr(model, "temperatures_"):
        np.testing.assert_array_equal(model.temperatures_[1:], [1.0, 1.0])


def test_unreached_positions_warn_and_fall_back():
    z = np.full((50, 3), 0.85)
    with pytest.warns(CalibrationWarning) as record:
        sts = cal.SequentialTemperatureScaling().fit(z, np.zeros(50, dtype=int))
    messages = [str(w.message) for w in record]
    assert "position 1 of the calibration split: no acceptances" in messages[0]
    assert "position 2 of the calibration split: no block reached it" in messages[1]
    assert "position 3 of the calibration split: no block reached it" in messages[2]
    np.testing.assert_array_equal(sts.temperatures_, [1.0, 1.0, 1.0])


def test_per_position_metrics_warns_on_undefined_auroc():
    z, n = _no_rejection_split()
    with pytest.warns(CalibrationWarning, match="conditional_auroc at k=2, conditional_auroc at k=3"):
        df = cal.per_position_metrics(sigmoid(z), n)
    assert np.isnan(df["conditional_auroc"][1]) and not np.isnan(df["conditional_auroc"][0])
    assert df["conditional_acceptance"][1] == 1.0


# ----------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------


def test_confidences_are_checked_in_the_closed_unit_interval():
    """One range for confidences everywhere: [0, 1]; a saturated head (c = 1) is a confidence."""
    c = np.full((5, 3), 0.5)
    c[3, 0], c[1, 2] = 0.0, 1.0
    assert cal.per_position_metrics(c, [0, 1, 2, 3, 3])["position"].tolist() == [1, 2, 3]
    c[2, 1] = 1.5
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]; got 1\.5 at row 2, position k=2"):
        cal.per_position_metrics(c, [0, 1, 2, 3, 3])
    with pytest.raises(ValueError, match=r"got 1\.5 at index 1"):
        survival([0.5, 1.5])


def test_nan_and_wrong_shape_inputs_are_rejected():
    z = np.zeros((4, 2))
    z[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"must not be NaN .*at row 2, position k=2"):
        cal.SequentialTemperatureScaling().fit(z, [0, 1, 2, 0])
    with pytest.raises(ValueError, match=r"must have shape \(N, gamma\); got an array of shape \(3,\)"):
        checks.confidences([0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="must be numeric"):
        checks.confidences([["a", "b"]])
    with pytest.raises(RuntimeError, match="not fitted"):
        cal.IsotonicCalibration().transform(np.zeros((2, 3)))


def test_mismatched_lengths_are_rejected():
    c = np.full((120, 5), 0.5)
    n = np.zeros(119, dtype=int)
    message = "mismatched lengths: 120 confidence rows but 119 acceptance counts"
    with pytest.raises(ValueError, match=message):
        cal.per_position_metrics(c, n)
    with pytest.raises(ValueError, match=message):
        cal.IsotonicCalibration().fit(logit(c), n)
    with pytest.raises(ValueError, match="mismatched lengths: 3 predictions"):
        cal.ece([0.1, 0.2, 0.3], [0, 1])


def test_acceptance_counts_out_of_range_are_rejected():
    c = np.full((3, 5), 0.5)
    with pytest.raises(ValueError, match=r"n_accepted must hold integers in 0\.\.5.*got 6 at index 2"):
        cal.per_position_metrics(c, [0, 5, 6])
    with pytest.raises(ValueError, match=r"got -1 at index 0"):
        cal.survival_targets([-1, 2], 5)
    with pytest.raises(ValueError, match=r"got 1\.5 at index 1"):
        cal.survival_targets([1.0, 1.5], 5)
    with pytest.raises(ValueError, match="got dtype bool"):
        cal.survival_targets([True, False], 5)
    with pytest.raises(ValueError, match=r"gamma .* must be an integer >= 1"):
        cal.survival_targets([0, 1], 0)


def test_metric_inputs_are_checked():
    with pytest.raises(ValueError, match=r"outcomes must be binary \(bool or 0/1\); got 2\.0 at index 1"):
        cal.brier([0.1, 0.2], [0, 2])
    with pytest.raises(ValueError, match=r"predictions must be finite probabilities in \[0, 1\]; got -0\.1"):
        cal.auroc([-0.1, 0.2], [0, 1])
    with pytest.raises(ValueError, match="bins must be an integer >= 1"):
        cal.ece([0.1], [0], bins=0)


def test_calibrator_misuse_is_rejected(rollouts):
    with pytest.raises(RuntimeError, match="not fitted"):
        cal.SequentialTemperatureScaling().transform(rollouts.z[:2])
    model = cal.PerPositionTemperatureScaling().fit(rollouts.z[:500], rollouts.n[:500])
    with pytest.raises(ValueError, match="fitted for gamma=5 positions; got logits with 4"):
        model.transform(rollouts.z[:2, :4])
    with pytest.raises(ValueError, match="grid must be"):
        cal.SequentialTemperatureScaling(grid=[1.0, -2.0])


def test_threshold_sweep_cuts_at_the_first_low_confidence_and_counts_what_survives():
    c = np.array([[0.9, 0.4, 0.9], [0.8, 0.7, 0.2], [0.3, 0.9, 0.9]])
    accepted = np.array([3, 1, 0])
    assert threshold_lengths(c, 0.0).tolist() == [3, 3, 3]
    assert threshold_lengths(c, 0.5).tolist() == [1, 2, 0]
    assert threshold_lengths(c, 0.5, cumulative=True).tolist() == [1, 2, 0]  # 0.36 < 0.5 at k = 2
    sweep = cal.threshold_sweep(c, accepted, [0.0, 0.5])
    assert sweep.loc[0.0, "accepted_per_round"] == pytest.approx(4 / 3)
    assert sweep.loc[0.0, "rejected_per_round"] == pytest.approx(5 / 3)
    assert sweep.loc[0.5, "accepted_per_round"] == pytest.approx(2 / 3)  # min(1, 3) + min(2, 1) + 0
    assert sweep.loc[0.5, "acceptance_rate"] == pytest.approx(2 / 3)
    assert sweep.loc[0.5, "tau"] == pytest.approx(5 / 3)
    assert sweep.loc[0.5, "verified_per_round"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match=r"threshold must lie in \[0, 1\]"):
        threshold_lengths(c, 1.5)


# ----------------------------------------------------------------------------------------
# The chapter's few-line metrics against scikit-learn's (a test dependency only)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_metrics_match_scikit_learn(seed):
    from sklearn.calibration import calibration_curve
    from sklearn.metrics import brier_score_loss, roc_auc_score

    rng = np.random.default_rng(seed)
    p = np.round(rng.random(2000), 2)  # ties, as a coarse head gives
    y = rng.random(2000) < p
    assert cal.auroc(p, y) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert cal.brier(p, y) == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    # Bins: ours put a prediction on an edge (0.1) in the bin above, scikit-learn's in the bin
    # below; continuous predictions never sit on an edge.
    p = rng.random(2000)
    y = rng.random(2000) < p
    curve = cal.reliability_curve(p, y, bins=10)
    observed, predicted = calibration_curve(y, p, n_bins=10, strategy="uniform")
    filled = curve.counts > 0  # scikit-learn drops empty bins
    np.testing.assert_allclose(curve.observed_frequency[filled], observed, atol=1e-12)
    np.testing.assert_allclose(curve.mean_predicted[filled], predicted, atol=1e-12)


def test_isotonic_matches_scikit_learn():
    from sklearn.isotonic import IsotonicRegression

    rng = np.random.default_rng(5)
    x, w = rng.random(400), rng.random(400) + 0.1
    y = (rng.random(400) < x).astype(float)
    order = np.argsort(x)
    ours = cal.pool_adjacent_violators(y[order], w[order])
    theirs = IsotonicRegression().fit(x, y, sample_weight=w).predict(x[order])
    np.testing.assert_allclose(ours, theirs, atol=1e-12)
    # The calibrator at one position: scikit-learn's fit on the reached blocks, clipped like ours.
    z = logit(np.round(rng.uniform(0.05, 0.95, size=(3000, 1)), 3))
    n = (rng.random(3000) < sigmoid(z[:, 0])).astype(int)
    iso = cal.IsotonicCalibration(eps=1e-4).fit(z, n)
    grid = logit(np.linspace(0.01, 0.99, 50))[:, None]
    reference = IsotonicRegression(out_of_bounds="clip").fit(sigmoid(z[:, 0]), n).predict(sigmoid(grid[:, 0]))
    np.testing.assert_allclose(sigmoid(iso.transform(grid))[:, 0], np.clip(reference, 1e-4, 1 - 1e-4), atol=1e-9)
