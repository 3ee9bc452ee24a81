"""Where parallel drafting wins, in numbers (`book.crossover_stats`): the branch split's summaries put a
planted deficit where it was planted, and the crossover map's calls follow the intervals, on
hand-made inputs whose answers are known."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from dspark_lite.harness.book import crossover_stats
from dspark_lite.harness.book.verdicts import Interval

DOMAINS = ("math", "code", "chat")
ABOVE, BELOW, TIE = Interval(5.0, 2.0, 8.0), Interval(-5.0, -8.0, -2.0), Interval(1.0, -2.0, 4.0)


def one_seed_split(clean: float, branched: float, share: float, replies: int = 6, gamma: int = 4) -> dict:
    """`slot_acceptance_split`'s output for one seed: every reply alike, slot 1 clean."""
    rng = np.random.default_rng(0)
    jitter = rng.normal(0, 0.01, (replies, gamma))
    c = np.full((replies, gamma), clean) + jitter
    b = np.full((replies, gamma), branched) + jitter
    b[:, 0] = np.nan
    s = np.full((replies, gamma), share)
    s[:, 0] = 0.0
    return {"all": c * (1 - s) + np.nan_to_num(b) * s, "clean": c, "branched": b, "branched_share": s}


def test_split_summaries_put_the_deficit_where_it_was_planted() -> None:
    """DFlash matches the baseline on clean slots and loses 0.3 after branch points (share 0.4): the
    whole deficit sits on branched slots, and the paired gaps say so."""
    split = {"dflash": {d: [one_seed_split(0.8, 0.5, 0.4), one_seed_split(0.8, 0.5, 0.4)] for d in DOMAINS},
             "eagle": {d: [one_seed_split(0.8, 0.8, 0.4), one_seed_split(0.8, 0.8, 0.4)] for d in DOMAINS}}
    means = crossover_stats.split_means(split)
    assert means["dflash"]["chat"]["clean"].shape == (2, 6)
    np.testing.assert_allclose(means["dflash"]["chat"]["share"], 0.4)
    assert float(crossover_stats.nanmean(means["dflash"]["chat"]["branched"])) == pytest.approx(0.5, abs=0.01)
    gaps = crossover_stats.split_gaps(means, seed=0)
    assert not gaps["chat"]["clean"].above_zero and not gaps["chat"]["clean"].below_zero
    assert gaps["chat"]["branched"].below_zero and gaps["chat"]["branched minus clean"].below_zero
    assert gaps["chat"]["branched"].estimate == pytest.approx(-0.3, abs=0.01)
    deficit = crossover_stats.deficit_parts(means)
    assert deficit["chat"]["branched"] == pytest.approx(0.4 * 0.3, abs=0.01) and abs(deficit["chat"]["clean"]) < 0.01


def test_no_deficit_when_dflash_is_ahead_everywhere() -> None:
    split = {"dflash": {d: [one_seed_split(0.9, 0.9, 0.3)] * 2 for d in DOMAINS},
             "eagle": {d: [one_seed_split(0.7, 0.6, 0.3)] * 2 for d in DOMAINS}}
    means = crossover_stats.split_means(split)
    deficit = crossover_stats.deficit_parts(means)
    assert all(v["clean"] + v["branched"] < 0 for v in deficit.values())
    gaps = crossover_stats.split_gaps(means, 0)
    assert gaps["chat"]["clean"].above_zero and gaps["chat"]["branched minus clean"].above_zero


def test_an_interval_needs_two_values() -> None:
    assert np.isnan(crossover_stats.interval_or_nan([np.nan, np.nan, 0.5]).estimate)
    assert crossover_stats.interval_or_nan([0.4, 0.6, 0.5]).estimate == pytest.approx(0.5)
    assert np.isnan(crossover_stats.nanmean(np.full(3, np.nan)))  # quiet: no RuntimeWarning


def points(gains: dict[float, dict[str, Interval]]) -> pd.DataFrame:
    return pd.DataFrame([{"capacity ratio": r, "domain": d, "tau DFlash": 4.0, "tau EAGLE-style": 3.5, "gain": g}
                         for r, by_domain in gains.items() for d, g in by_domain.items()])


def test_point_calls_follow_the_intervals() -> None:
    table = points({0.24: dict.fromkeys(DOMAINS, ABOVE), 0.42: {"math": ABOVE, "code": TIE, "chat": BELOW}})
    assert crossover_stats.point_calls(table) == {"math": ["DFlash", "DFlash"], "code": ["DFlash", "tie"],
                                                  "chat": ["DFlash", "baseline"]}
    assert crossover_stats.nearest_index([0.24, 0.42, 0.6], 0.28) == 0
    assert crossover_stats.nearest_index([0.24, 0.42, 0.6], 0.5) == 1


def acceptance(tau: float, seeds: int = 2, prompts: int = 8) -> dict[str, SimpleNamespace]:
    """Reports per domain, as `zoo.measured_seeds` gives them: [seeds][generations][tokens, rounds]."""
    rng = np.random.default_rng(1)
    rounds = rng.integers(4, 8, size=(seeds, prompts))
    parts = np.stack([np.round(rounds * tau), rounds], axis=-1).tolist()
    return {d: SimpleNamespace(tau=tau, per_generation=parts) for d in DOMAINS}


def test_the_map_and_the_loss_gain_are_paired_gains_in_percent() -> None:
    dflash = acceptance(4.0)
    out = crossover_stats.crossover_points(dflash, {0.42: acceptance(5.0), 0.24: acceptance(2.0)}, seed=0)
    assert list(out["capacity ratio"]) == [0.24] * 3 + [0.42] * 3 and list(out["domain"]) == list(DOMAINS) * 2
    assert out["gain"].iloc[0].estimate == pytest.approx(100.0) and out["gain"].iloc[0].above_zero
    assert out["gain"].iloc[-1].estimate == pytest.approx(-20.0) and out["gain"].iloc[-1].below_zero
    assert crossover_stats.point_calls(out) == dict.fromkeys(DOMAINS, ["DFlash", "baseline"])
    gain = crossover_stats.acceptance_gain(acceptance(2.0), acceptance(4.0), seed=0)
    assert gain.estimate == pytest.approx(-50.0) and gain.below_zero
