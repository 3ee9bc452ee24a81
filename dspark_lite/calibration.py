"""Calibration of the confidence head: ECE, AUROC and Sequential Temperature Scaling (STS,
`SequentialTemperatureScaling`), paper section 3.2.1; chapter 05 of the book builds and measures them.

The confidence head outputs, for every drafted position k = 1..gamma, a logit z_k with
c_k = sigmoid(z_k) = sigmoid(w^T [h_k; W1[x_{k-1}]] + b) (Eq. 7, with the bias b that
`dspark.ConfidenceHead` has): the probability that token k survives verification GIVEN all
earlier tokens of the block survived (trained against the soft label 1 - TV of Eq. 8). The
scheduler uses the predicted prefix survival a_k = prod_{i<=k} c_i (`scheduler.survival`).
STS recalibrates the head on a held-out split; Figure 6 reports raw AUROC 0.81-0.91 and ECE
3-8%, and ECE about 1% after STS. The baselines STS is measured against (per-position
temperature scaling, isotonic regression) and the static-threshold sweep of Figure 5 live here
too (its cut, `scheduler.threshold_lengths`, is the static-threshold scheduler's).

Data convention. One row per drafted block, all with the same gamma (`record.Rounds.full_blocks`):
  z[N, gamma]   the head's logits (c = sigmoid(z) where a probability is needed);
  n_acc[N]      accepted draft tokens, integers in 0..gamma.
Observed prefix survival s[N, k] = (n_acc >= k) (k is 1-based). The CONDITIONAL outcome at
position k lives only on blocks that reached k (n_acc >= k - 1) and is again n_acc >= k.

The metrics take probabilities. Every calibrator has `fit(z_cal, n_acc_cal) -> self` and
`transform(z) -> z'`, new logits, so that a calibrated record is a record like any other
(`Rounds.with_logits`) and the scheduler reads calibrated and raw confidences identically.
Validation happens at the doors (the metrics, each calibrator's `fit` and `transform`), through
`checks`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from . import checks
from .record import logit, sigmoid
from .scheduler import survival, threshold_lengths


class CalibrationWarning(UserWarning):
    """A degenerate calibration input (a position nobody reached, a single outcome class);
    the computation went on with a documented fallback."""


def _warn(message: str) -> None:
    warnings.warn(message, CalibrationWarning, stacklevel=3)


# ----------------------------------------------------------------------------------------
# Observed survival and the calibration / test split
# ----------------------------------------------------------------------------------------


def survival_targets(n_accepted: Any, gamma: int) -> np.ndarray:
    """Observed prefix survival s[N, gamma]: s[n, k-1] = (n_accepted[n] >= k).
    `n_accepted` must hold integers in 0..gamma; ValueError otherwise."""
    counts = checks.accepted_counts(n_accepted, gamma)
    return counts[:, None] >= np.arange(1, gamma + 1)[None, :]


def split_calibration_test(n: int, fraction: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic split of n >= 2 blocks into (calibration, test) index arrays, each sorted;
    round(fraction * n) blocks go to calibration, and neither side may be empty."""
    n = checks.positive_int(n, "n (blocks to split)", minimum=2)
    n_cal = round(checks.in_interval(fraction, "fraction", 0.0, 1.0, closed=False) * n)
    checks.in_interval(n_cal, f"the calibration side of {fraction} x {n} blocks", 0, n, closed=False)
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[:n_cal]), np.sort(order[n_cal:])


# ----------------------------------------------------------------------------------------
# Metrics on 1-D predictions p and binary outcomes y
# ----------------------------------------------------------------------------------------


def _bin_index(p: np.ndarray, bins: int) -> np.ndarray:
    """Equal-width bins [i/bins, (i+1)/bins) on [0, 1]; p = 1 falls in the last bin."""
    return np.minimum((p * bins).astype(np.intp), bins - 1)


def ece(p: Any, y: Any, bins: int = 15) -> float:
    """Expected calibration error: equal-width bins on [0, 1]; the mean over non-empty bins of
    |mean(y) - mean(p)|, weighted by the bin's share of samples."""
    p, y = checks.outcomes(p, y)
    bins = checks.positive_int(bins, "bins")
    gap = np.bincount(_bin_index(p, bins), weights=y - p, minlength=bins)  # [bins] sum of y - p per bin
    return float(np.abs(gap).sum() / p.size)


def brier(p: Any, y: Any) -> float:
    """Brier score mean((p - y)^2); 0 is perfect, 0.25 is a constant 0.5."""
    p, y = checks.outcomes(p, y)
    return float(np.mean((p - y) ** 2))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of x, tied values sharing the mean of their ranks."""
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
    """Area under the ROC curve, via Mann-Whitney: the chance that a random positive outranks
    a random negative, ties counting one half (average ranks). Returns nan, with a
    CalibrationWarning, when y holds only one class."""
    p, y = checks.outcomes(p, y)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if n_pos == 0 or n_neg == 0:
        _warn(f"AUROC is undefined when outcomes hold one class only ({n_pos} positives, "
              f"{n_neg} negatives); returning nan")
        return float("nan")
    rank_sum = average_ranks(p)[y == 1].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


@dataclass
class ReliabilityCurve:
    """A reliability diagram's data: per equal-width bin, its centre, the mean prediction and
    the observed frequency (nan for empty bins), and the sample count."""

    bin_centers: np.ndarray
    mean_predicted: np.ndarray
    observed_frequency: np.ndarray
    counts: np.ndarray

    def to_frame(self) -> pd.DataFrame:
        """The curve as a DataFrame, one row per bin."""
        return pd.DataFrame({"bin_center": self.bin_centers, "mean_predicted": self.mean_predicted,
                             "observed_frequency": self.observed_frequency, "count": self.counts})


def reliability_curve(p: Any, y: Any, bins: int = 10) -> ReliabilityCurve:
    """Bin predictions into `bins` equal-width bins and return, per bin, the mean prediction
    against the observed frequency of y."""
    pred, out = checks.outcomes(p, y)
    bins = checks.positive_int(bins, "bins")
    idx = _bin_index(pred, bins)
    counts = np.bincount(idx, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=pred, minlength=bins) / counts
        freq = np.bincount(idx, weights=out, minlength=bins) / counts
    centers = (np.arange(bins) + 0.5) / bins
    return ReliabilityCurve(centers, mean_p, freq, counts)


def _scores(p: np.ndarray, y: np.ndarray, bins: int, prefix: str) -> dict[str, float]:
    """ECE, AUROC and Brier of predictions p against outcomes y, named `prefix`_ece and so on;
    AUROC is nan (quietly: the caller lists it) unless y holds both outcomes."""
    if p.size == 0:
        return {f"{prefix}_{name}": float("nan") for name in ("ece", "auroc", "brier")}
    both = 0 < y.sum() < y.size
    return {f"{prefix}_ece": ece(p, y, bins), f"{prefix}_auroc": auroc(p, y) if both else float("nan"),
            f"{prefix}_brier": brier(p, y)}


def per_position_metrics(c: Any, n_accepted: Any, bins: int = 15) -> pd.DataFrame:
    """One row per position k = 1..gamma. `prefix_*` columns score a_k = prod_{i<=k} c_i
    against s_k = (n_acc >= k) on all blocks; `conditional_*` columns score the raw c_k against
    n_acc >= k on the blocks that reached k (n_acc >= k - 1). Undefined entries are nan; one
    CalibrationWarning lists them."""
    c = checks.confidences(c)
    n_acc = checks.accepted_counts(n_accepted, c.shape[1], blocks=c.shape[0])
    bins = checks.positive_int(bins, "bins")
    s, a = survival_targets(n_acc, c.shape[1]).astype(float), survival(c)  # [N, gamma] each
    rows = []
    for k in range(1, c.shape[1] + 1):
        reached = n_acc >= k - 1  # [N] the blocks that drafted position k
        y = (n_acc[reached] >= k).astype(float)  # position k's conditional outcome
        rows.append({"position": k, "survival_rate": s[:, k - 1].mean(), "prefix_mean_predicted": a[:, k - 1].mean(),
                     **_scores(a[:, k - 1], s[:, k - 1], bins, "prefix"), "n_reached": int(reached.sum()),
                     "conditional_acceptance": y.mean() if y.size else float("nan"),
                     "conditional_mean_confidence": c[reached, k - 1].mean() if y.size else float("nan"),
                     **_scores(c[reached, k - 1], y, bins, "conditional")})
    undefined = [f"{name} at k={row['position']}" for row in rows for name in ("prefix_auroc", "conditional_auroc")
                 if np.isnan(row[name])]
    if undefined:
        _warn("per_position_metrics: undefined (one outcome class or no block reached the "
              "position), set to nan: " + ", ".join(undefined))
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------
# Calibrators
# ----------------------------------------------------------------------------------------


def temperature_scale(z: np.ndarray, temperature: float | np.ndarray) -> np.ndarray:
    """sigmoid(z / T): the confidence a temperature T gives a logit z. Strictly increasing in z
    for any T > 0, so it keeps every ranking by one position's confidence."""
    return sigmoid(z / temperature)


def default_temperature_grid() -> np.ndarray:
    """201 log-spaced temperatures from 0.05 to 20: 20 ** linspace(-1, 1, 201), a ratio of about
    1.03 between neighbours, with T = 1 exactly at the centre."""
    return 20.0 ** np.linspace(-1.0, 1.0, 201)


def _degenerate(n_acc: np.ndarray, k: int) -> str | None:
    """Why position k's conditional outcomes cannot be calibrated, or None if they can."""
    reached = n_acc >= k - 1
    if not reached.any():
        return "no block reached it"
    accepted = n_acc[reached] >= k
    if accepted.all():
        return f"no rejections (all {int(reached.sum())} blocks that reached it accepted it)"
    if not accepted.any():
        return f"no acceptances (all {int(reached.sum())} blocks that reached it rejected it)"
    return None


class Calibrator:
    """What the calibrators share: `fit(z_cal, n_acc_cal)` returns self, `transform(z)` maps
    logits z[N, gamma] (or one block's z[gamma]) to calibrated logits of the same shape.
    `fallback_positions_` lists the 1-based positions whose calibration split was degenerate
    and were left unchanged."""

    gamma_: int | None = None
    fallback_positions_: list[int]

    def _fittable(self, n_acc: np.ndarray, k: int, fallback: str) -> bool:
        """True if position k can be fitted; otherwise warn, record it, and return False."""
        reason = _degenerate(n_acc, k)
        if reason is None:
            return True
        self.fallback_positions_.append(k)
        _warn(f"{type(self).__name__}: position {k} of the calibration split: {reason}; "
              f"falling back to {fallback} for position {k}")
        return False


class _TemperatureCalibrator(Calibrator):
    """Per-position temperatures T_k: the calibrated logit is z_k / T_k, searched on a grid
    (default: `default_temperature_grid()`) by the ECE in `bins` bins."""

    def __init__(self, grid: Any = None, bins: int = 15) -> None:
        grid = checks.positive_finite(default_temperature_grid() if grid is None else grid, "grid").ravel()
        checks.positive_int(grid.size, "the number of grid temperatures")
        self.grid = grid[np.argsort(np.abs(np.log(grid)), kind="mergesort")]  # |log T| order: ties go to T nearest 1
        self.bins = checks.positive_int(bins, "bins")
        self.temperatures_: np.ndarray | None = None

    def best_temperature(self, z_k: np.ndarray, prior: np.ndarray | float, target: np.ndarray) -> float:
        """The grid temperature T minimising ECE(prior * sigmoid(z_k / T), target)."""
        errors = [ece(prior * temperature_scale(z_k, t), target, self.bins) for t in self.grid]
        return float(self.grid[int(np.argmin(errors))])

    def transform(self, z: Any) -> np.ndarray:
        """Calibrated logits z_k / T_k, the shape of z[N, gamma] or z[gamma]; their sigmoid is
        the calibrated confidence."""
        return checks.fitted_logits(z, self.gamma_, type(self).__name__) / self.temperatures_


class SequentialTemperatureScaling(_TemperatureCalibrator):
    """Sequential Temperature Scaling, the paper's STS (section 3.2.1).

    For k = 1..gamma in order, with T_1..T_{k-1} already fixed, a 1-D grid search over
    `grid` (default: `default_temperature_grid()`, 201 log-spaced T in 0.05..20) picks the
    T_k minimising ECE(a_k, s_k) over ALL calibration blocks, where
    a_k = prod_{i<=k} sigmoid(z_i / T_i) and s_k = (n_acc >= k). Ties go to the T
    nearest 1. A position with no reached block or a single conditional outcome class gets
    T_k = 1 with a CalibrationWarning.

    Which ranking is preserved: each z_k -> z_k / T_k is strictly increasing, so the ranking
    of blocks by c_k at every position is unchanged (hence the
    per-position AUROC against conditional acceptance, and the AUROC of a_1). The ranking
    of blocks by a_k for k >= 2 is NOT preserved in general: a product of differently
    reshaped factors can reorder two blocks (e.g. c = (0.9, 0.5) vs (0.5, 0.9) tie under
    the raw product but not after T_1 != T_2; even one shared T reorders some pairs). Only
    the dominance order survives: if c_i(A) >= c_i(B) for all i <= k then a_k(A) >= a_k(B).
    """

    def fit(self, z_cal: Any, n_acc_cal: Any) -> "SequentialTemperatureScaling":
        """Fit T_1..T_gamma in order on a calibration split: the head's logits
        z_cal[N, gamma] and the accepted drafts n_acc_cal[N] of the same blocks.
        Returns self."""
        z, n_acc = checks.calibration_split(z_cal, n_acc_cal)
        self.gamma_, self.fallback_positions_ = z.shape[1], []
        s = survival_targets(n_acc, self.gamma_).astype(float)  # [N, gamma]: n_acc >= k
        self.temperatures_ = np.ones(self.gamma_)  # T_k = 1 where position k is degenerate
        a = np.ones(len(z))  # [N] a_{k-1} with T_1..T_{k-1} fixed; a_0 = 1
        for k in range(1, self.gamma_ + 1):
            z_k, t = z[:, k - 1], self.temperatures_  # slot k's logits, the temperatures
            if self._fittable(n_acc, k, "T = 1"):
                t[k - 1] = self.best_temperature(z_k, a, s[:, k - 1])  # min ECE(a_k, s_k)
            a = a * temperature_scale(z_k, t[k - 1])  # a_k = a_{k-1} * c_k
        return self


class PerPositionTemperatureScaling(_TemperatureCalibrator):
    """Plain per-position temperature scaling, the baseline STS is compared with.

    Each T_k is fitted independently by grid search (same grid as STS), minimising the ECE of
    sigmoid(z_k / T_k) against the conditional acceptance n_acc >= k on the blocks
    that reached k (n_acc >= k - 1). Degenerate positions fall back to T_k = 1 with a
    CalibrationWarning. Like STS, it preserves the per-position ranking of c_k."""

    def fit(self, z_cal: Any, n_acc_cal: Any) -> "PerPositionTemperatureScaling":
        """Fit each T_k on its own: logits z_cal[N, gamma], accepted drafts n_acc_cal[N]. Returns self."""
        z, n_acc = checks.calibration_split(z_cal, n_acc_cal)
        self.gamma_, self.fallback_positions_ = z.shape[1], []
        self.temperatures_ = np.ones(self.gamma_)
        for k in range(1, self.gamma_ + 1):
            if self._fittable(n_acc, k, "T = 1"):
                reached = n_acc >= k - 1  # [N] the blocks that drafted position k
                accepted = (n_acc[reached] >= k).astype(float)
                self.temperatures_[k - 1] = self.best_temperature(z[reached, k - 1], 1.0, accepted)
        return self


def pool_adjacent_violators(y: Any, weights: Any = None) -> np.ndarray:
    """Pool-adjacent-violators: the non-decreasing sequence closest to y in weighted least
    squares, for y already ordered by the predictor. Adjacent values that violate
    monotonicity are pooled into their weighted mean until none do."""
    values, w = checks.weighted_values(y, weights)
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
    """Per-position isotonic regression of the conditional acceptance on c_k.

    For each k, on the blocks that reached k: ties in c_k are merged (their mean outcome,
    weighted by count), `pool_adjacent_violators` makes the outcome non-decreasing in c_k,
    and prediction linearly interpolates between the distinct c_k values (constant beyond
    the ends), clipped into [eps, 1 - eps] and returned as a logit. Non-decreasing, not
    strictly increasing: flat steps can tie blocks, so per-position AUROC may change.
    Degenerate positions keep z_k unchanged (identity) with a CalibrationWarning."""

    def __init__(self, eps: float = 1e-4) -> None:
        self.eps = checks.in_interval(eps, "eps", 0.0, 0.5, closed=False)
        self.knots_: list[tuple[np.ndarray, np.ndarray] | None] = []

    def fit(self, z_cal: Any, n_acc_cal: Any) -> "IsotonicCalibration":
        """Fit one monotone map per position: logits z_cal[N, gamma], accepted drafts n_acc_cal[N].
        Returns self."""
        z, n_acc = checks.calibration_split(z_cal, n_acc_cal)
        self.gamma_, self.fallback_positions_, self.knots_ = z.shape[1], [], []
        c = sigmoid(z)  # [N, gamma]
        for k in range(1, self.gamma_ + 1):
            if not self._fittable(n_acc, k, "the identity"):
                self.knots_.append(None)
                continue
            reached = n_acc >= k - 1  # [N] the blocks that drafted position k
            x, inverse = np.unique(c[reached, k - 1], return_inverse=True)  # distinct c_k
            n = np.bincount(inverse)
            mean_y = np.bincount(inverse, weights=(n_acc[reached] >= k).astype(float)) / n
            self.knots_.append((x, pool_adjacent_violators(mean_y, n)))
        return self

    def transform(self, z: Any) -> np.ndarray:
        """Calibrated logits, the shape of z[N, gamma] or z[gamma]."""
        z = checks.fitted_logits(z, self.gamma_, type(self).__name__)
        out = z.copy()
        for k, knots in enumerate(self.knots_):  # None: a degenerate position, left as it is
            if knots is not None:
                out[..., k] = logit(np.clip(np.interp(sigmoid(z[..., k]), *knots), self.eps, 1 - self.eps))
        return out


# ----------------------------------------------------------------------------------------
# The static-threshold sweep (Figure 5)
# ----------------------------------------------------------------------------------------


def threshold_sweep(c: Any, n_accepted: Any, thresholds: Sequence[float], cumulative: bool = False) -> pd.DataFrame:
    """Figure 5 from recorded rollouts: per threshold, the mean accepted and
    rejected draft tokens per round when each block is cut by `scheduler.threshold_lengths`, the
    acceptance rate (accepted / verified drafts; NaN if nothing is drafted), tau (accepted + 1
    per round) and the tokens verified per round (drafts + 1). A block's acceptance does not
    depend on what follows it, so a cut block accepts min(l, n_accepted) of its drafts."""
    conf = checks.confidences(c)
    counts = checks.accepted_counts(n_accepted, conf.shape[1], blocks=conf.shape[0])
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
