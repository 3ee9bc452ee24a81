"""Choosing how many drafted tokens each request sends to verification (chapter 06).

DSpark's drafter proposes gamma tokens per request together with confidences c_{r,j}: the
probability that token j survives verification given that tokens 1..j-1 did. The product
a_{r,j} = c_{r,1} ... c_{r,j} is the probability that the first j tokens all survive. The
hardware-aware prefix scheduler (paper section 3.2.2, Algorithm 1) then trades expected
accepted tokens against the cost of a bigger verification batch, read from a profiled
step curve SPS(B) (forward steps per second at B batch tokens):

    B(l)     = sum_r (1 + l_r)                          batch tokens
    tau(l)   = sum_r (1 + sum_{j <= l_r} a_{r,j})        expected tokens produced
    Theta(l) = tau(l) * SPS(B(l))                        expected tokens per second

Candidates (r, j) are visited by decreasing a_{r,j}; each one adds a token while Theta
improves, and the search stops at the first candidate that does not improve it (the
causal BREAK). That stop only ever looks at tokens it has already added, which keeps
speculative decoding lossless; the unconstrained global search does not (Appendix A).

Ties: candidates with equal a_{r,j} are visited by position j ascending, then request r
ascending. Within a request a_{r,j} never increases with j, so every prefix of the order
gives each request a prefix of its block, and l_r = how many of its candidates were taken.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numpy.typing import ArrayLike

from . import checks
from .calibration import threshold_lengths
from .record import predicted_survival

Scheduler = Callable[[ArrayLike, "StepCurve"], np.ndarray]

MAX_TABLE_SIZE = 10_000_000  # batch sizes beyond this would make the lookup table huge


# ----------------------------------------------------------------------------- survival


def survival(confidences: ArrayLike) -> np.ndarray:
    """Prefix survival a_{r,j} = prod_{i<=j} c_{r,i} of confidences shaped (R, gamma)
    (`record.predicted_survival`). ValueError for anything that is not R >= 1 rows of
    gamma >= 1 finite probabilities in [0, 1]. Chapter 06 builds it."""
    a = predicted_survival(confidences)
    if a.ndim != 2:
        raise ValueError(f"confidences must be 2-D, shaped (R requests, gamma positions); got shape {a.shape}")
    return a


# ----------------------------------------------------------------------------- step curve


@dataclass(frozen=True)
class StepCurve:
    """A profiled step curve: SPS(B), forward steps per second at B verification tokens.

    `sizes` are strictly increasing positive batch sizes, `steps_per_second` their measured
    rates, `meta` free-form provenance (device, dtype, date). Between tabulated sizes SPS is
    interpolated linearly in B; outside [sizes[0], sizes[-1]] the curve refuses to answer
    rather than extrapolate. `table[B]` is SPS(B) for every integer B in range (NaN below
    the first size), so the scheduler's hot path is one array lookup. Chapter 06 builds it.
    """

    sizes: tuple[int, ...]
    steps_per_second: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    table: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        sizes, sps = checks.step_curve(self.sizes, self.steps_per_second, self.meta, MAX_TABLE_SIZE)
        table = np.full(sizes[-1] + 1, np.nan)
        table[sizes[0]:] = np.interp(np.arange(sizes[0], sizes[-1] + 1), sizes, sps)
        table[sizes] = sps  # exact at the tabulated sizes
        table.setflags(write=False)
        object.__setattr__(self, "sizes", tuple(int(b) for b in sizes))
        object.__setattr__(self, "steps_per_second", tuple(float(s) for s in sps))
        object.__setattr__(self, "meta", dict(self.meta))
        object.__setattr__(self, "table", table)

    @property
    def min_batch(self) -> int:
        """Smallest profiled batch size."""
        return self.sizes[0]

    @property
    def max_batch(self) -> int:
        """Largest profiled batch size: the scheduler never builds a bigger batch."""
        return self.sizes[-1]

    def sps(self, batch: ArrayLike) -> np.ndarray | float:
        """SPS(B) for integer batch sizes (scalar or array): exact at tabulated sizes, linear
        in between; ValueError outside the profiled range. Chapter 06 builds it."""
        b = np.asarray(batch)
        if b.dtype.kind not in "iu":
            if b.dtype.kind != "f" or not np.array_equal(b, np.round(b)):
                raise ValueError(f"batch sizes must be integers; got {b.tolist()}")
            b = b.astype(np.int64)
        outside = (b < self.min_batch) | (b > self.max_batch)
        if np.any(outside):
            raise ValueError(f"batch size(s) {np.unique(b[outside]).tolist()} outside the profiled range "
                             f"[{self.min_batch}, {self.max_batch}]; StepCurve refuses to extrapolate: "
                             f"profile those sizes")
        out = self.table[b]
        return float(out) if out.ndim == 0 else out

    @classmethod
    def from_latencies(cls, sizes: ArrayLike, seconds_per_step: ArrayLike,
                       meta: dict[str, Any] | None = None) -> StepCurve:
        """Build the curve from measured seconds per forward step: SPS = 1 / seconds.
        Chapter 06 builds it."""
        seconds = np.asarray(seconds_per_step, dtype=np.float64)
        if not np.isfinite(seconds).all() or np.any(seconds <= 0):
            raise ValueError(f"seconds per step must be positive and finite; got {seconds.tolist()}")
        return cls(tuple(np.asarray(sizes).tolist()), tuple((1.0 / seconds).tolist()), dict(meta or {}))

    @classmethod
    def analytic(cls, max_batch: int, knee: int, base_sps: float = 1.0, slope: float = 1.0) -> StepCurve:
        """SYNTHETIC curve, not a measurement: SPS(B) = base_sps up to the knee (memory-bound,
        a step costs the same however many tokens), then base_sps * (knee / B) ** slope
        (compute-bound; slope 1: step time linear in B, larger: steeper). Sizes 1..max_batch.
        Chapter 06 builds it."""
        if int(max_batch) != max_batch or max_batch < 1 or int(knee) != knee or knee < 1:
            raise ValueError(f"max_batch and knee must be integers >= 1; got {max_batch}, {knee}")
        if not np.isfinite(slope) or slope <= 0:
            raise ValueError(f"slope must be a positive finite number; got {slope}")
        sizes = np.arange(1, int(max_batch) + 1)
        sps = base_sps * np.minimum(1.0, knee / sizes) ** slope
        return cls(tuple(sizes.tolist()), tuple(sps.tolist()),
                   {"kind": "synthetic", "knee": int(knee), "base_sps": float(base_sps), "slope": float(slope)})

    def dense(self) -> StepCurve:
        """The scheduler's table from a profiled one (chapter 06): the STEP TIME 1 / SPS
        interpolated linearly at every integer B in [min_batch, max_batch], after making it
        non-decreasing in B.

        Why time and not SPS: step time is close to linear in B, so SPS = 1 / time is convex
        and the linear interpolation of SPS lies above it inside every gap; those bumps are
        small false peaks of Theta, where Algorithm 1's causal stop can halt. Why
        non-decreasing: a measured time that exceeds the time of a larger size is noise (or a
        kernel's tiling quirk) that the server can avoid by padding the batch up to the larger
        size, so it is lowered to that time; this cleans measurement noise, it is not a claim
        about the hardware. meta gains "interpolation" and "times_lowered" (how many
        profiled sizes were lowered)."""
        sizes = np.asarray(self.sizes)
        seconds = 1.0 / np.asarray(self.steps_per_second)
        cleaned = np.minimum.accumulate(seconds[::-1])[::-1]  # pad up to any larger size that runs faster
        every = np.arange(sizes[0], sizes[-1] + 1)
        meta = {**self.meta, "interpolation": "step time linear in B, non-decreasing",
                "times_lowered": int(np.sum(cleaned < seconds))}
        return StepCurve.from_latencies(every, np.interp(every, sizes, cleaned), meta)

    def affine(self) -> StepCurve:
        """The scheduler's table from a profiled one, as a straight line (chapter 06): the STEP
        TIME fitted by least squares as a + b * B over the profiled sizes, at every integer B in
        [min_batch, max_batch]. A step costs a fixed part plus a part per token; the line keeps
        that model and drops the timing noise that `dense` follows point by point. A fitted
        slope below zero (noise on a flat table) is set to 0, with a the mean time. meta gains
        "interpolation", "fixed_seconds" (a), "seconds_per_token" (b) and "r2" (of the fit)."""
        sizes = np.asarray(self.sizes, dtype=np.float64)
        seconds = 1.0 / np.asarray(self.steps_per_second)
        slope, fixed = np.polyfit(sizes, seconds, 1) if sizes.size > 1 else (0.0, float(seconds[0]))
        if slope < 0:
            slope, fixed = 0.0, float(seconds.mean())
        residual, spread = np.sum((seconds - fixed - slope * sizes) ** 2), np.sum((seconds - seconds.mean()) ** 2)
        every = np.arange(self.min_batch, self.max_batch + 1)
        fitted = fixed + slope * every
        if np.any(fitted <= 0):
            raise ValueError(f"the line fitted to the step times ({fixed:.3g} s + {slope:.3g} s per token) is not "
                             f"positive over B in [{self.min_batch}, {self.max_batch}]; use dense() for this table")
        meta = {**self.meta, "interpolation": "step time fitted as a + b * B (least squares)",
                "fixed_seconds": float(fixed), "seconds_per_token": float(slope),
                "r2": float(1 - residual / spread) if spread > 0 else 1.0}
        return StepCurve.from_latencies(every, fitted, meta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: sizes, steps_per_second and meta. Chapter 06 builds it."""
        return {"sizes": list(self.sizes), "steps_per_second": list(self.steps_per_second),
                "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepCurve:
        """Inverse of to_dict. Chapter 06 builds it."""
        missing = {"sizes", "steps_per_second"} - set(data)
        if missing:
            raise ValueError(f"a step curve dict needs keys 'sizes' and 'steps_per_second'; missing {sorted(missing)}")
        return cls(tuple(data["sizes"]), tuple(data["steps_per_second"]), dict(data.get("meta", {})))


def random_step_curve(rng: np.random.Generator, max_batch: int) -> StepCurve:
    """SYNTHETIC: a random non-increasing SPS curve on 1..max_batch, each size 55-100% as fast
    as the one before (for checks of the scheduler on many shapes; chapter 06)."""
    if int(max_batch) != max_batch or max_batch < 1:
        raise ValueError(f"max_batch must be an integer >= 1; got {max_batch}")
    sps = np.cumprod(np.concatenate([[1.0], rng.uniform(0.55, 1.0, size=int(max_batch) - 1)]))
    return StepCurve(tuple(range(1, int(max_batch) + 1)), tuple(sps.tolist()), {"kind": "synthetic"})


def _check_fits(requests: int, curve: StepCurve) -> None:
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need a batch of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")


# ----------------------------------------------------------------------------- Algorithm 1


def _candidates(a: np.ndarray, curve: StepCurve) -> tuple[np.ndarray, np.ndarray]:
    """Flat indices (j-major: index = j * R + r) and values of the candidates a > 0 by
    decreasing a, ties by j then r, cut where the batch would leave the profiled table."""
    flat = a.T.ravel()
    order = np.argsort(-flat, kind="stable")
    count = min(int(np.count_nonzero(flat)), curve.max_batch - a.shape[0])
    order = order[:count]
    return order, flat[order]


def _prefix_thetas(a: np.ndarray, curve: StepCurve) -> tuple[np.ndarray, np.ndarray]:
    """Candidate order, and Theta after taking its first i candidates, i = 0..n."""
    requests = a.shape[0]
    order, values = _candidates(a, curve)
    tau = np.cumsum(np.concatenate(([float(requests)], values)))  # same additions as Algorithm 1
    return order, tau * curve.table[requests:requests + values.size + 1]


def _lengths(order: np.ndarray, taken: int, requests: int) -> np.ndarray:
    # Taken candidates are a prefix of each request's block, so l_r = max j = their count.
    return np.bincount(order[:taken] % requests, minlength=requests)


def _schedule_unchecked(a: np.ndarray, curve: StepCurve) -> np.ndarray:
    order, theta = _prefix_thetas(a, curve)
    # Before the break every step improved, so the running best is the previous Theta.
    stops = np.flatnonzero(theta[1:] <= theta[:-1])
    taken = int(stops[0]) if stops.size else theta.size - 1
    return _lengths(order, taken, a.shape[0])


def schedule(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Algorithm 1, vectorised: per-request draft lengths l (ints, shape (R,)).

    Candidates are taken by decreasing a_{r,j} while Theta = tau * SPS(B) strictly improves;
    the first one that does not improve it stops the search (the causal break). A candidate
    that would push B past the curve's largest profiled size is not allowed: the search
    stops there too. Chapter 06 builds it.
    """
    a = survival(confidences)
    _check_fits(a.shape[0], curve)
    return _schedule_unchecked(a, curve)


def schedule_reference(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Algorithm 1 as a plain loop over candidates, line by line; the tests hold `schedule`
    to it exactly. Chapter 06 builds it."""
    a = survival(confidences)
    requests, gamma = a.shape
    _check_fits(requests, curve)
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
    """Theta after each prefix of the candidate order: entry i takes the first i candidates
    (entry 0 drafts nothing). Chapter 06 builds it."""
    a = survival(confidences)
    _check_fits(a.shape[0], curve)
    return _prefix_thetas(a, curve)[1]


def global_search(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """The retrospective search: the best prefix of the candidate order, no break. It finds
    the optimum, but looks at confidences of tokens it then drops, which biases the output
    (Appendix A). Chapter 06 builds it."""
    a = survival(confidences)
    _check_fits(a.shape[0], curve)
    order, theta = _prefix_thetas(a, curve)
    return _lengths(order, int(np.argmax(theta)), a.shape[0])


def _all_throughputs(a: np.ndarray, lengths: np.ndarray, curve: StepCurve) -> np.ndarray:
    """Theta for each row of lengths (n, R), given survival a (R, gamma)."""
    requests = a.shape[0]
    cumulative = np.concatenate([np.zeros((requests, 1)), np.cumsum(a, axis=1)], axis=1)
    tau = requests + cumulative[np.arange(requests), lengths].sum(axis=1)
    return tau * curve.sps(requests + lengths.sum(axis=1))


def expected_throughput(confidences: ArrayLike, lengths: ArrayLike, curve: StepCurve) -> float:
    """Theta(l) = tau(l) * SPS(B(l)) with tau = sum_r (1 + sum_{j<=l_r} a_{r,j}) and
    B = sum_r (1 + l_r). Chapter 06 builds it."""
    a = survival(confidences)
    requests, gamma = a.shape
    l = np.asarray(lengths)
    if l.shape != (requests,) or l.dtype.kind not in "iu" or l.min() < 0 or l.max() > gamma:
        raise ValueError(f"lengths must be {requests} integers in [0, {gamma}]; got {l.tolist()}")
    return float(_all_throughputs(a, l[None, :], curve)[0])


def brute_force_optimum(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Argmax of Theta over every length vector in [0, gamma]^R that fits the curve (first
    one on ties). Exponential in R: for small checks only. It may pad a request with tokens
    of zero survival, which Algorithm 1 never considers; that only pays where SPS rises with
    B, so compare with `schedule` on non-increasing curves. Chapter 06 builds it."""
    a = survival(confidences)
    requests, gamma = a.shape
    _check_fits(requests, curve)
    every = np.array(list(itertools.product(range(gamma + 1), repeat=requests)), dtype=np.int64)
    every = every[requests + every.sum(axis=1) <= curve.max_batch]
    return every[int(np.argmax(_all_throughputs(a, every, curve)))]


def is_unimodal(theta: ArrayLike) -> bool:
    """True when `theta` rises strictly up to its (first) maximum and never rises after it:
    then Algorithm 1's first non-improving candidate sits right after the peak, and the causal
    stop finds the best prefix of the candidate order (chapter 06)."""
    t = np.asarray(theta, dtype=np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"theta must be a non-empty 1-D array; got shape {t.shape}")
    peak = int(np.argmax(t))
    return bool(np.all(np.diff(t[: peak + 1]) > 0) and np.all(np.diff(t[peak:]) <= 0))


def brute_force_study(instances: int, rng: np.random.Generator) -> dict[str, int]:
    """Algorithm 1 against `brute_force_optimum` on `instances` small random instances
    (chapter 06): R and gamma in 1..3, confidences uniform in [0.05, 1], a `random_step_curve`
    on 1..R(gamma + 1). Counts the instances whose Theta along the candidate order is unimodal
    and those among them where the causal stop found the optimum, and the others and those
    among them where it missed. The claim: the two unimodal counts are equal."""
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


# ----------------------------------------------------------------------------- baselines


def fixed_length(gamma: int | None = None) -> Scheduler:
    """Baseline: every request drafts `gamma` tokens (None: the whole block), clipped to the
    block size. Chapter 06 builds it."""
    if gamma is not None and (int(gamma) != gamma or gamma < 0):
        raise ValueError(f"gamma must be an integer >= 0 or None; got {gamma}")

    def fixed(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
        requests, block = checks.confidences(confidences).shape
        return np.full(requests, block if gamma is None else min(int(gamma), block), dtype=np.int64)

    return fixed


def mtp1(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
    """Baseline: one drafted token per request, as MTP-1 serving does. Chapter 06 builds it."""
    return np.ones(checks.confidences(confidences).shape[0], dtype=np.int64)


def static_threshold(threshold: float, cumulative: bool = False) -> Scheduler:
    """Baseline: cut each block before its first confidence below `threshold` (DeepSpec's
    evaluation; threshold <= 0 keeps the whole block). cumulative=True cuts on the prefix
    survival a_{r,j} instead of c_{r,j}. Chapter 06 builds it."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [0, 1]; got {threshold}")

    def thresholded(confidences: ArrayLike, curve: StepCurve) -> np.ndarray:
        return threshold_lengths(confidences, threshold, cumulative).astype(np.int64)

    return thresholded


def asynchronous_schedule(stale_confidences: ArrayLike, current_confidences: ArrayLike,
                          curve: StepCurve) -> np.ndarray:
    """Production variant (section 5.2). The capacity K, extra batch tokens, comes from the
    global search (no break) on the confidences of two steps earlier; the current step then
    takes its K largest survival probabilities (prefix-closed, ties by j). K cannot see the
    current tokens, so verification stays lossless. Chapter 06 builds it."""
    stale = survival(stale_confidences)
    _check_fits(stale.shape[0], curve)
    _, stale_theta = _prefix_thetas(stale, curve)
    capacity = int(np.argmax(stale_theta))
    a = survival(current_confidences)
    _check_fits(a.shape[0], curve)
    order, _ = _candidates(a, curve)
    return _lengths(order, min(capacity, order.size), a.shape[0])


SCHEDULERS: dict[str, Scheduler] = {
    "dspark": schedule,
    "global_search": global_search,
    "fixed": fixed_length(),
    "mtp1": mtp1,
    "none": fixed_length(0),  # no speculation: every request sends its anchor only (plain decoding)
}


# ----------------------------------------------------------------------------- losslessness


def schedule_trials(confidences: ArrayLike, scheduler: Scheduler, curve: StepCurve) -> np.ndarray:
    """Run a scheduler on many trials at once: confidences (N, R, gamma) -> lengths (N, R).
    Each distinct confidence matrix is scheduled once. Chapter 06 builds it."""
    c = np.asarray(confidences, dtype=np.float64)
    if c.ndim != 3 or c.shape[0] == 0:
        raise ValueError(f"confidences must be shaped (N trials >= 1, R, gamma); got {c.shape}")
    distinct, inverse = np.unique(c.reshape(c.shape[0], -1), axis=0, return_inverse=True)
    lengths = np.stack([scheduler(row.reshape(c.shape[1:]), curve) for row in distinct])
    return lengths[inverse.reshape(-1)]


def _distribution(p: ArrayLike, name: str) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or not np.isfinite(p).all() or p.min() < 0 or abs(p.sum() - 1) > 1e-9:
        raise ValueError(f"{name} must be a 1-D probability vector summing to 1; got {p.tolist()}")
    return p


def speculative_first_token(drafted: ArrayLike, use_draft: ArrayLike, p_target: ArrayLike,
                            p_draft: ArrayLike, rng: np.random.Generator) -> np.ndarray:
    """The first output token of a speculative step, vectorised over trials. Where the
    scheduler sent the drafted token (use_draft) it is accepted with probability
    min(1, p_t/p_d), else replaced by a sample of norm(max(p_t - p_d, 0)); where it sent
    nothing the target samples from p_t. Chapter 06 builds it."""
    p_t, p_d = _distribution(p_target, "p_target"), _distribution(p_draft, "p_draft")
    x = np.asarray(drafted)
    n = x.size
    accept = rng.random(n) * p_d[x] < p_t[x]  # u < p_t / p_d without dividing
    residual = np.maximum(p_t - p_d, 0.0)
    residual = residual / residual.sum() if residual.sum() > 0 else p_t
    corrected = rng.choice(p_t.size, size=n, p=residual)
    from_target = rng.choice(p_t.size, size=n, p=p_t)
    return np.where(use_draft, np.where(accept, x, corrected), from_target)


APPENDIX_A_CURVE = StepCurve((1, 2, 3), (1.0, 0.5, 0.45), {"kind": "Appendix A example"})
APPENDIX_A_P_TARGET = (0.7, 0.3)  # p_t(A), p_t(B)
APPENDIX_A_P_DRAFT = (0.5, 0.5)   # p_d(A), p_d(B)


def appendix_a_confidences(x1: ArrayLike) -> np.ndarray:
    """Appendix A's confidences (N, 1, 2) after drafting x1 (0 = A, 1 = B): c_1 = 0.8, and
    c_2 = 0.9 after A, 0 after B (chapter 06)."""
    x1 = np.asarray(x1).reshape(-1)
    confidences = np.empty((x1.size, 1, 2))
    confidences[:, 0, 0] = 0.8
    confidences[:, 0, 1] = np.where(x1 == 0, 0.9, 0.0)
    return confidences


def _checked_trials(trials: int) -> int:
    if int(trials) != trials or trials < 1:
        raise ValueError(f"trials must be an integer >= 1; got {trials}")
    return int(trials)


def appendix_a_monte_carlo(trials: int, causal: bool, rng: np.random.Generator | None = None) -> float:
    """Frequency of output token A in the paper's Appendix A example: one request, gamma = 2,
    c_1 = 0.8, c_2 = 0.9 if the drafted x_1 is A else 0, p_t = (0.7, 0.3), p_d = (0.5, 0.5),
    SPS = 1.0, 0.5, 0.45 at B = 1, 2, 3. The causal scheduler never drafts (0.70, lossless);
    the global search drafts exactly when x_1 = A (0.5 + 0.5 * 0.7 = 0.85). Chapter 06 builds it."""
    trials = _checked_trials(trials)
    rng = np.random.default_rng() if rng is None else rng
    x1 = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)
    lengths = schedule_trials(appendix_a_confidences(x1), schedule if causal else global_search, APPENDIX_A_CURVE)
    tokens = speculative_first_token(x1, lengths[:, 0] >= 1, APPENDIX_A_P_TARGET, APPENDIX_A_P_DRAFT, rng)
    return float(np.mean(tokens == 0))


def appendix_a_asynchronous(trials: int, rng: np.random.Generator | None = None) -> float:
    """Frequency of A in Appendix A's example under the section 5.2 variant
    (`asynchronous_schedule`): the capacity K comes from the confidences of an earlier,
    independent draft, the current step takes its K most probable tokens. K cannot see the
    current x_1, so the frequency stays p_t(A) = 0.70 (chapter 06)."""
    trials = _checked_trials(trials)
    rng = np.random.default_rng() if rng is None else rng
    stale = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)
    current = rng.choice(2, size=trials, p=APPENDIX_A_P_DRAFT)
    sends = np.zeros((2, 2), dtype=bool)  # [stale x1, current x1] -> does the step verify x1?
    for s, x in itertools.product(range(2), range(2)):
        lengths = asynchronous_schedule(appendix_a_confidences([s])[0], appendix_a_confidences([x])[0],
                                        APPENDIX_A_CURVE)
        sends[s, x] = lengths[0] >= 1
    tokens = speculative_first_token(current, sends[stale, current], APPENDIX_A_P_TARGET, APPENDIX_A_P_DRAFT, rng)
    return float(np.mean(tokens == 0))
