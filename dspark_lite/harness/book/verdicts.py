"""Verdicts tested against the measurement's own noise: the interval statistics every chapter's
verdicts rest on (the book's rule), and the few words every chapter shares for them (`compared`,
`word_list`, `domains_phrase`, `seed_spread`, `plural`, `falls_by`; chapters 03 and 04 call them most). A chapter's own
sentences live in its notebook.

A difference between two drafters' tau is a verdict only when its interval leaves zero: the
two were measured on the same held-out prompts, in the same order, so the interval is a paired
bootstrap over those generations (each resample draws generations with replacement and
recomputes both pooled taus). Inside the interval it is a tie, and the text says so, in the one
wording `compared` gives.

Drafters trained from several seeds: pass one entry per seed ([seeds, generations, 2] instead
of [generations, 2]; seed i of both sides measured on the same prompts). The estimate is then
the seed mean, and each resample draws seeds with replacement, then generations within each
drawn seed. The interval rule (issue 65): **the wider of that bootstrap and a t interval over the
seeds' own estimates** (n - 1 degrees of freedom, centred on the estimate). A bootstrap over three
seeds sees about two-thirds of their variance and treats three values as a population; the t
interval holds the spread a fourth seed would show. The interval keeps each seed's own estimate
(`Interval.seeds`, written beside it in the result files by `Interval.as_list`).

"In every domain", and one contradicting seed: the book keeps the interval rule alone. A claim is
reproduced when its interval lies on the paper's side, whatever one seed says: the t interval
already widens with the seeds' spread, so a seed far on the other side pulls the interval across
by itself, while a seed just across the line in a tight spread no longer makes a tie on its own
(under the old every-seed rule, more seeds made a call less likely however they agreed). Two seeds
call nothing (`outcome`: not testable), and one seed's interval is the prompts' alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """An estimate with its (LEVEL) bootstrap interval, and each seed's own estimate when the
    measurement came from several training seeds (empty otherwise)."""

    estimate: float
    low: float
    high: float
    seeds: tuple[float, ...] = ()

    @property
    def above_zero(self) -> bool:
        """The interval above zero (over seeds it is already the wider of the bootstrap and the t
        interval, so the seeds' spread is in it)."""
        return self.low > 0.0

    @property
    def below_zero(self) -> bool:
        """The interval below zero."""
        return self.high < 0.0

    def __str__(self) -> str:
        return self.text()

    def as_list(self) -> list:
        """[estimate, low, high], and each seed's own estimate as a fourth item when the interval is
        over several seeds: the interval as a result file stores it (ci/compare_intervals.py reads
        both forms and applies the interval rule from the seeds it finds)."""
        return [self.estimate, self.low, self.high] + ([list(self.seeds)] if self.seeds else [])

    def text(self, digits: int = 2) -> str:
        """'+0.12 [+0.05, +0.19]': the estimate and its interval, signed, with `digits` decimals."""
        return f"{self.estimate:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"

    def plain(self, digits: int = 2) -> str:
        """'4.18 [3.82, 4.51]': a quantity (a tau, an ECE) and its interval, unsigned."""
        return f"{self.estimate:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _parts(parts) -> np.ndarray:
    """[seeds, generations, 2]: (tokens, rounds) per generation, of one seed ([generations, 2]) or several."""
    array = np.asarray(parts, dtype=float)
    array = array[None] if array.ndim == 2 else array
    if array.ndim != 3 or array.shape[2] != 2 or 0 in array.shape[:2]:
        raise ValueError(f"expected per-generation (tokens, rounds) pairs, one list per seed, got shape {array.shape}")
    return array


def _seed_taus(parts: np.ndarray) -> np.ndarray:
    """Each seed's pooled tau: [seeds]."""
    return parts[..., 0].sum(axis=1) / parts[..., 1].sum(axis=1)


def pooled_tau(parts) -> float:
    """tau over generations: all emitted tokens over all rounds (what `record.tau` gives on the
    pooled rounds); with several seeds, the mean of the seeds' pooled taus."""
    return float(_seed_taus(_parts(parts)).mean())


def _seed_draws(seeds: int, rng: np.random.Generator) -> np.ndarray:
    """Seeds drawn with replacement, [RESAMPLES, seeds] (one seed: no draw)."""
    return rng.integers(0, seeds, size=(RESAMPLES, seeds)) if seeds > 1 else np.zeros((RESAMPLES, 1), int)


def _draws(seeds: int, units: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One bootstrap: seeds drawn with replacement [RESAMPLES, seeds], then units within each
    drawn seed [RESAMPLES, seeds, units]."""
    seed_index = _seed_draws(seeds, rng)
    return seed_index, rng.integers(0, units, size=(RESAMPLES, seeds, units))


def _resampled(parts: np.ndarray, draws: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Seed-mean pooled tau of each resample: [RESAMPLES]."""
    seed_index, unit_index = draws
    picked = parts[seed_index[..., None], unit_index]  # [RESAMPLES, seeds, units, 2]
    return (picked[..., 0].sum(axis=-1) / picked[..., 1].sum(axis=-1)).mean(axis=-1)


def seed_t_half_width(seeds: Sequence[float]) -> float:
    """Half the width of the 95% t interval of the mean of the seeds' own estimates (n - 1 degrees
    of freedom); 0 for fewer than two seeds."""
    values = np.asarray(seeds, dtype=float)
    if len(values) < 2:
        return 0.0
    quantile = T_975[len(values) - 2] if len(values) - 2 < len(T_975) else 1.96
    return float(quantile * values.std(ddof=1) / np.sqrt(len(values)))


def widened(estimate: float, low: float, high: float, seeds: Sequence[float]) -> tuple[float, float]:
    """The interval rule: (low, high) of the bootstrap, or estimate -+ the seeds' t half-width when
    that interval is wider."""
    half = seed_t_half_width(seeds)
    if 2 * half > high - low:
        return estimate - half, estimate + half
    return low, high


def _interval(estimate: float, samples: np.ndarray, seeds: Sequence[float] = ()) -> Interval:
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(samples, [tail, 100 - tail])
    seeds = tuple(float(v) for v in seeds) if len(seeds) > 1 else ()
    low, high = widened(float(estimate), float(low), float(high), seeds)
    return Interval(float(estimate), float(low), float(high), seeds)


def _paired(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise ValueError("a paired comparison needs the same generations (and seeds) on both sides, "
                         f"got {a.shape[:2]} and {b.shape[:2]} (seeds, generations)")


def tau_difference(a, b, seed: int = 0, paired: bool = True) -> Interval:
    """tau(a) - tau(b) with a bootstrap over the generations (and the seeds, if several): paired
    (two drafters on the same prompts) or, with paired=False, each side resampled on its own (two
    domains' prompts)."""
    a, b = _parts(a), _parts(b)
    rng = np.random.default_rng(seed)
    if paired:
        _paired(a, b)
        draws_a = draws_b = _draws(a.shape[0], a.shape[1], rng)
    else:
        draws_a, draws_b = _draws(a.shape[0], a.shape[1], rng), _draws(b.shape[0], b.shape[1], rng)
    seeds = _seed_taus(a) - _seed_taus(b) if len(a) == len(b) else ()
    return _interval(pooled_tau(a) - pooled_tau(b), _resampled(a, draws_a) - _resampled(b, draws_b), seeds)


def _macro_taus(sides: Sequence[Mapping[str, Sequence]], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The macro taus of several drafters measured on the same prompts: [sides, RESAMPLES] of the
    bootstrap (seeds drawn once for all domains, then each domain's generations, the same draw for
    every side) and [sides, seeds] of each seed's own macro tau."""
    domains = set(sides[0])
    if not domains or any(set(side) != domains for side in sides):
        raise ValueError(f"every side needs the same domains, got {[sorted(side) for side in sides]}")
    parts = {d: [_parts(side[d]) for side in sides] for d in sides[0]}
    for first, *rest in parts.values():
        for other in rest:
            _paired(first, other)
    seeds = {len(first) for first, *_ in parts.values()}
    if len(seeds) != 1:
        raise ValueError(f"every domain needs the same seeds, got {sorted(seeds)}")
    rng = np.random.default_rng(seed)
    n_seeds = seeds.pop()
    seed_index = _seed_draws(n_seeds, rng)
    macro, per_seed = np.zeros((len(sides), RESAMPLES)), np.zeros((len(sides), n_seeds))
    for domain_parts in parts.values():
        units = domain_parts[0].shape[1]
        draws = (seed_index, rng.integers(0, units, size=(RESAMPLES, n_seeds, units)))
        for i, p in enumerate(domain_parts):
            macro[i] += _resampled(p, draws) / len(parts)
            per_seed[i] += _seed_taus(p) / len(parts)
    return macro, per_seed


def macro_gain(a: Mapping[str, Sequence], b: Mapping[str, Sequence], seed: int = 0) -> Interval:
    """100 x (macro tau of a / macro tau of b - 1), in percent: the macro average is the mean of
    the domains' pooled taus (seed means, with several seeds); each domain's generations are
    resampled, paired, and the seeds once for all domains (seed i is one drafter in every domain)."""
    (macro_a, macro_b), (seed_a, seed_b) = _macro_taus([a, b], seed)
    estimate = 100 * (seed_a.mean() / seed_b.mean() - 1)
    return _interval(float(estimate), 100 * (macro_a / macro_b - 1), 100 * (seed_a / seed_b - 1))


def macro_gain_change(a_hi: Mapping[str, Sequence], b_hi: Mapping[str, Sequence], a_lo: Mapping[str, Sequence],
                      b_lo: Mapping[str, Sequence], seed: int = 0) -> Interval:
    """macro_gain(a_hi, b_hi) - macro_gain(a_lo, b_lo), in percentage points: how a's gain over b
    changes between two settings (two block sizes, say) measured on the same prompts; all four
    are resampled with one draw, so the prompts' noise they share cancels."""
    macro, per_seed = _macro_taus([a_hi, b_hi, a_lo, b_lo], seed)
    change = lambda m: 100 * (m[0] / m[1] - 1) - 100 * (m[2] / m[3] - 1)
    return _interval(float(change(per_seed.mean(axis=1))), change(macro), change(per_seed))


def mean_interval(values, seed: int = 0) -> Interval:
    """The mean of per-unit values (one per reply, say) with a bootstrap over the units; NaNs
    (units without a value) are left out. For a paired comparison pass the per-unit differences.
    Several seeds: [seeds, units] (the same units for every seed); the estimate is the seed mean
    and each resample draws seeds, then units."""
    array = np.asarray(values, dtype=float)
    array = array[None] if array.ndim == 1 else array
    if array.ndim != 2:
        raise ValueError(f"expected values per unit, one row per seed, got shape {array.shape}")
    if array.shape[0] == 1:
        array = array[:, ~np.isnan(array[0])]
    if array.shape[1] < 2:
        raise ValueError(f"need at least two values for an interval, got {array.shape[1]}")
    seed_index, unit_index = _draws(*array.shape, np.random.default_rng(seed))
    seed_means = np.nanmean(array, axis=1)
    samples = np.nanmean(array[seed_index[..., None], unit_index], axis=-1).mean(axis=-1)
    return _interval(float(seed_means.mean()), samples, seed_means)


def t_interval(values: Sequence[float], seeds: bool = True) -> Interval:
    """The mean of independent values (each training seed's own estimate, or each replay's) with
    its 95% t interval (n - 1 degrees of freedom); non-finite values are left out. One value gives
    the whole line: one seed calls nothing. With `seeds`, the interval keeps the values as its seeds'
    estimates (written beside the interval in the result files)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        raise ValueError(f"a t interval needs at least one finite value, got {list(values)}")
    if len(v) == 1:
        return Interval(float(v[0]), -np.inf, np.inf)
    half = (T_975[len(v) - 2] if len(v) - 2 < len(T_975) else 1.96) * v.std(ddof=1) / np.sqrt(len(v))
    return Interval(float(v.mean()), float(v.mean() - half), float(v.mean() + half), tuple(v.tolist()) if seeds else ())


def tau_interval(parts, seed: int = 0) -> Interval:
    """tau itself with its bootstrap interval (seeds, then generations), from per-generation
    (tokens, rounds) pairs as `tau_difference` takes them."""
    parts = _parts(parts)
    rng = np.random.default_rng(seed)
    return _interval(pooled_tau(parts), _resampled(parts, _draws(parts.shape[0], parts.shape[1], rng)),
                     _seed_taus(parts))


def versus_paper(agrees: bool, paper: str | None = None) -> str:
    """'as in the paper', or 'unlike the paper' ('unlike the paper, where it is chat' when `paper`
    says what the paper found)."""
    return "as in the paper" if agrees else "unlike the paper" + (f", where it is {paper}" if paper else "")


def seed_spread(values: Sequence[float], digits: int = 2) -> str:
    """'4.28 ± 0.21': the mean over seeds and their standard deviation (the mean alone for one seed)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return f"{values.mean():.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


# A verdict's three outcomes, plus a claim this machine cannot test (the verdict box colours them).
REPRODUCED, CONTRADICTED, INSIDE_NOISE, NOT_TESTABLE = "reproduced", "contradicted", "inside the noise", "not testable here"
OUTCOMES = (REPRODUCED, CONTRADICTED, INSIDE_NOISE, NOT_TESTABLE)
SIDES = ("above", "below")


def outcome(interval: Interval, paper_side: str = "above", bar: float = 0.0) -> str:
    """A claim's outcome from its interval: the paper says the value lies `paper_side` of `bar`
    ("above": greater than it; "below": less than it). Reproduced when the interval lies on the
    paper's side; contradicted when it lies on the other side; otherwise inside the noise. An
    interval over exactly two training seeds calls nothing: it is not testable with this build's
    seeds (two seeds describe a spread, they cannot bound it). Word a claim so that beating the
    paper is on the paper's side (an ECE "at most the paper's 8%": below 0.08)."""
    if paper_side not in SIDES:
        raise ValueError(f"paper_side must be one of {SIDES}, got {paper_side!r}")
    if len(interval.seeds) == 2:  # two seeds describe; they do not call (BOOK_DESIGN.md, Verdicts)
        return NOT_TESTABLE
    shifted = Interval(interval.estimate - bar, interval.low - bar, interval.high - bar,
                       tuple(value - bar for value in interval.seeds))
    if paper_side == "below":
        shifted = Interval(-shifted.estimate, -shifted.high, -shifted.low, tuple(-v for v in shifted.seeds))
    if shifted.above_zero:
        return REPRODUCED
    if shifted.below_zero:
        return CONTRADICTED
    return INSIDE_NOISE


def combined(*found: str) -> str:
    """One outcome from several parts' (a claim "in every domain", or both edges of a window):
    contradicted when any part is, reproduced when every part is, not testable when any part is
    (and none is contradicted), inside the noise otherwise."""
    if not found or any(o not in OUTCOMES for o in found):
        raise ValueError(f"combined() takes outcomes among {OUTCOMES}, got {found!r}")
    if CONTRADICTED in found:
        return CONTRADICTED
    if NOT_TESTABLE in found:
        return NOT_TESTABLE
    return REPRODUCED if all(o == REPRODUCED for o in found) else INSIDE_NOISE


def outcome_in_every(intervals: Mapping[str, Interval], paper_side: str = "above", bar: float = 0.0) -> str:
    """The outcome of a claim made for every domain (or drafter, or size): reproduced when every
    one is reproduced, contradicted when any one is contradicted, and inside the noise otherwise
    (at least one inside the noise, none contradicted). `per_outcome` says which is which."""
    if not intervals:
        raise ValueError("a claim over several parts needs at least one interval")
    return combined(*(outcome(interval, paper_side, bar) for interval in intervals.values()))


def between(interval: Interval, low: float, high: float) -> str:
    """The outcome of "the value lies between `low` and `high`": both edges tested, as `combined`
    joins them (reproduced inside, contradicted when the interval lies beyond either edge)."""
    return combined(outcome(interval, "above", low), outcome(interval, "below", high))


def in_window(interval: Interval, centre: float, half_width: float) -> str:
    """The outcome of "the value lies within `half_width` of `centre`" (the paper's number)."""
    return between(interval, centre - half_width, centre + half_width)


def per_outcome(intervals: Mapping[str, Interval], paper_side: str = "above", bar: float = 0.0,
                digits: int = 2) -> str:
    """Each part's interval and outcome as words, for a verdict row's "this run" cell:
    'math +0.28 [+0.07, +0.49] reproduced; code +0.14 [-0.15, +0.39] inside the noise'."""
    return "; ".join(f"{name} {interval.text(digits)} {outcome(interval, paper_side, bar)}"
                     for name, interval in intervals.items())


def exact(holds: bool) -> str:
    """The outcome of a check without noise (the same bits in every build: speculative decoding at
    temperature 0 equals the target's greedy output): reproduced or contradicted."""
    if not isinstance(holds, (bool, np.bool_)):
        raise ValueError(f"exact() takes the check's truth value, got {holds!r}")
    return REPRODUCED if holds else CONTRADICTED


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


def plural(n: int, noun: str) -> str:
    """'1 layer', '2 layers': a count with its noun."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def falls_by(drop: float, digits: int = 2, unit: str = "") -> str:
    """A drop (first minus last) as words: 'falls by 0.12', 'rises by 0.12', or 'stays flat' when it
    rounds to zero at `digits` decimals; `unit` follows the number (' points')."""
    if abs(drop) < 0.5 * 10 ** -digits:
        return "stays flat"
    return f"{'falls' if drop > 0 else 'rises'} by {abs(drop):.{digits}f}{unit}"


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


def tau_gaps(a: Mapping[str, Sequence], b: Mapping[str, Sequence], seed: int = 0) -> dict[str, Interval]:
    """`tau_difference` of two drafters in each domain, paired: {domain: tau(a) - tau(b)}, where `a`
    and `b` map each domain to its per-generation (tokens, rounds), one list per seed, both measured
    on the same prompts (Table 1's domains, say)."""
    if set(a) != set(b):
        raise ValueError(f"both drafters need the same domains, got {sorted(a)} and {sorted(b)}")
    return {domain: tau_difference(a[domain], b[domain], seed=seed) for domain in a}


def _first_minus_last(curves) -> np.ndarray:
    """The values at the first position minus those at the last, per seed and unit: [seeds, units]
    (in the curves' own dtype, as the chapters computed it)."""
    curves = np.asarray(curves)
    return curves[..., 0] - curves[..., -1]


def slot_falls(per_slot: Mapping[str, Sequence], seed: int = 0) -> dict[str, Interval]:
    """How far a drafter's per-slot acceptance falls from the first slot to the last, per domain,
    with a bootstrap over the seeds, then the units (replies): `per_slot` maps each domain to its
    acceptances [seeds, units, slots] (the paper's Figure 2 where the fall lives); a negative fall is a rise."""
    return {domain: mean_interval(_first_minus_last(curves), seed=seed) for domain, curves in per_slot.items()}


def slot_fall_differences(base: Mapping[str, Sequence], other: Mapping[str, Sequence],
                          seed: int = 0) -> dict[str, Interval]:
    """`base`'s fall from the first slot to the last minus `other`'s, per domain, paired (the same
    units and seed index on both sides, as `slot_falls` takes them): above zero where `other`'s
    curve is flatter beyond the noise."""
    if set(base) != set(other):
        raise ValueError(f"both drafters need the same domains, got {sorted(base)} and {sorted(other)}")
    return {domain: mean_interval(_first_minus_last(base[domain]) - _first_minus_last(other[domain]), seed=seed)
            for domain in base}


def race_speedup(race: Mapping[str, Mapping[str, Mapping[str, Sequence[float]]]], faster: str,
                 slower: str) -> Interval:
    """How much faster `faster` decodes than `slower` per second, in percent (`ratio_interval`): the
    geometric mean of their tokens-per-second ratios over every pass of a race in every domain, each
    pass timing both on the same prompts. `race` maps a domain to each decoder's result, whose
    "tokens_per_s_all" lists its passes (the serving room's race)."""
    pairs = [(a, b) for domain in race
             for a, b in zip(race[domain][faster]["tokens_per_s_all"], race[domain][slower]["tokens_per_s_all"])]
    return ratio_interval([a for a, _ in pairs], [b for _, b in pairs])
