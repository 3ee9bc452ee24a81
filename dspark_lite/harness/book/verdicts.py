"""Verdicts tested against the measurement's own noise (chapters 03-04; the book's rule).

A difference between two drafters' tau is a verdict only when its interval leaves zero: the
two were measured on the same held-out prompts, in the same order, so the interval is a paired
bootstrap over those generations (each resample draws generations with replacement and
recomputes both pooled taus). Inside the interval it is a tie, and the text says so, in the one
wording `compared` gives.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """An estimate with its (LEVEL) bootstrap interval."""

    estimate: float
    low: float
    high: float

    @property
    def above_zero(self) -> bool:
        return self.low > 0.0

    @property
    def below_zero(self) -> bool:
        return self.high < 0.0

    def __str__(self) -> str:
        return self.text()

    def text(self, digits: int = 2) -> str:
        """'+0.12 [+0.05, +0.19]': the estimate and its interval, signed, with `digits` decimals."""
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def _parts(parts: Sequence[Sequence[float]]) -> np.ndarray:
    array = np.asarray(parts, dtype=float)
    if array.ndim != 2 or array.shape[1] != 2 or len(array) == 0:
        raise ValueError(f"expected per-generation (tokens, rounds) pairs, got shape {array.shape}")
    return array


def pooled_tau(parts: Sequence[Sequence[float]]) -> float:
    """tau over generations: all emitted tokens over all rounds (what `record.tau` gives on the pooled rounds)."""
    array = _parts(parts)
    return float(array[:, 0].sum() / array[:, 1].sum())


def _resampled(parts: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Pooled tau of each resample: index [resamples, n] into the generations."""
    return parts[index, 0].sum(axis=1) / parts[index, 1].sum(axis=1)


def _interval(estimate: float, samples: np.ndarray) -> Interval:
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high))


def _paired_index(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if len(a) != len(b):
        raise ValueError(f"a paired comparison needs the same generations on both sides, got {len(a)} and {len(b)}")
    return rng.integers(0, len(a), size=(RESAMPLES, len(a)))


def tau_difference(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], seed: int = 0,
                   paired: bool = True) -> Interval:
    """tau(a) - tau(b) with a bootstrap over the generations: paired (two drafters on the same
    prompts) or, with paired=False, each side resampled on its own (two domains' prompts)."""
    a, b = _parts(a), _parts(b)
    rng = np.random.default_rng(seed)
    if paired:
        index_a = index_b = _paired_index(a, b, rng)
    else:
        index_a = rng.integers(0, len(a), size=(RESAMPLES, len(a)))
        index_b = rng.integers(0, len(b), size=(RESAMPLES, len(b)))
    return _interval(pooled_tau(a) - pooled_tau(b), _resampled(a, index_a) - _resampled(b, index_b))


def macro_gain(a: Mapping[str, Sequence[Sequence[float]]], b: Mapping[str, Sequence[Sequence[float]]],
               seed: int = 0) -> Interval:
    """100 x (macro tau of a / macro tau of b - 1), in percent: the macro average is the mean of
    the domains' pooled taus; each domain's generations are resampled, paired."""
    if set(a) != set(b) or not a:
        raise ValueError(f"both sides need the same domains, got {sorted(a)} and {sorted(b)}")
    rng = np.random.default_rng(seed)
    macro_a, macro_b = np.zeros(RESAMPLES), np.zeros(RESAMPLES)
    for domain in a:
        pa, pb = _parts(a[domain]), _parts(b[domain])
        index = _paired_index(pa, pb, rng)
        macro_a += _resampled(pa, index) / len(a)
        macro_b += _resampled(pb, index) / len(a)
    estimate = 100 * (np.mean([pooled_tau(a[d]) for d in a]) / np.mean([pooled_tau(b[d]) for d in a]) - 1)
    return _interval(float(estimate), 100 * (macro_a / macro_b - 1))


TIE = "tied with (within noise)"


def compared(interval: Interval, above: str = "above", below: str = "below", tie: str = TIE) -> str:
    """The one wording of a verdict: `above`, `below`, or a tie within the noise (a sentence
    that needs other words passes its own three)."""
    if interval.above_zero:
        return above
    if interval.below_zero:
        return below
    return tie


def word_list(items) -> str:
    """Items as prose: 'a', 'a and b', 'a, b and c' ('' for none); the chapters' sentences name
    domains and drafters with it."""
    items = [str(item) for item in items]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def domains_phrase(domains, every) -> str:
    """Where a claim holds, as words: 'every domain' when `domains` is all of `every` (in order),
    'math and code only', or 'no domain'."""
    domains = list(domains)
    if domains == list(every):
        return "every domain"
    return word_list(domains) + " only" if domains else "no domain"


# The t distribution's 97.5% quantile by degrees of freedom (a 95% two-sided interval); 1.96 past 30.
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def fitted_slope(values: Sequence[float | None]) -> Interval:
    """The least-squares slope of a curve over positions 1..n (per position), with its 95%
    interval from the fit's residuals (t quantile, n - 2 degrees of freedom): a trend is called
    only when the interval leaves zero (Figure 2's suffix decay). None entries are dropped."""
    points = [(k, float(v)) for k, v in enumerate(values, start=1) if v is not None and np.isfinite(v)]
    if len(points) < 3:
        raise ValueError(f"a slope needs at least 3 finite points, got {list(values)}")
    x, y = np.array(points).T
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    df = len(x) - 2
    stderr = np.sqrt(residual @ residual / df / ((x - x.mean()) @ (x - x.mean())))
    half = (T_975[df - 1] if df <= len(T_975) else 1.96) * stderr
    return Interval(float(slope), float(slope - half), float(slope + half))


def ratio_interval(a: Sequence[float], b: Sequence[float]) -> Interval:
    """How much larger `a` is than `b`, in percent, from paired measurements (a[i] and b[i] taken
    together: the same prompt, or the same pass of a race): the geometric mean of a[i] / b[i] with
    a 95% t interval over the pairs (on the log ratios, n - 1 degrees of freedom). A speed-up is
    called only when the interval leaves zero."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2 or (a <= 0).any() or (b <= 0).any():
        raise ValueError(f"need two equally long lists of >= 2 positive paired values, got {a.tolist()} and {b.tolist()}")
    logs = np.log(a / b)
    df = len(logs) - 1
    half = (T_975[df - 1] if df <= len(T_975) else 1.96) * logs.std(ddof=1) / np.sqrt(len(logs))
    mean = logs.mean()
    return Interval(*(float(100 * np.expm1(v)) for v in (mean, mean - half, mean + half)))

