"""Studies of Algorithm 1 (chapter 06): the brute-force check of when its causal stop finds the
optimum, and the Monte Carlo of the paper's Appendix A (why the stop must be causal).

`brute_force_optimum` searches every length vector l in [0, gamma]^R; `brute_force_study` holds
`scheduler.schedule` to it on small random instances with `random_step_curve`s and sorts them by
`is_unimodal` (Theta unimodal along the candidate order). `appendix_a_monte_carlo` and
`appendix_a_asynchronous` run Appendix A's example (one request, gamma = 2, `APPENDIX_A_CURVE`)
through a scheduler and `speculative_first_token`, the first output token of a speculative
step under the real rejection rule, to measure how often the output is A: 0.70 when lossless.
"""
from __future__ import annotations

import itertools

import numpy as np
from numpy.typing import ArrayLike

from ... import checks
from ...scheduler import (asynchronous_schedule, expected_throughput, global_search, prefix_throughputs,
                          schedule, schedule_trials, survival)
from ...stepcurve import StepCurve

APPENDIX_A_CURVE = StepCurve((1, 2, 3), (1.0, 0.5, 0.45), {"kind": "Appendix A example"})
APPENDIX_A_P_TARGET = (0.7, 0.3)  # p_t(A), p_t(B)
APPENDIX_A_P_DRAFT = (0.5, 0.5)   # p_d(A), p_d(B)


# ----------------------------------------------------------------------------- the brute-force check


def random_step_curve(rng: np.random.Generator, max_batch: int) -> StepCurve:
    """SYNTHETIC: a random non-increasing SPS curve on 1..max_batch, each size 55-100% as fast
    as the one before (for checks of the scheduler on many shapes)."""
    max_batch = checks.positive_int(max_batch, "max_batch")
    sps = np.cumprod(np.concatenate([[1.0], rng.uniform(0.55, 1.0, size=max_batch - 1)]))
    return StepCurve(tuple(range(1, max_batch + 1)), tuple(sps.tolist()), {"kind": "synthetic"})


def brute_force_optimum(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Argmax of Theta over every length vector in [0, gamma]^R that fits the curve (first
    one on ties). Exponential in R: for small checks only. It may pad a request with tokens
    of zero survival, which Algorithm 1 never considers; that only pays where SPS rises with
    B, so compare with `schedule` on non-increasing curves."""
    requests, gamma = survival(confidences).shape
    checks.validate_requests_fit(requests, curve)
    every = np.array(list(itertools.product(range(gamma + 1), repeat=requests)), dtype=np.int64)  # [(gamma+1)^R, R]
    every = every[requests + every.sum(axis=1) <= curve.max_batch]
    thetas = [expected_throughput(confidences, lengths, curve) for lengths in every]
    return every[int(np.argmax(thetas))]


def is_unimodal(theta: ArrayLike) -> bool:
    """True when `theta` rises strictly up to its (first) maximum and never rises after it:
    then Algorithm 1's first non-improving candidate sits right after the peak, and the causal
    stop finds the best prefix of the candidate order."""
    t = _series(theta, "theta")
    peak = int(np.argmax(t))
    return bool(np.all(np.diff(t[: peak + 1]) > 0) and np.all(np.diff(t[peak:]) <= 0))


def brute_force_study(instances: int, rng: np.random.Generator) -> dict[str, int]:
    """Algorithm 1 against `brute_force_optimum` on `instances` small random instances: R and
    gamma in 1..3, confidences uniform in [0.05, 1], a `random_step_curve` on 1..R(gamma + 1).
    Counts the instances whose Theta along the candidate order is unimodal and those among them
    where the causal stop found the optimum, and the others and those among them where it
    missed. The claim: the two unimodal counts are equal."""
    counts = {"unimodal": 0, "unimodal, optimum found": 0, "not unimodal": 0, "not unimodal, optimum missed": 0}
    for _ in range(instances):
        requests, gamma = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        c = rng.uniform(0.05, 1.0, size=(requests, gamma))
        curve = random_step_curve(rng, requests * (gamma + 1))
        greedy = expected_throughput(c, schedule(c, curve), curve)
        best = expected_throughput(c, brute_force_optimum(c, curve), curve)
        if is_unimodal(prefix_throughputs(c, curve)):
            counts["unimodal"] += 1
            counts["unimodal, optimum found"] += int(np.isclose(greedy, best, rtol=1e-12, atol=0.0))
        else:
            counts["not unimodal"] += 1
            counts["not unimodal, optimum missed"] += int(greedy < best * (1 - 1e-12))
    return counts


# ----------------------------------------------------------------------------- Appendix A


def speculative_first_token(drafted: ArrayLike, use_draft: ArrayLike, p_target: ArrayLike,
                            p_draft: ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """The first output token of a speculative step, vectorised over trials. Where the
    scheduler sent the drafted token (use_draft) it is accepted with probability
    min(1, p_t/p_d), else replaced by a sample of norm(max(p_t - p_d, 0)); where it sent
    nothing the target samples from p_t."""
    p_t, p_d = _distribution(p_target, "p_target"), _distribution(p_draft, "p_draft")
    x = np.asarray(drafted)  # [N]
    n = x.size
    accept = rng.random(n) * p_d[x] < p_t[x]  # u < p_t / p_d without dividing
    residual = np.maximum(p_t - p_d, 0.0)
    residual = residual / residual.sum() if residual.sum() > 0 else p_t
    corrected = rng.choice(p_t.size, size=n, p=residual)
    from_target = rng.choice(p_t.size, size=n, p=p_t)
    return np.where(use_draft, np.where(accept, x, corrected), from_target)


def appendix_a_confidences(x1: ArrayLike) -> np.ndarray:
    """Appendix A's confidences (N, 1, 2) after drafting x1 (0 = A, 1 = B): c_1 = 0.8, and
    c_2 = 0.9 after A, 0 after B."""
    x1 = np.asarray(x1).reshape(-1)  # [N]
    confidences = np.empty((x1.size, 1, 2))  # [N, R = 1, gamma = 2]
    confidences[:, 0, 0] = 0.8
    confidences[:, 0, 1] = np.where(x1 == 0, 0.9, 0.0)
    return confidences


def appendix_a_monte_carlo(trials: int, causal: bool, rng: np.random.Generator | None = None) -> float:
    """Frequency of output token A in the paper's Appendix A example: one request, gamma = 2,
    c_1 = 0.8, c_2 = 0.9 if the drafted x_1 is A else 0, p_t = (0.7, 0.3), p_d = (0.5, 0.5),
    SPS = 1.0, 0.5, 0.45 at B = 1, 2, 3. The causal scheduler never drafts (0.70, lossless);
    the global search drafts exactly when x_1 = A (0.5 + 0.5 * 0.7 = 0.85)."""
    trials = checks.positive_int(trials, "trials")
    rng = np.random.default_rng() if rng is None else rng
    x1 = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)  # [N]
    lengths = schedule_trials(appendix_a_confidences(x1), schedule if causal else global_search, APPENDIX_A_CURVE)
    tokens = speculative_first_token(x1, lengths[:, 0] >= 1, APPENDIX_A_P_TARGET, APPENDIX_A_P_DRAFT, rng)
    return float(np.mean(tokens == 0))


def appendix_a_asynchronous(trials: int, rng: np.random.Generator | None = None) -> float:
    """Frequency of A in Appendix A's example under the section 5.2 variant
    (`scheduler.asynchronous_schedule`): the capacity K comes from the confidences of an
    earlier, independent draft, the current step takes its K most probable tokens. K cannot
    see the current x_1, so the frequency stays p_t(A) = 0.70."""
    trials = checks.positive_int(trials, "trials")
    rng = np.random.default_rng() if rng is None else rng
    stale = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)    # [N]
    current = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)  # [N]
    sends = np.zeros((2, 2), dtype=bool)  # [stale x1, current x1] -> does the step verify x1?
    for s, x in itertools.product(range(2), range(2)):
        lengths = asynchronous_schedule(appendix_a_confidences([x])[0], APPENDIX_A_CURVE,
                                        stale_confidences=appendix_a_confidences([s])[0])
        sends[s, x] = lengths[0] >= 1
    tokens = speculative_first_token(current, sends[stale, current], APPENDIX_A_P_TARGET, APPENDIX_A_P_DRAFT, rng)
    return float(np.mean(tokens == 0))


# --- checks (this module's door)


def _distribution(p: ArrayLike, name: str) -> np.ndarray:
    """A probability vector p[V] as float64: finite, non-negative, summing to 1 (within 1e-9)."""
    arr = checks.float_array(p, name)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all() or arr.min() < 0 or abs(arr.sum() - 1) > 1e-9:
        raise ValueError(f"{name} must be a 1-D probability vector summing to 1; got {arr.tolist()}")
    return arr


def _series(values: ArrayLike, name: str) -> np.ndarray:
    """`values` as a non-empty 1-D float64 array; ValueError otherwise."""
    arr = checks.float_array(values, name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array; got shape {arr.shape}")
    return arr
