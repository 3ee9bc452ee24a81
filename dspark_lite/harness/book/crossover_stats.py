"""Where parallel drafting wins, in numbers (chapter 03 builds it, section 3.9): per-slot acceptance
split at the block's branch points (`split_means`, the paired gaps `split_gaps`, DFlash's deficit in
its two parts `deficit_parts`), and the crossover map's points, DFlash's gain over the baseline per
capacity ratio and domain with its interval (`crossover_points`), each point's call (`point_calls`)
and the paired macro gain of one drafter over another (`acceptance_gain`).

The inputs are the harness's own: `evaluation.slot_acceptance_split` per seed, and the
`evaluation.DomainAcceptance` reports of `crossover.sweep` and `crossover.loss_ablation`.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..toy.corpus import DOMAINS
from . import verdicts

SPLIT_PARTS = ("clean", "branched")


def nanmean(values: Any, axis: int | None = None) -> Any:
    """np.nanmean, quiet where every value is missing (a reply with no branched slot: NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def interval_or_nan(values: Any, seed: int = 0) -> verdicts.Interval:
    """`verdicts.mean_interval`, or an interval of NaNs where fewer than two values exist (no branched
    slot in a domain, say: nothing to compare)."""
    if np.isfinite(np.asarray(values, dtype=float)).sum() < 2:
        return verdicts.Interval(float("nan"), float("nan"), float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return verdicts.mean_interval(values, seed=seed)


def split_means(split: Mapping[str, Mapping[str, Sequence[Mapping[str, np.ndarray]]]]) -> dict:
    """Each reply's mean over slots 2..gamma of its clean and its branched slots, and the share of
    those slots that are branched: {kind: {domain: {"clean" | "branched" | "share": [seeds, replies]}}}
    from `evaluation.slot_acceptance_split` per seed."""
    def later(values: np.ndarray) -> np.ndarray:
        return nanmean(values[:, 1:], axis=1)

    return {kind: {d: {"clean": np.stack([later(s["clean"]) for s in per_seed]),
                       "branched": np.stack([later(s["branched"]) for s in per_seed]),
                       "share": np.stack([nanmean(s["branched_share"][:, 1:], axis=1) for s in per_seed])}
                   for d, per_seed in by_domain.items()}
            for kind, by_domain in split.items()}


def split_gaps(means: Mapping[str, Any], seed: int, a: str = "dflash", b: str = "eagle"
               ) -> dict[str, dict[str, verdicts.Interval]]:
    """`a` minus `b` on clean and on branched slots (paired: same replies and seed index), and the
    branched gap minus the clean one, per domain, each with its interval."""
    gaps = {}
    for d in DOMAINS:
        clean = means[a][d]["clean"] - means[b][d]["clean"]
        branched = means[a][d]["branched"] - means[b][d]["branched"]
        gaps[d] = {"clean": interval_or_nan(clean, seed), "branched": interval_or_nan(branched, seed),
                   "branched minus clean": interval_or_nan(branched - clean, seed)}
    return gaps


def deficit_parts(means: Mapping[str, Any], a: str = "dflash", b: str = "eagle") -> dict[str, dict[str, float]]:
    """`a`'s deficit against `b` over slots 2..gamma, per slot, in its two parts: the clean slots'
    (1 - share) x (b - a) and the branched slots' share x (b - a), from seed means, with `a`'s
    branched share (a negative part: `a` is ahead there)."""
    out = {}
    for d in DOMAINS:
        share = float(nanmean(means[a][d]["share"]))
        gap = {part: float(nanmean(means[b][d][part] - means[a][d][part])) for part in SPLIT_PARTS}
        out[d] = {"clean": (1 - share) * gap["clean"], "branched": share * gap["branched"]}
    return out


def crossover_points(dflash: Mapping[str, Any], eagles: Mapping[float, Mapping[str, Any]], seed: int) -> pd.DataFrame:
    """One row per (capacity ratio, domain), ratios ascending: both taus and DFlash's gain over the
    baseline at that ratio, in percent, with its interval (`verdicts.macro_gain` on one domain:
    paired, the same prompts, seeds resampled)."""
    rows = []
    for ratio, eagle in sorted(eagles.items()):
        for d in DOMAINS:
            gain = verdicts.macro_gain({d: dflash[d].per_generation}, {d: eagle[d].per_generation}, seed=seed)
            rows.append({"capacity ratio": ratio, "domain": d, "tau DFlash": dflash[d].tau, "tau EAGLE-style": eagle[d].tau,
                         "gain": gain})
    return pd.DataFrame(rows)


def point_calls(points: pd.DataFrame, above: str = "DFlash", below: str = "baseline", tie: str = "tie"
                ) -> dict[str, list[str]]:
    """Per domain, each capacity ratio's call in the points' order: `above` where the gain's interval
    is above zero, `below` where it is below, else `tie`."""
    return {d: [verdicts.compared(g, above, below, tie) for g in points[points["domain"] == d]["gain"]] for d in DOMAINS}


def nearest_index(values: Sequence[float], target: float) -> int:
    """The index of the value nearest `target` (the first, on a tie)."""
    return int(np.argmin([abs(v - target) for v in values]))


def acceptance_gain(a: Mapping[str, Any], b: Mapping[str, Any], seed: int) -> verdicts.Interval:
    """`a`'s macro tau over `b`'s, as a gain in percent with its interval (`verdicts.macro_gain`,
    paired: the same prompts), from two drafters' acceptance reports per domain."""
    return verdicts.macro_gain({d: a[d].per_generation for d in DOMAINS}, {d: b[d].per_generation for d in DOMAINS},
                               seed=seed)
