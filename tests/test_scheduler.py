"""Tests for dspark_lite.scheduler (chapter 06): Algorithm 1, its baselines, and losslessness."""
import numpy as np
import pytest
from reference import chi_square_p_value

from dspark_lite.harness.serving.scheduler_studies import (APPENDIX_A_CURVE, brute_force_optimum,
                                                           speculative_first_token)
from dspark_lite.scheduler import (
    SCHEDULERS, asynchronous_schedule, expected_throughput, fixed_length, global_search, mtp1, prefix_thetas,
    prefix_throughputs, schedule, schedule_reference, schedule_trials, static_threshold, survival,
)
from dspark_lite.stepcurve import StepCurve


def random_confidences(rng, requests, gamma):
    """Smooth confidences, or (30%) a few repeated values with exact 0s and 1s, so that
    zero survivals and ties in a_{r,j} (within and across requests) are exercised."""
    if rng.random() < 0.3:
        return rng.choice([rng.random(), 0.9, 1.0, 0.0], size=(requests, gamma), p=[0.1, 0.6, 0.2, 0.1])
    return rng.beta(4, 1.5, size=(requests, gamma))


def random_curve(rng, max_batch, non_increasing=False):
    """A jagged curve (random positive rates, sorted if non_increasing), an analytic one, or
    a sparse non-increasing table."""
    kind = rng.integers(3)
    if kind == 0:
        rates = rng.uniform(0.2, 1.0, max_batch)
        return StepCurve(tuple(range(1, max_batch + 1)), tuple(np.sort(rates)[::-1] if non_increasing else rates))
    if kind == 1:
        return StepCurve.analytic(max_batch, int(rng.integers(1, max_batch + 1)), float(rng.uniform(0.5, 2)))
    sizes = np.unique(np.concatenate([[1, max_batch], rng.integers(1, max_batch + 1, 3)]))
    return StepCurve(tuple(sizes), tuple(np.sort(rng.uniform(0.2, 1.0, sizes.size))[::-1]))


def chi2_pvalue(tokens, p, vocab):
    return chi_square_p_value(np.bincount(tokens, minlength=vocab), np.asarray(p))


# ----------------------------------------------------------------------------- survival


def test_survival_is_the_cumulative_product_and_never_increases():
    rng = np.random.default_rng(0)
    c = rng.random((5, 7))
    a = survival(c)
    np.testing.assert_allclose(a[:, 3], c[:, :4].prod(axis=1))
    assert np.all(np.diff(a, axis=1) <= 0)


def test_survival_takes_one_block_too_but_the_schedulers_do_not():
    c = np.array([[0.9, 0.5, 0.2], [0.4, 0.5, 0.5]])
    np.testing.assert_allclose(survival(c[0]), survival(c)[0])  # one block: its row
    with pytest.raises(ValueError, match=r"must have shape \(N, gamma\); got an array of shape \(3,\)"):
        schedule(c[0], StepCurve.analytic(8, 4))


@pytest.mark.parametrize("bad, message", [
    ([[0.5, 1.2]], r"must lie in \[0, 1\]; got 1.2 at row 0, position k=2"),
    ([[-0.1]], r"must lie in \[0, 1\]"),
    ([[0.5, float("nan")]], r"must be finite.*nan"),
    ([[float("inf")]], r"must be finite"),
    (np.zeros((0, 3)), r"at least one block and one position; got shape \(0, 3\)"),
    (np.zeros((2, 0)), r"at least one block and one position; got shape \(2, 0\)"),
    ([0.5, 0.5], r"must have shape \(N, gamma\)"),
    ([["x"]], r"must be numeric"),
])


def test_bad_confidences_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        survival(bad, allow_1d=False)
    with pytest.raises(ValueError, match=message):
        schedule(bad, StepCurve.analytic(8, 4))


def test_requests_outside_the_curve_are_refused():
    with pytest.raises(ValueError, match=r"R = 5 requests.*\[1, 4\]"):
        schedule(np.full((5, 2), 0.9), StepCurve.analytic(4, 2))
    with pytest.raises(ValueError, match=r"lengths must be 2 integers in \[0, 2\]"):
        expected_throughput([[0.9, 0.9], [0.9, 0.9]], [1], StepCurve.analytic(8, 2))


# ----------------------------------------------------------------------------- Algorithm 1


def test_vectorised_schedule_equals_the_reference_loop():
    rng = np.random.default_rng(1)
    for _ in range(1500):
        requests, gamma = rng.integers(1, 5, size=2)
        c = random_confidences(rng, requests, gamma)
        curve = random_curve(rng, int(rng.integers(requests, requests * (gamma + 1) + 3)))
        np.testing.assert_array_equal(schedule(c, curve), schedule_reference(c, curve))


def test_prefix_thetas_orders_the_candidates_and_prices_every_prefix():
    c = [[0.9, 0.8, 0.5], [0.6, 0.9, 0.9]]
    curve = StepCurve.analytic(8, knee=4)
    a = survival(c)
    order, theta = prefix_thetas(a, curve)
    taken = a.T.ravel()[order]  # a_{r,j} in the order Algorithm 1 visits them
    assert order.size == 6 and np.all(np.diff(taken) <= 0)
    np.testing.assert_allclose(theta, [(2 + taken[:k].sum()) * curve.sps(2 + k) for k in range(7)])
    np.testing.assert_array_equal(theta, prefix_throughputs(c, curve))


def test_schedule_finds_the_optimum_when_theta_is_unimodal_along_the_order():
    # SPS non-increasing: otherwise padding a batch with zero-survival tokens (never
    # candidates) could raise SPS, and the brute force would find that.
    rng = np.random.default_rng(2)
    kept = 0
    while kept < 1000:
        requests, gamma = rng.integers(1, 5, size=2)
        c = random_confidences(rng, requests, gamma)
        curve = random_curve(rng, int(requests * (gamma + 1)), non_increasing=True)
        theta = prefix_throughputs(c, curve)
        peak = int(np.argmax(np.diff(theta) <= 0)) if np.any(np.diff(theta) <= 0) else theta.size - 1
        if theta[peak + 1:].size and theta[peak + 1:].max() > theta[peak]:
            continue  # not unimodal: the early break may stop before the optimum
        kept += 1
        best = expected_throughput(c, brute_force_optimum(c, curve), curve)
        assert expected_throughput(c, schedule(c, curve), curve) == pytest.approx(best, abs=1e-12, rel=0)
        assert expected_throughput(c, global_search(c, curve), curve) == pytest.approx(best, abs=1e-12, rel=0)


def test_analytic_curves_are_always_unimodal_so_the_break_is_optimal():
    rng = np.random.default_rng(3)
    for _ in range(300):
        requests, gamma = rng.integers(1, 5, size=2)
        c = random_confidences(rng, requests, gamma)
        curve = StepCurve.analytic(int(requests * (gamma + 1)), int(rng.integers(1, 20)))
        best = expected_throughput(c, brute_force_optimum(c, curve), curve)
        assert expected_throughput(c, schedule(c, curve), curve) == pytest.approx(best, abs=1e-12, rel=0)


def test_hand_made_schedule():
    curve = StepCurve.analytic(12, knee=4)  # flat to 4 tokens, then 4 / B
    c = [[0.9, 0.9, 0.9], [0.5, 0.1, 0.1], [0.0, 1.0, 1.0]]
    # a: (0.9, 0.81, 0.729), (0.5, 0.05, 0.005), (0, 0, 0). B = 3 at first; one token is
    # free (B = 4), the next costs 4/5: (3 + 0.9 + 0.81) * 0.8 = 3.77 < 3.9, so stop.
    assert schedule(c, curve).tolist() == [1, 0, 0]
    # Ties go by position first: equal survival in two requests, the first request wins.
    assert schedule([[1.0, 1.0], [1.0, 1.0]], StepCurve.analytic(6, 3)).tolist() == [1, 0]
    assert schedule([[1.0, 1.0], [1.0, 1.0]], StepCurve.analytic(6, 4)).tolist() == [1, 1]


def test_the_batch_never_leaves_the_profiled_table():
    curve = StepCurve((1, 2, 3), (1.0, 1.0, 1.0))  # drafting is free, but only up to B = 3
    lengths = schedule(np.ones((2, 4)), curve)
    assert lengths.sum() + 2 <= 3
    np.testing.assert_array_equal(lengths, schedule_reference(np.ones((2, 4)), curve))
    assert brute_force_optimum(np.ones((2, 4)), curve).sum() + 2 <= 3


# ----------------------------------------------------------------------------- baselines


def test_baselines_on_hand_made_cases():
    curve = StepCurve.analytic(32, 8)
    c = np.array([[0.9, 0.6, 0.95, 0.9], [0.4, 0.9, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9]])
    assert fixed_length(2)(c, curve).tolist() == [2, 2, 2]
    assert fixed_length(9)(c, curve).tolist() == [4, 4, 4]  # clipped to the block
    assert fixed_length()(c, curve).tolist() == [4, 4, 4]
    assert mtp1(c, curve).tolist() == [1, 1, 1]
    assert static_threshold(0.7)(c, curve).tolist() == [1, 0, 4]
    # a: row 0 (0.9, 0.54, ...), row 2 (0.9, 0.81, 0.729, 0.6561)
    assert static_threshold(0.7, cumulative=True)(c, curve).tolist() == [1, 0, 3]
    assert static_threshold(0.0)(c, curve).tolist() == [4, 4, 4]
    with pytest.raises(ValueError, match=r"threshold must lie in \[0, 1\]"):
        static_threshold(1.5)
    for name, scheduler in SCHEDULERS.items():
        assert scheduler(c, curve).shape == (3,), name


def test_asynchronous_variant_takes_its_capacity_from_the_stale_confidences():
    curve = StepCurve.analytic(16, knee=6)  # flat to 6 tokens: up to 4 extra tokens for 2 requests
    stale = [[0.1, 0.1], [0.1, 0.1]]     # global search on these: 4 extra tokens (all free)
    current = [[0.9, 0.9], [0.8, 0.1]]
    assert asynchronous_schedule(current, curve, stale).tolist() == [2, 2]
    stale_expensive = StepCurve((2, 3, 4, 5, 6), (1.0, 0.5, 0.4, 0.3, 0.2))
    # The same current confidences, but the stale search on a steep curve finds K = 0 ...
    assert asynchronous_schedule(current, stale_expensive, current).tolist() == [0, 0]
    # ... and K is the stale step's: confident stale, the top-K current survivals are taken.
    curve = StepCurve((2, 3, 4, 5, 6), (1.0, 1.0, 0.9, 0.5, 0.5))
    assert global_search([[1.0, 1.0], [1.0, 1.0]], curve).sum() == 2  # K = 2 from stale
    assert asynchronous_schedule([[0.9, 0.9], [0.95, 0.1]], curve, [[1.0, 1.0], [1.0, 1.0]]).tolist() == [1, 1]
    assert asynchronous_schedule([[0.9, 0.9], [0.95, 0.1]], curve, [[0.1, 0.1], [0.1, 0.1]]).tolist() == [0, 1]


# ----------------------------------------------------------------------------- losslessness


def simulate_first_tokens(rng, scheduler, curve, p_t, p_d, first_confidence, next_confidence, trials):
    """One speculative step for R requests: draft gamma tokens from p_d, confidences c_1 fixed
    (it sees only the anchor) and c_k = next_confidence[r, k - 2, x_{k-1}], schedule, verify the
    first position. Returns each request's first output token and its draft length, (trials, R)."""
    requests, vocab = p_d.shape
    gamma = next_confidence.shape[1] + 1
    drafted = np.stack([rng.choice(vocab, size=(trials, gamma), p=p_d[r]) for r in range(requests)], axis=1)
    confidences = np.empty((trials, requests, gamma))
    confidences[:, :, 0] = first_confidence
    for k in range(1, gamma):
        confidences[:, :, k] = next_confidence[np.arange(requests), k - 1, drafted[:, :, k - 1]]
    lengths = schedule_trials(confidences, scheduler, curve)
    tokens = np.stack([speculative_first_token(drafted[:, r, 0], lengths[:, r] >= 1, p_t[r], p_d[r], rng)
                       for r in range(requests)], axis=1)
    return tokens, lengths


def test_the_causal_scheduler_keeps_speculative_decoding_lossless():
    rng = np.random.default_rng(5)
    vocab, gamma, trials = 4, 3, 30_000
    varied = 0  # requests whose drafting decision changed with the other requests' drafts
    for _ in range(5):
        requests = int(rng.integers(2, 4))
        p_t, p_d = rng.dirichlet(np.ones(vocab), requests), rng.dirichlet(np.ones(vocab), requests)
        first = rng.uniform(0.3, 1.0, requests)
        shape = (requests, gamma - 1, vocab)
        following = np.where(rng.random(shape) < 0.3, 0.0, rng.uniform(0.5, 1.0, shape))
        sizes = np.arange(1, requests * (gamma + 1) + 1)
        knee = rng.integers(requests + 1, sizes[-1])
        curve = StepCurve(tuple(sizes), tuple(np.minimum(1.0, knee / sizes) * rng.uniform(0.85, 1.0, sizes.size)))
        tokens, lengths = simulate_first_tokens(rng, schedule, curve, p_t, p_d, first, following, trials)
        drafting = (lengths >= 1).mean(axis=0)
        varied += int(np.sum((drafting > 0.05) & (drafting < 0.95)))
        for r in range(requests):
            assert chi2_pvalue(tokens[:, r], p_t[r], vocab) > 1e-3
    assert varied >= 1


def test_the_same_harness_catches_the_biased_global_search_on_appendix_a():
    rng = np.random.default_rng(6)
    p_t, p_d = np.array([[0.7, 0.3]]), np.array([[0.5, 0.5]])
    following = np.array([[[0.9, 0.0]]])  # c_2 = 0.9 after A, 0 after B
    for scheduler, lossless in [(schedule, True), (global_search, False)]:
        tokens, _ = simulate_first_tokens(rng, scheduler, APPENDIX_A_CURVE, p_t, p_d, 0.8, following, 30_000)
        assert (chi2_pvalue(tokens[:, 0], p_t[0], 2) > 1e-3) == lossless
