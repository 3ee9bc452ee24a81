"""The hardware's step curve SPS(B) that Algorithm 1 reads (paper section 3.2.2; chapters 06 and 06b).

SPS(B) is the number of target forward steps per second when a verification step carries B
batch tokens. Algorithm 1 (`scheduler.schedule`) prices a bigger batch with it:
Theta(l) = tau(l) * SPS(B(l)). The serving stack profiles SPS at a few sizes; `StepCurve` holds
those measurements, checked once in its constructor, and answers SPS(B) at every integer B
between them (exact at the profiled sizes, linear in between, no extrapolation). `dense` and
`affine` turn a noisy profile into the table the scheduler reads; `analytic` builds a SYNTHETIC
curve (flat to a knee, then falling) for checks and figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike

from . import checks

MAX_TABLE_SIZE = 10_000_000  # batch sizes beyond this would make the lookup table huge


@dataclass(frozen=True)
class StepCurve:
    """A profiled step curve: SPS(B), forward steps per second at B verification tokens.

    `sizes` are strictly increasing positive batch sizes, `steps_per_second` their measured
    rates, `meta` free-form provenance (device, dtype, date). Between tabulated sizes SPS is
    interpolated linearly in B; outside [sizes[0], sizes[-1]] the curve refuses to answer
    rather than extrapolate. `table[B]` is SPS(B) for every integer B in range (NaN below
    the first size), so the scheduler's hot path is one array lookup.
    """

    sizes: tuple[int, ...]
    steps_per_second: tuple[float, ...]
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    table: np.ndarray = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        sizes, sps = _step_curve(self.sizes, self.steps_per_second, self.meta, MAX_TABLE_SIZE)
        table = np.full(sizes[-1] + 1, np.nan)  # [max_batch + 1], indexed by B
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
        in between; ValueError outside the profiled range."""
        out = self.table[_batch_sizes(batch, self.min_batch, self.max_batch)]
        return float(out) if out.ndim == 0 else out

    @classmethod
    def from_latencies(cls, sizes: ArrayLike, seconds_per_step: ArrayLike,
                       meta: dict[str, Any] | None = None) -> StepCurve:
        """Build the curve from measured seconds per forward step: SPS = 1 / seconds."""
        seconds = checks.positive_finite(seconds_per_step, "seconds per step")
        return cls(tuple(np.asarray(sizes).tolist()), tuple((1.0 / seconds).tolist()), dict(meta or {}))

    @classmethod
    def analytic(cls, max_batch: int, knee: int, base_sps: float = 1.0, slope: float = 1.0) -> StepCurve:
        """SYNTHETIC curve, not a measurement: SPS(B) = base_sps up to the knee (memory-bound,
        a step costs the same however many tokens), then base_sps * (knee / B) ** slope
        (compute-bound; slope 1: step time linear in B, larger: steeper). Sizes 1..max_batch."""
        max_batch, knee = checks.positive_int(max_batch, "max_batch"), checks.positive_int(knee, "knee")
        slope = float(checks.positive_finite(slope, "slope"))
        sizes = np.arange(1, max_batch + 1)
        sps = base_sps * np.minimum(1.0, knee / sizes) ** slope
        return cls(tuple(sizes.tolist()), tuple(sps.tolist()),
                   {"kind": "synthetic", "knee": knee, "base_sps": float(base_sps), "slope": slope})

    def dense(self) -> StepCurve:
        """The scheduler's table from a profiled one: the STEP TIME 1 / SPS interpolated
        linearly at every integer B in [min_batch, max_batch], after making it non-decreasing
        in B.

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
        """The scheduler's table from a profiled one, as a straight line: the STEP TIME fitted
        by least squares as a + b * B over the profiled sizes, at every integer B in
        [min_batch, max_batch]. A step costs a fixed part plus a part per token; the line keeps
        that model and drops the timing noise that `dense` follows point by point. Neither part
        can be negative: a fitted slope below zero (noise on a flat table) is set to 0, with a
        the mean time, and a fixed part below zero (noise on a table proportional to B) is set
        to 0, with b fitted through the origin. meta gains "interpolation", "fixed_seconds" (a),
        "seconds_per_token" (b) and "r2" (of the fit)."""
        sizes = np.asarray(self.sizes, dtype=np.float64)
        seconds = 1.0 / np.asarray(self.steps_per_second)
        slope, fixed = np.polyfit(sizes, seconds, 1) if sizes.size > 1 else (0.0, float(seconds[0]))
        if slope < 0:
            slope, fixed = 0.0, float(seconds.mean())
        elif fixed < 0:
            slope, fixed = float(sizes @ seconds / (sizes @ sizes)), 0.0
        residual, spread = np.sum((seconds - fixed - slope * sizes) ** 2), np.sum((seconds - seconds.mean()) ** 2)
        every = np.arange(self.min_batch, self.max_batch + 1)
        fitted = checks.positive_finite(fixed + slope * every, f"the step times of the line fitted to this table "
                                        f"({fixed:.3g} s + {slope:.3g} s per token; use dense() instead)")
        meta = {**self.meta, "interpolation": "step time fitted as a + b * B (least squares)",
                "fixed_seconds": float(fixed), "seconds_per_token": float(slope),
                "r2": float(1 - residual / spread) if spread > 0 else 1.0}
        return StepCurve.from_latencies(every, fitted, meta)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: sizes, steps_per_second and meta."""
        return {"sizes": list(self.sizes), "steps_per_second": list(self.steps_per_second),
                "meta": dict(self.meta)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepCurve:
        """Inverse of to_dict."""
        _has_keys(data, ("sizes", "steps_per_second"), "a step curve dict")
        return cls(tuple(data["sizes"]), tuple(data["steps_per_second"]), dict(data.get("meta", {})))


# --- checks (this module's door)


def _integers(values: Any, name: str) -> np.ndarray:
    """`values` as int64; ValueError unless they are whole numbers (ints, or floats without a fraction)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" or not np.array_equal(arr, np.round(arr)):
        raise ValueError(f"{name} must be integers; got {arr.tolist()}")
    return arr.astype(np.int64)


def _has_keys(data: Any, keys: Sequence[str], what: str) -> None:
    """ValueError unless the mapping `data` holds every one of `keys`."""
    missing = sorted(set(keys) - set(data))
    if missing:
        raise ValueError(f"{what} needs keys {sorted(keys)}; missing {missing}")


def _step_curve(sizes: Any, steps_per_second: Any, meta: Any, max_size: int) -> tuple[np.ndarray, np.ndarray]:
    """A step curve's columns (`StepCurve`): batch sizes as int64, strictly increasing
    from >= 1 up to `max_size`, and their positive finite rates as float64."""
    sizes = np.asarray(sizes)
    sps = np.asarray(steps_per_second, dtype=np.float64)
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D list of batch sizes; got shape {sizes.shape}")
    if sps.shape != sizes.shape:
        raise ValueError(f"sizes and steps_per_second must have the same length; got {sizes.size} sizes "
                         f"and {sps.size} rates")
    sizes = _integers(sizes, "batch sizes")
    if sizes[0] < 1:
        raise ValueError(f"batch sizes must be positive (>= 1); got {sizes.tolist()}")
    if np.any(np.diff(sizes) <= 0):
        raise ValueError(f"batch sizes must be strictly increasing, without duplicates; got {sizes.tolist()}")
    if sizes[-1] > max_size:
        raise ValueError(f"batch sizes up to {max_size} are supported; got {sizes[-1]}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict; got {type(meta).__name__}")
    return sizes, checks.positive_finite(sps, "steps per second")


def _batch_sizes(batch: Any, low: int, high: int) -> np.ndarray:
    """Batch sizes B (a number or an array) as int64, each inside a step curve's profiled range
    [low, high]; ValueError otherwise (the curve refuses to extrapolate)."""
    b = _integers(batch, "batch sizes")
    outside = (b < low) | (b > high)
    if np.any(outside):
        raise ValueError(f"batch size(s) {np.unique(b[outside]).tolist()} outside the profiled range "
                         f"[{low}, {high}]; StepCurve refuses to extrapolate: profile those sizes")
    return b
