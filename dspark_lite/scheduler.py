"""Algorithm 1, the hardware-aware prefix scheduler (`schedule`; `schedule_reference` line by line),
and the baselines it is measured against (paper section 3.2.2, Algorithm 1; the asynchronous
variant of section 5.2; chapter 06, put to work in chapter 06b).

DSpark's drafter proposes gamma tokens per request together with confidences c_{r,j}: the
probability that token j survives verification given that tokens 1..j-1 did. The product
a_{r,j} = c_{r,1} ... c_{r,j} (Algorithm 1, line 1) is the probability that the first j tokens
all survive. The scheduler trades expected accepted tokens against the cost of a bigger
verification batch, read from a profiled step curve SPS(B) (`stepcurve.StepCurve`, forward
steps per second at B batch tokens):

    B(l)     = sum_r (1 + l_r)                          batch tokens
    tau(l)   = sum_r (1 + sum_{j <= l_r} a_{r,j})        expected tokens produced
    Theta(l) = tau(l) * SPS(B(l))                        expected tokens per second

Candidates (r, j) with a_{r,j} > 0 are visited by decreasing a_{r,j} (line 2); each one adds a
token while Theta improves, and the search stops at the first candidate that does not improve
it (line 4, the causal BREAK). That stop only ever looks at tokens it has already added, which
keeps speculative decoding lossless; the unconstrained `global_search` does not (Appendix A).

Ties: candidates with equal a_{r,j} are visited by position j ascending, then request r
ascending. Within a request a_{r,j} never increases with j, so every prefix of the order
gives each request a prefix of its block, and l_r = how many of its candidates were taken.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from . import checks
from .stepcurve import StepCurve

Scheduler = Callable[[ArrayLike, StepCurve], np.ndarray]  # (confidences [R, gamma], curve) -> lengths [R]


# ----------------------------------------------------------------------------- Algorithm 1


def survival(confidences: ArrayLike, *, allow_1d: bool = True) -> np.ndarray:
    """Prefix survival a_{r,j} = prod_{i<=j} c_{r,i} (line 1), the head's predicted survival
    of the first j drafts, of confidences c[R, gamma] (or one block's c[gamma]), same shape
    back: finite probabilities in [0, 1], ValueError otherwise. The schedulers pass
    allow_1d=False: they read R requests' blocks, never one block alone."""
    return np.cumprod(checks.confidences(confidences, allow_1d=allow_1d), axis=-1)  # [R, gamma] or [gamma]


def prefix_thetas(a: np.ndarray, curve: StepCurve) -> tuple[np.ndarray, np.ndarray]:
    """The candidate order of survival a[R, gamma] (as `survival` returns it, R fitting the
    curve), and Theta_k = tau_k * SPS(R + k) after taking its first k candidates, k = 0..n:
    every value Algorithm 1's loop (lines 3-4) would compute, at once. The order holds flat
    indices (j - 1) * R + r of the candidates a > 0 (line 2), cut where the batch would leave
    the profiled table."""
    requests = a.shape[0]
    flat = a.T.ravel()  # [gamma * R], j-major
    order = np.argsort(-flat, kind="stable")  # decreasing a, ties by j then r
    order = order[:min(int(np.count_nonzero(flat)), curve.max_batch - requests)]  # [n]
    tau = np.cumsum(np.concatenate(([float(requests)], flat[order])))  # [n + 1], line 4's additions
    return order, tau * curve.table[requests:requests + order.size + 1]  # [n + 1]


def _lengths(order: np.ndarray, taken: int, requests: int) -> np.ndarray:
    """l[R] after the first `taken` candidates: they are a prefix of each request's block, so
    l_r = max j = how many of them belong to request r."""
    return np.bincount(order[:taken] % requests, minlength=requests)


def schedule(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Algorithm 1, vectorised: per-request draft lengths l (ints, shape (R,)).

    Candidates are taken by decreasing a_{r,j} while Theta = tau * SPS(B) strictly improves;
    the first one that does not improve it stops the search (the causal break). A candidate
    that would push B past the curve's largest profiled size is not allowed: the search
    stops there too.
    """
    a = survival(confidences, allow_1d=False)  # [R, gamma]
    checks.validate_requests_fit(a.shape[0], curve)
    order, theta = prefix_thetas(a, curve)
    # Before the break every step improved, so the running best is the previous Theta.
    stops = np.flatnonzero(theta[1:] <= theta[:-1])
    taken = int(stops[0]) if stops.size else order.size
    return _lengths(order, taken, a.shape[0])


def schedule_reference(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Algorithm 1 as a plain loop over candidates, line by line; the tests hold `schedule`
    to it exactly."""
    a = survival(confidences, allow_1d=False)
    requests, gamma = a.shape
    checks.validate_requests_fit(requests, curve)
    candidates = [(r, j) for r in range(requests) for j in range(1, gamma + 1) if a[r, j - 1] > 0]
    candidates.sort(key=lambda rj: (-a[rj[0], rj[1] - 1], rj[1], rj[0]))
    lengths = [0] * requests
    best = list(lengths)
    batch, tau = requests, float(requests)
    theta_best = requests * curve.table[requests]
    for r, j in candidates:
        if batch + 1 > curve.max_batch:  # beyond the profiled table: not allowed
            break
        lengths[r] = j
        batch += 1
        tau += a[r, j - 1]
        theta = tau * curve.table[batch]
        if theta > theta_best:
            theta_best = theta
            best = list(lengths)
        else:
            break
    return np.array(best, dtype=np.int64)


def prefix_throughputs(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Theta after each prefix of the candidate order: entry k takes the first k candidates
    (entry 0 drafts nothing)."""
    a = survival(confidences, allow_1d=False)
    checks.validate_requests_fit(a.shape[0], curve)
    return prefix_thetas(a, curve)[1]


def global_search(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """The retrospective search: the best prefix of the candidate order, no break. It finds
    the optimum, but looks at confidences of tokens it then drops, which biases the output
    (Appendix A)."""
    a = survival(confidences, allow_1d=False)
    checks.validate_requests_fit(a.shape[0], curve)
    order, theta = prefix_thetas(a, curve)
    return _lengths(order, int(np.argmax(theta)), a.shape[0])


def expected_throughput(confidences: ArrayLike, lengths: ArrayLike, curve: StepCurve) -> float:
    """Theta(l) = tau(l) * SPS(B(l)) with tau = sum_r (1 + sum_{j<=l_r} a_{r,j}) and
    B = sum_r (1 + l_r)."""
    a = survival(confidences, allow_1d=False)  # [R, gamma]
    requests, gamma = a.shape
    l = checks.lengths_in_range(lengths, requests, gamma)  # [R]
    cumulative = np.concatenate([np.zeros((requests, 1)), np.cumsum(a, axis=1)], axis=1)  # [R, gamma + 1]
    tau = requests + cumulative[np.arange(requests), l].sum()
    return float(tau * curve.sps(requests + int(l.sum())))


# ----------------------------------------------------------------------------- baselines


def fixed_length(gamma: int | None = None) -> Scheduler:
    """Baseline: every request drafts `gamma` tokens (None: the whole block), clipped to the
    block size."""
    if gamma is not None:
        gamma = checks.positive_int(gamma, "gamma", minimum=0)

    def fixed(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
        requests, block = checks.confidences(confidences).shape
        return np.full(requests, block if gamma is None else min(gamma, block), dtype=np.int64)

    return fixed


def mtp1(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Baseline: one drafted token per request, as MTP-1 serving does."""
    return np.ones(checks.confidences(confidences).shape[0], dtype=np.int64)


def threshold_lengths(c: ArrayLike, threshold: float, cumulative: bool = False) -> np.ndarray:
    """Draft lengths l[N] a static threshold keeps: each block of c[N, gamma] is cut before its
    first position whose confidence c_k (or, with `cumulative`, whose survival a_k) is below
    `threshold`, as DeepSpec's evaluation does; a threshold of 0 keeps every block whole."""
    conf = checks.confidences(c)  # [N, gamma]
    threshold = checks.in_interval(threshold, "threshold", 0.0, 1.0)
    below = (survival(conf) if cumulative else conf) < threshold  # [N, gamma]
    return np.where(below.any(axis=1), below.argmax(axis=1), conf.shape[1])


def static_threshold(threshold: float, cumulative: bool = False) -> Scheduler:
    """Baseline: cut each block before its first confidence below `threshold` (DeepSpec's
    evaluation; threshold <= 0 keeps the whole block). cumulative=True cuts on the prefix
    survival a_{r,j} instead of c_{r,j}."""
    threshold = checks.in_interval(threshold, "threshold", 0.0, 1.0)

    def thresholded(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
        return threshold_lengths(confidences, threshold, cumulative).astype(np.int64)

    return thresholded


def asynchronous_schedule(current_confidences: ArrayLike, curve: StepCurve,
                          stale_confidences: ArrayLike) -> np.ndarray:
    """Production variant (section 5.2), in every scheduler's order (confidences, curve) with the
    stale confidences last. The capacity K, extra batch tokens, comes from the
    global search (no break) on the confidences of two steps earlier; the current step then
    takes its K largest survival probabilities (prefix-closed, ties by j). K cannot see the
    current tokens, so verification stays lossless."""
    stale = survival(stale_confidences, allow_1d=False)  # [R, gamma]
    a = survival(current_confidences, allow_1d=False)  # [R, gamma]
    checks.validate_requests_fit(stale.shape[0], curve)
    checks.validate_requests_fit(a.shape[0], curve)
    capacity = int(np.argmax(prefix_thetas(stale, curve)[1]))
    order, _ = prefix_thetas(a, curve)
    return _lengths(order, min(capacity, order.size), a.shape[0])


SCHEDULERS: dict[str, Scheduler] = {
    "dspark": schedule,
    "global_search": global_search,
    "fixed": fixed_length(),
    "mtp1": mtp1,
    "none": fixed_length(0),  # no speculation: every request sends its anchor only (plain decoding)
}


def schedule_trials(confidences: ArrayLike, scheduler: Scheduler, curve: StepCurve) -> np.ndarray:
    """Run a scheduler on many trials at once: confidences (N, R, gamma) -> lengths (N, R).
    Each distinct confidence matrix is scheduled once."""
    c = _confidence_trials(confidences)  # [N, R, gamma]
    distinct, inverse = np.unique(c.reshape(c.shape[0], -1), axis=0, return_inverse=True)
    lengths = np.stack([scheduler(row.reshape(c.shape[1:]), curve) for row in distinct])  # [distinct, R]
    return lengths[inverse.reshape(-1)]


# --- checks (this module's door)


def _confidence_trials(c: ArrayLike) -> np.ndarray:
    """Confidences of many trials, c[N, R, gamma] with N >= 1, as float64 (each trial's
    [R, gamma] is checked by the scheduler that reads it); ValueError otherwise."""
    arr = checks.float_array(c, "confidences")
    if arr.ndim != 3 or arr.shape[0] == 0:
        raise ValueError(f"confidences must be shaped (N trials >= 1, R, gamma); got {arr.shape}")
    return arr
