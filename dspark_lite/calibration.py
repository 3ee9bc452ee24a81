"""Calibration of the confidence head: ECE, AUROC, Brier, reliability curves, and the
calibrators that plug into the scheduler (chapter 05).

Paper section 3.2.1. The confidence head outputs, for every drafted position k = 1..gamma,
c_k = sigmoid(w^T [h_k; W1[x_{k-1}]]) (Eq. 7): the probability that token k survives
verification GIVEN all earlier tokens of the block survived (trained against the soft label
1 - TV of Eq. 8). The scheduler uses the predicted prefix survival a_k = prod_{i<=k} c_i.
Sequential Temperature Scaling (STS) recalibrates the head on a held-out split; Figure 6
reports raw AUROC 0.81-0.91 and ECE 3-8%, and ECE about 1% after STS.

Data convention. One record per drafted block, all with the same gamma:
  c[N, gamma]   raw confidences, strictly inside (0, 1);
  n_acc[N]      accepted draft tokens, integers in 0..gamma.
Observed prefix survival s[N, k] = (n_acc >= k) (k is 1-based). The CONDITIONAL outcome at
position k lives only on blocks that reached k (n_acc >= k - 1) and is again n_acc >= k.

Every calibrator has `fit(c_cal, n_acc_cal) -> self` and `transform(c) -> c'` (new per-position
confidences in (0, 1)); a_k is then recomputed from c' with `prefix_survival`, so the
scheduler consumes calibrated and raw confidences identically.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

#: Calibrated confidences are clipped into [_EPS, 1 - _EPS] so that they stay inside (0, 1)
#: even where a small temperature pushes sigmoid(z / T) to 0.0 or 1.0 in float64.
_EPS = 1e-12


class CalibrationWarning(UserWarning):
    """A degenerate calibration input (a position nobody reached, a single outcome class);
    the computation went on with a documented fallback (chapter 05)."""


def _warn(message: str) -> None:
    warnings.warn(message, CalibrationWarning, stacklevel=3)


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------


def _as_float_array(values: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric; could not convert to floats ({error})") from None


def _where(flat_index: int, shape: tuple[int, ...]) -> str:
    """'row 3, position k=2' for a 2-D array, 'index 3' for a 1-D one (k is 1-based)."""
    if len(shape) == 1:
        return f"index {flat_index}"
    row, col = np.unravel_index(flat_index, shape)
    return f"row {row}, position k={col + 1}"


def validate_confidences(c: Any, *, allow_1d: bool = False, name: str = "confidences") -> np.ndarray:
    """Check raw confidences and return them as a float64 array (chapter 05).

    Expected: a 2-D array (N blocks, gamma positions), or, with `allow_1d`, one block's
    [gamma] vector; every entry finite and strictly inside (0, 1) (sigmoid outputs).
    Raises ValueError saying what was wrong and where."""
    arr = _as_float_array(c, name)
    shapes = "(N, gamma) or (gamma,)" if allow_1d else "(N, gamma)"
    if arr.ndim not in ((1, 2) if allow_1d else (2,)):
        raise ValueError(f"{name} must have shape {shapes}; got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one block and one position; got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite; got {arr.flat[i]} at {_where(i, arr.shape)}")
    if arr.min() <= 0.0:
        i = int(np.argmin(arr))
        raise ValueError(f"{name} must lie in (0, 1), strictly (sigmoid outputs); "
                         f"got min {arr.flat[i]} at {_where(i, arr.shape)}")
    if arr.max() >= 1.0:
        i = int(np.argmax(arr))
        raise ValueError(f"{name} must lie in (0, 1), strictly (sigmoid outputs); "
                         f"got max {arr.flat[i]} at {_where(i, arr.shape)}")
    return arr


def _validate_counts(n_accepted: Any, gamma: int) -> np.ndarray:
    if isinstance(gamma, (bool, np.bool_)) or not isinstance(gamma, (int, np.integer)) or gamma < 1:
        raise ValueError(f"gamma must be a positive integer (draft positions per block); got {gamma!r}")
    arr = np.asarray(n_accepted)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"n_accepted must be a non-empty 1-D array (one count per block); "
                         f"got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"n_accepted must hold integers in 0..{gamma}; got dtype {arr.dtype}")
    values = arr.astype(float)
    bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values > gamma)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"n_accepted must hold integers in 0..{gamma} (accepted draft tokens per "
                         f"block); got {arr[i]} at index {i}")
    return values.astype(np.int64)


def survival_targets(n_accepted: Any, gamma: int) -> np.ndarray:
    """Observed prefix survival s[N, gamma]: s[n, k-1] = (n_accepted[n] >= k) (chapter 05).
    `n_accepted` must hold integers in 0..gamma; ValueError otherwise."""
    counts = _validate_counts(n_accepted, gamma)
    return counts[:, None] >= np.arange(1, gamma + 1)[None, :]


def _validate_pair(c: Any, n_accepted: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated (c[N, gamma], n_acc[N]) with matching N."""
    conf = validate_confidences(c)
    counts = np.asarray(n_accepted)
    if counts.ndim == 1 and counts.shape[0] != conf.shape[0]:
        raise ValueError(f"mismatched lengths: {conf.shape[0]} confidence rows but "
                         f"{counts.shape[0]} acceptance counts")
    return conf, _validate_counts(counts, conf.shape[1])


def _validate_outcomes(p: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated 1-D predictions in [0, 1] and binary outcomes (as floats) of equal length."""
    pred = _as_float_array(p, "predictions")
    if pred.ndim != 1 or pred.size == 0:
        raise ValueError(f"predictions must be a non-empty 1-D array; got shape {pred.shape}")
    bad = ~np.isfinite(pred) | (pred < 0) | (pred > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"predictions must be finite probabilities in [0, 1]; got {pred[i]} at index {i}")
    out = np.asarray(y)
    if out.ndim != 1 or out.shape[0] != pred.shape[0]:
        raise ValueError(f"mismatched lengths: {pred.shape[0]} predictions but outcomes of shape {out.shape}")
    if not (out.dtype == bool or np.issubdtype(out.dtype, np.number)):
        raise ValueError(f"outcomes must be binary (bool or 0/1); got dtype {out.dtype}")
    out = out.astype(float)
    bad = (out != 0) & (out != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"outcomes must be binary (bool or 0/1); got {out[i]} at index {i}")
    return pred, out


def _validate_bins(bins: int) -> int:
    if isinstance(bins, (bool, np.bool_)) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer; got {bins!r}")
    return int(bins)


# ----------------------------------------------------------------------------------------
# Prefix survival, splits, rollout records
# ----------------------------------------------------------------------------------------


def prefix_survival(c: Any) -> np.ndarray:
    """Predicted prefix survival a_k = prod_{i<=k} c_i, the cumulative product along
    positions (chapter 05). Takes c[N, gamma] or one block's c[gamma]; same shape back."""
    conf = validate_confidences(c, allow_1d=True)
    return np.cumprod(conf, axis=-1)


def split_calibration_test(n: int, fraction: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic split of n blocks into (calibration, test) index arrays, each sorted;
    round(fraction * n) blocks go to calibration (chapter 05)."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (blocks to split); got {n!r}")
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1); got {fraction!r}")
    n_cal = int(round(fraction * n))
    if not 0 < n_cal < n:
        raise ValueError(f"fraction={fraction} of n={n} leaves one side empty; expected both non-empty")
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:n_cal]), np.sort(order[n_cal:])


def synthetic_rollouts(n_blocks: int, gamma: int, overconfidence: float = 3.0,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rollouts from a known model (chapter 05): position k of a block survives, given the
    earlier ones did, with probability sigmoid(z_k), z_k ~ Normal(1, 1.2); the reported
    confidence is sigmoid(overconfidence * z_k). Returns (c, n_acc, true_conditional)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(1.0, 1.2, size=(n_blocks, gamma))
    true = _sigmoid(z)
    accepted = rng.random((n_blocks, gamma)) < true
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)
    return np.clip(_sigmoid(overconfidence * z), _EPS, 1 - _EPS), n_acc, true


# ----------------------------------------------------------------------------------------
# Metrics on 1-D predictions p and binary outcomes y
# ----------------------------------------------------------------------------------------


def _bin_index(p: np.ndarray, bins: int) -> np.ndarray:
    """Equal-width bins [i/bins, (i+1)/bins) on [0, 1]; p = 1 falls in the last bin."""
    return np.minimum((p * bins).astype(np.intp), bins - 1)


def _ece_unchecked(p: np.ndarray, y: np.ndarray, bins: int) -> float:
    idx = _bin_index(p, bins)
    gap = np.bincount(idx, weights=y - p, minlength=bins)
    return float(np.abs(gap).sum() / p.size)


def ece(p: Any, y: Any, bins: int = 15) -> float:
    """Expected calibration error (chapter 05): equal-width bins on [0, 1]; the mean over
    non-empty bins of |mean(y) - mean(p)|, weighted by the bin's share of samples."""
    pred, out = _validate_outcomes(p, y)
    return _ece_unchecked(pred, out, _validate_bins(bins))


def brier(p: Any, y: Any) -> float:
    """Brier score mean((p - y)^2) (chapter 05); 0 is perfect, 0.25 is a constant 0.5."""
    pred, out = _validate_outcomes(p, y)
    return float(np.mean((pred - out) ** 2))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of x, tied values sharing the mean of their ranks (chapter 05)."""
    order = np.argsort(x, kind="mergesort")
    ordered = x[order]
    starts_group = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(starts_group)
    ends = np.r_[starts[1:], ordered.size]
    mean_rank = (starts + 1 + ends) / 2.0
    ranks = np.empty(x.size)
    ranks[order] = mean_rank[np.cumsum(starts_group) - 1]
    return ranks


def auroc(p: Any, y: Any) -> float:
    """Area under the ROC curve (chapter 05), via Mann-Whitney: the chance that a random
    positive outranks a random negative, ties counting one half (average ranks). Returns
    nan, with a CalibrationWarning, when y holds only one class."""
    pred, out = _validate_outcomes(p, y)
    n_pos = int(out.sum())
    n_neg = out.size - n_pos
    if n_pos == 0 or n_neg == 0:
        _warn(f"AUROC is undefined when outcomes hold one class only ({n_pos} positives, "
              f"{n_neg} negatives); returning nan")
        return float("nan")
    rank_sum = average_ranks(pred)[out == 1].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@dataclass
class ReliabilityCurve:
    """A reliability diagram's data (chapter 05): per equal-width bin, its centre, the mean
    prediction and the observed frequency (nan for empty bins), and the sample count."""

    bin_centers: np.ndarray
    mean_predicted: np.ndarray
    observed_frequency: np.ndarray
    counts: np.ndarray

    def to_frame(self) -> pd.DataFrame:
        """The curve as a DataFrame, one row per bin (chapter 05)."""
        return pd.DataFrame({"bin_center": self.bin_centers, "mean_predicted": self.mean_predicted,
                             "observed_frequency": self.observed_frequency, "count": self.counts})


def reliability_curve(p: Any, y: Any, bins: int = 10) -> ReliabilityCurve:
    """Bin predictions into `bins` equal-width bins and return, per bin, the mean prediction
    against the observed frequency of y (chapter 05)."""
    pred, out = _validate_outcomes(p, y)
    bins = _validate_bins(bins)
    idx = _bin_index(pred, bins)
    counts = np.bincount(idx, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=pred, minlength=bins) / counts
        freq = np.bincount(idx, weights=out, minlength=bins) / counts
    centers = (np.arange(bins) + 0.5) / bins
    return ReliabilityCurve(centers, mean_p, freq, counts)


def _auroc_quiet(p: np.ndarray, y: np.ndarray) -> float:
    if y.min() == y.max():
        return float("nan")
    return auroc(p, y)


def per_position_metrics(c: Any, n_accepted: Any, bins: int = 15) -> pd.DataFrame:
    """One row per position k = 1..gamma (chapter 05). `prefix_*` columns score
    a_k = prod_{i<=k} c_i against s_k = (n_acc >= k) on all blocks; `conditional_*` columns
    score the raw c_k against n_acc >= k on the blocks that reached k (n_acc >= k - 1).
    Undefined entries are nan; one CalibrationWarning lists them."""
    conf, counts = _validate_pair(c, n_accepted)
    bins = _validate_bins(bins)
    survival, a = survival_targets(counts, conf.shape[1]).astype(float), np.cumprod(conf, axis=1)
    rows, undefined = [], []
    for k in range(1, conf.shape[1] + 1):
        reached = counts >= k - 1
        row = {"position": k, "survival_rate": survival[:, k - 1].mean(),
               "prefix_mean_predicted": a[:, k - 1].mean(),
               "prefix_ece": _ece_unchecked(a[:, k - 1], survival[:, k - 1], bins),
               "prefix_auroc": _auroc_quiet(a[:, k - 1], survival[:, k - 1]),
               "prefix_brier": brier(a[:, k - 1], survival[:, k - 1]),
               "n_reached": int(reached.sum())}
        row.update(_conditional_row(conf[reached, k - 1], counts[reached] >= k, bins))
        undefined += [f"{name} at k={k}" for name in ("prefix_auroc", "conditional_auroc")
                      if np.isnan(row[name])]
        rows.append(row)
    if undefined:
        _warn("per_position_metrics: undefined (one outcome class or no block reached the "
              "position), set to nan: " + ", ".join(undefined))
    return pd.DataFrame(rows)


def _conditional_row(c_k: np.ndarray, y: np.ndarray, bins: int) -> dict[str, float]:
    """The conditional_* metrics of one position's reached blocks (all nan if none)."""
    if c_k.size == 0:
        names = ("conditional_acceptance", "conditional_mean_confidence", "conditional_ece",
                 "conditional_auroc", "conditional_brier")
        return {name: float("nan") for name in names}
    y = y.astype(float)
    return {"conditional_acceptance": y.mean(), "conditional_mean_confidence": c_k.mean(),
            "conditional_ece": _ece_unchecked(c_k, y, bins), "conditional_auroc": _auroc_quiet(c_k, y),
            "conditional_brier": brier(c_k, y)}


# ----------------------------------------------------------------------------------------
# Calibrators
# ----------------------------------------------------------------------------------------


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function."""
    out = np.empty_like(x, dtype=float)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _logit(c: np.ndarray) -> np.ndarray:
    return np.log(c) - np.log1p(-c)


def temperature_scale(c: np.ndarray, temperature: float | np.ndarray) -> np.ndarray:
    """sigmoid(logit(c) / T), clipped into [1e-12, 1 - 1e-12] so it stays inside (0, 1)
    (chapter 05). A strictly increasing map of c for any T > 0 (up to that clipping)."""
    return temperature_scale_logits(_logit(c), temperature)


def temperature_scale_logits(logits: np.ndarray, temperature: float | np.ndarray) -> np.ndarray:
    """sigmoid(logits / T), clipped into [1e-12, 1 - 1e-12] (chapter 05)."""
    return np.clip(_sigmoid(logits / temperature), _EPS, 1 - _EPS)


def default_temperature_grid() -> np.ndarray:
    """201 log-spaced temperatures from 0.05 to 20 (chapter 05): 20 ** linspace(-1, 1, 201),
    a ratio of about 1.03 between neighbours, with T = 1 exactly at the centre."""
    return 20.0 ** np.linspace(-1.0, 1.0, 201)


def _validate_grid(grid: Any) -> np.ndarray:
    arr = _as_float_array(grid, "grid")
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or arr.min() <= 0:
        raise ValueError(f"grid must be a non-empty 1-D array of finite positive temperatures; got {grid!r}")
    # Search in order of |log T|: among equal-ECE temperatures the one nearest 1 wins.
    return arr[np.argsort(np.abs(np.log(arr)), kind="mergesort")]


def _degenerate(counts: np.ndarray, k: int) -> str | None:
    """Why position k's conditional outcomes cannot be calibrated, or None if they can."""
    reached = counts >= k - 1
    if not reached.any():
        return "no block reached it"
    accepted = counts[reached] >= k
    if accepted.all():
        return f"no rejections (all {int(reached.sum())} blocks that reached it accepted it)"
    if not accepted.any():
        return f"no acceptances (all {int(reached.sum())} blocks that reached it rejected it)"
    return None


class Calibrator:
    """Shared shape of the calibrators (chapter 05): `fit(c_cal, n_acc_cal)` returns self,
    `transform(c)` maps c[N, gamma] (or one block's c[gamma]) to calibrated confidences of
    the same shape, strictly inside (0, 1). `fallback_positions_` lists the 1-based
    positions whose calibration split was degenerate and were left unchanged."""

    gamma_: int | None = None
    fallback_positions_: list[int]

    def fit(self, c_cal: Any, n_acc_cal: Any) -> "Calibrator":
        """Fit on a calibration split c_cal[N, gamma], n_acc_cal[N]; returns self (chapter 05)."""
        conf, counts = _validate_pair(c_cal, n_acc_cal)
        self.gamma_, self.fallback_positions_ = conf.shape[1], []
        self._fit(conf, counts)
        return self

    def transform(self, c: Any) -> np.ndarray:
        """Calibrated confidences, same shape as c[N, gamma] or c[gamma] (chapter 05); recompute
        a_k from them with `prefix_survival`."""
        conf = validate_confidences(c, allow_1d=True)
        if self.gamma_ is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(c_cal, n_acc_cal) first")
        if conf.shape[-1] != self.gamma_:
            raise ValueError(f"{type(self).__name__} was fitted for gamma={self.gamma_} positions; "
                             f"got confidences with {conf.shape[-1]} positions")
        return self._transform(conf.reshape(-1, self.gamma_)).reshape(conf.shape)

    def fit_transform(self, c_cal: Any, n_acc_cal: Any) -> np.ndarray:
        """fit, then transform the same confidences (chapter 05)."""
        return self.fit(c_cal, n_acc_cal).transform(c_cal)

    def _check_position(self, counts: np.ndarray, k: int, fallback: str) -> bool:
        """True if position k can be fitted; otherwise warn, record it, and return False."""
        reason = _degenerate(counts, k)
        if reason is None:
            return True
        self.fallback_positions_.append(k)
        _warn(f"{type(self).__name__}: position {k} of the calibration split: {reason}; "
              f"falling back to {fallback} for position {k}")
        return False

    def _fit(self, conf: np.ndarray, counts: np.ndarray) -> None:
        raise NotImplementedError

    def _transform(self, conf: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class _TemperatureCalibrator(Calibrator):
    """Per-position temperatures T_k applied as sigmoid(logit(c_k) / T_k)."""

    def __init__(self, grid: Any = None, bins: int = 15) -> None:
        self.grid = _validate_grid(default_temperature_grid() if grid is None else grid)
        self.bins = _validate_bins(bins)
        self.temperatures_: np.ndarray | None = None

    def _transform(self, conf: np.ndarray) -> np.ndarray:
        return temperature_scale(conf, self.temperatures_[None, :])

    def _best_temperature(self, logits: np.ndarray, prior: np.ndarray | float, target: np.ndarray) -> float:
        """The grid temperature minimising ECE(prior * sigmoid(logits / T), target)."""
        errors = [_ece_unchecked(prior * temperature_scale_logits(logits, t), target, self.bins)
                  for t in self.grid]
        return float(self.grid[int(np.argmin(errors))])


class SequentialTemperatureScaling(_TemperatureCalibrator):
    """Sequential Temperature Scaling, the paper's STS (section 3.2.1; chapter 05).

    For k = 1..gamma in order, with T_1..T_{k-1} already fixed, a 1-D grid search over
    `grid` (default: `default_temperature_grid()`, 201 log-spaced T in 0.05..20) picks the
    T_k minimising ECE(a_k, s_k) over ALL calibration blocks, where
    a_k = prod_{i<=k} sigmoid(logit(c_i) / T_i) and s_k = (n_acc >= k). Ties go to the T
    nearest 1. A position with no reached block or a single conditional outcome class gets
    T_k = 1 with a CalibrationWarning.

    Which ranking is preserved: each c_k -> sigmoid(logit(c_k) / T_k) is strictly
    increasing (up to the clip into [1e-12, 1 - 1e-12], which can only tie values scaled
    that close to 0 or 1), so the ranking of blocks by c_k at every position is unchanged (hence the
    per-position AUROC against conditional acceptance, and the AUROC of a_1). The ranking
    of blocks by a_k for k >= 2 is NOT preserved in general: a product of differently
    reshaped factors can reorder two blocks (e.g. c = (0.9, 0.5) vs (0.5, 0.9) tie under
    the raw product but not after T_1 != T_2; even one shared T reorders some pairs). Only
    the dominance order survives: if c_i(A) >= c_i(B) for all i <= k then a_k(A) >= a_k(B).
    """

    def _fit(self, conf: np.ndarray, counts: np.ndarray) -> None:
        logits, survival = _logit(conf), survival_targets(counts, conf.shape[1]).astype(float)
        temperatures, prior = np.ones(conf.shape[1]), np.ones(conf.shape[0])
        for k in range(1, conf.shape[1] + 1):
            if self._check_position(counts, k, "T = 1"):
                temperatures[k - 1] = self._best_temperature(logits[:, k - 1], prior, survival[:, k - 1])
            prior = prior * temperature_scale_logits(logits[:, k - 1], temperatures[k - 1])
        self.temperatures_ = temperatures


class PerPositionTemperatureScaling(_TemperatureCalibrator):
    """Plain per-position temperature scaling, the baseline STS is compared with (chapter 05).

    Each T_k is fitted independently by grid search (same grid as STS), minimising the ECE of
    sigmoid(logit(c_k) / T_k) against the conditional acceptance n_acc >= k on the blocks
    that reached k (n_acc >= k - 1). Degenerate positions fall back to T_k = 1 with a
    CalibrationWarning. Like STS, it preserves the per-position ranking of c_k."""

    def _fit(self, conf: np.ndarray, counts: np.ndarray) -> None:
        temperatures = np.ones(conf.shape[1])
        for k in range(1, conf.shape[1] + 1):
            if self._check_position(counts, k, "T = 1"):
                reached = counts >= k - 1
                target = (counts[reached] >= k).astype(float)
                temperatures[k - 1] = self._best_temperature(_logit(conf[reached, k - 1]), 1.0, target)
        self.temperatures_ = temperatures


def pool_adjacent_violators(y: Any, weights: Any = None) -> np.ndarray:
    """Pool-adjacent-violators (chapter 05): the non-decreasing sequence closest to y in
    weighted least squares, for y already ordered by the predictor. Adjacent values that
    violate monotonicity are pooled into their weighted mean until none do."""
    values = _as_float_array(y, "y")
    w = np.ones_like(values) if weights is None else _as_float_array(weights, "weights")
    if values.ndim != 1 or w.shape != values.shape or values.size == 0:
        raise ValueError(f"y and weights must be non-empty 1-D arrays of equal length; got shapes "
                         f"{values.shape} and {w.shape}")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(w)) and w.min() > 0):
        raise ValueError("y must be finite and weights finite and positive")
    means, sums, sizes = [], [], []  # one entry per pooled block: mean, weight, length
    for value, weight in zip(values, w):
        means.append(value), sums.append(weight), sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            total = sums[-2] + sums[-1]
            means[-2] = (means[-2] * sums[-2] + means[-1] * sums[-1]) / total
            sums[-2], sizes[-2] = total, sizes[-2] + sizes[-1]
            del means[-1], sums[-1], sizes[-1]
    return np.repeat(means, sizes)


class IsotonicCalibration(Calibrator):
    """Per-position isotonic regression of the conditional acceptance on c_k (chapter 05).

    For each k, on the blocks that reached k: ties in c_k are merged (their mean outcome,
    weighted by count), `pool_adjacent_violators` makes the outcome non-decreasing in c_k,
    and prediction linearly interpolates between the distinct c_k values (constant beyond
    the ends), clipped into [eps, 1 - eps]. Non-decreasing, not strictly increasing: flat
    steps can tie blocks, so per-position AUROC may change. Degenerate positions keep c_k
    unchanged (identity) with a CalibrationWarning."""

    def __init__(self, eps: float = 1e-4) -> None:
        if not 0.0 < eps < 0.5:
            raise ValueError(f"eps must lie in (0, 0.5); got {eps!r}")
        self.eps = float(eps)
        self.knots_: list[tuple[np.ndarray, np.ndarray] | None] = []

    def _fit(self, conf: np.ndarray, counts: np.ndarray) -> None:
        self.knots_ = []
        for k in range(1, conf.shape[1] + 1):
            if not self._check_position(counts, k, "the identity"):
                self.knots_.append(None)
                continue
            reached = counts >= k - 1
            x, inverse = np.unique(conf[reached, k - 1], return_inverse=True)
            n = np.bincount(inverse)
            mean_y = np.bincount(inverse, weights=(counts[reached] >= k).astype(float)) / n
            self.knots_.append((x, pool_adjacent_violators(mean_y, n)))

    def _transform(self, conf: np.ndarray) -> np.ndarray:
        out = conf.copy()
        for k, knots in enumerate(self.knots_):
            if knots is not None:
                out[:, k] = np.clip(np.interp(conf[:, k], *knots), self.eps, 1 - self.eps)
        return out


# ----------------------------------------------------------------------------------------
# The static-threshold sweep (Figure 5)
# ----------------------------------------------------------------------------------------


def threshold_lengths(c: Any, threshold: float, cumulative: bool = False) -> np.ndarray:
    """Draft lengths l[N] a static threshold keeps (chapter 05): each block is cut before its
    first position whose confidence c_k (or, with `cumulative`, whose survival a_k) is below
    `threshold`, as DeepSpec's evaluation does; a threshold of 0 keeps every block whole."""
    conf = validate_confidences(c)
    if not np.isfinite(threshold) or not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [0, 1]; got {threshold}")
    below = (np.cumprod(conf, axis=1) if cumulative else conf) < threshold
    return np.where(below.any(axis=1), below.argmax(axis=1), conf.shape[1])


def threshold_sweep(c: Any, n_accepted: Any, thresholds: Sequence[float], cumulative: bool = False) -> pd.DataFrame:
    """Figure 5 from recorded rollouts (chapter 05): per threshold, the mean accepted and
    rejected draft tokens per round when each block is cut by `threshold_lengths`, the
    acceptance rate (accepted / verified drafts; NaN if nothing is drafted), tau (accepted + 1
    per round) and the tokens verified per round (drafts + 1). A block's acceptance does not
    depend on what follows it, so a cut block accepts min(l, n_accepted) of its drafts."""
    conf, counts = _validate_pair(c, n_accepted)
    rows = []
    for threshold in thresholds:
        lengths = threshold_lengths(conf, float(threshold), cumulative)
        accepted = np.minimum(lengths, counts)
        drafted = lengths.sum()
        rows.append({"threshold": float(threshold), "accepted_per_round": accepted.mean(),
                     "rejected_per_round": (lengths - accepted).mean(),
                     "acceptance_rate": accepted.sum() / drafted if drafted else np.nan,
                     "tau": accepted.mean() + 1.0, "verified_per_round": lengths.mean() + 1.0})
    return pd.DataFrame(rows).set_index("threshold")
