"""Tests for dspark_lite.harness.serving.scheduler_studies (chapter 06): the brute-force check and Appendix A's Monte Carlo."""
import numpy as np
import pytest

from dspark_lite.harness.serving.scheduler_studies import (APPENDIX_A_CURVE, appendix_a_asynchronous,
                                                           appendix_a_confidences, appendix_a_monte_carlo,
                                                           brute_force_optimum, brute_force_study,
                                                           is_unimodal, random_step_curve)
from dspark_lite.scheduler import expected_throughput, prefix_throughputs, schedule


def test_random_step_curves_are_synthetic_and_non_increasing():
    rng = np.random.default_rng(8)
    for max_batch in (1, 2, 17):
        curve = random_step_curve(rng, max_batch)
        assert curve.sizes == tuple(range(1, max_batch + 1)) and curve.meta["kind"] == "synthetic"
        assert curve.sps(1) == 1.0 and np.all(np.diff(curve.steps_per_second) <= 0)
    with pytest.raises(ValueError, match="max_batch must be an integer >= 1"):
        random_step_curve(rng, 0)


def test_is_unimodal():
    assert is_unimodal([1.0, 2.0, 3.0, 2.5, 2.5, 1.0]) and is_unimodal([3.0, 2.0]) and is_unimodal([1.0])
    assert not is_unimodal([1.0, 0.9, 1.1])     # dips, then rises above the first peak
    assert not is_unimodal([1.0, 0.9, 0.95])    # rises again after the peak, even if below it
    assert not is_unimodal([1.0, 1.0, 2.0])     # a flat step before the peak stops Algorithm 1
    with pytest.raises(ValueError, match="non-empty 1-D"):
        is_unimodal([])


def test_brute_force_study_finds_every_unimodal_optimum_and_some_misses():
    counts = brute_force_study(1000, np.random.default_rng(9))
    assert counts["unimodal"] + counts["not unimodal"] == 1000 and counts["unimodal"] > 100
    assert counts["unimodal, optimum found"] == counts["unimodal"]
    assert 0 < counts["not unimodal, optimum missed"] <= counts["not unimodal"]


def test_on_a_jagged_curve_the_early_break_misses_the_optimum():
    c = [[0.8, 0.9]]  # Appendix A after drafting A
    assert schedule(c, APPENDIX_A_CURVE).tolist() == [0]
    assert brute_force_optimum(c, APPENDIX_A_CURVE).tolist() == [2]
    np.testing.assert_allclose(prefix_throughputs(c, APPENDIX_A_CURVE), [1.0, 0.9, 1.134])
    assert expected_throughput(c, schedule(c, APPENDIX_A_CURVE), APPENDIX_A_CURVE) < \
        expected_throughput(c, brute_force_optimum(c, APPENDIX_A_CURVE), APPENDIX_A_CURVE)


def test_appendix_a_monte_carlo():
    rng = np.random.default_rng(4)
    assert appendix_a_monte_carlo(100_000, causal=False, rng=rng) == pytest.approx(0.85, abs=0.01)
    assert appendix_a_monte_carlo(100_000, causal=True, rng=rng) == pytest.approx(0.70, abs=0.01)


def test_appendix_a_confidences_and_the_asynchronous_variant():
    np.testing.assert_allclose(appendix_a_confidences([0, 1]), [[[0.8, 0.9]], [[0.8, 0.0]]])
    assert appendix_a_asynchronous(100_000, np.random.default_rng(10)) == pytest.approx(0.70, abs=0.01)
    with pytest.raises(ValueError, match="trials must be an integer >= 1"):
        appendix_a_asynchronous(0)
