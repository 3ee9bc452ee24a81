"""Chapter 03's section 3.9 page module: the branch split's summaries, the crossover map's verdicts and
the box rows follow the numbers given, on hand-made inputs whose answers are known."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from dspark_lite.harness.book.pages import ch03_crossover as ch03x  # noqa: E402
from dspark_lite.harness.book.verdicts import Interval  # noqa: E402

DOMAINS = ("math", "code", "chat")
ABOVE, BELOW, TIE = Interval(5.0, 2.0, 8.0), Interval(-5.0, -8.0, -2.0), Interval(1.0, -2.0, 4.0)


@pytest.fixture
def said(said_by) -> list[str]:
    return said_by(ch03x)


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
    means = ch03x.split_means(split)
    assert means["dflash"]["chat"]["clean"].shape == (2, 6)
    np.testing.assert_allclose(means["dflash"]["chat"]["share"], 0.4)
    gaps = ch03x.split_gaps(means, seed=0)
    assert not gaps["chat"]["clean"].above_zero and not gaps["chat"]["clean"].below_zero
    assert gaps["chat"]["branched"].below_zero and gaps["chat"]["branched minus clean"].below_zero
    assert gaps["chat"]["branched"].estimate == pytest.approx(-0.3, abs=0.01)
    deficit = ch03x.deficit_parts(means)
    assert deficit["chat"]["branched"] == pytest.approx(0.4 * 0.3, abs=0.01) and abs(deficit["chat"]["clean"]) < 0.01
    assert ch03x.deficit_words(deficit["chat"]).startswith("10") and "% of DFlash's deficit" in ch03x.deficit_words(deficit["chat"])
    assert ch03x.deficit_words({"clean": -0.05, "branched": 0.1}).startswith("all of DFlash's deficit")
    assert ch03x.deficit_words({"clean": 0.02, "branched": 0.06}).startswith("75% of DFlash's deficit")


def test_split_says_no_deficit_when_dflash_has_none(said: list[str]) -> None:
    split = {"dflash": {d: [one_seed_split(0.9, 0.9, 0.3)] * 2 for d in DOMAINS},
             "eagle": {d: [one_seed_split(0.7, 0.6, 0.3)] * 2 for d in DOMAINS}}
    means = ch03x.split_means(split)
    deficit = ch03x.deficit_parts(means)
    assert all(ch03x.deficit_words(v) == "over slots 2..γ DFlash has no deficit against the baseline" for v in deficit.values())
    ch03x.say_split(ch03x.split_gaps(means, 0), deficit)
    assert "in chat DFlash is above the baseline on clean slots" in said[0] and "its standing rises after branch points" in said[0]


def points(gains: dict[float, dict[str, Interval]]) -> pd.DataFrame:
    return pd.DataFrame([{"capacity ratio": r, "domain": d, "tau DFlash": 4.0, "tau EAGLE-style": 3.5, "gain": g}
                         for r, by_domain in gains.items() for d, g in by_domain.items()])


def test_crossover_verdicts_and_sentence(said: list[str]) -> None:
    table = points({0.24: dict.fromkeys(DOMAINS, ABOVE), 0.42: {"math": ABOVE, "code": TIE, "chat": BELOW}})
    assert ch03x.crossover_verdicts(table) == {"math": ["DFlash", "DFlash"], "code": ["DFlash", "tie"],
                                               "chat": ["DFlash", "baseline"]}
    ch03x.say_crossover(table, 0.28, {"math": 4.2, "code": 4.1, "chat": 3.2})
    assert "chat DFlash, baseline" in said[0] and "Nearest the paper's ratio (0.28), at 0.24" in said[0]
    assert "4.00 in math (Table 1's recipe: 4.20)" in said[0]


def test_verdict_rows_test_the_baseline_window_and_the_paper_ratio() -> None:
    paper = {"dflash": {"math": 4.80, "code": 4.44, "chat": 2.95}, "eagle": {"math": 4.56, "code": 3.87, "chat": 2.40}}
    inside = {"eagle": {d: SimpleNamespace(tau=paper["eagle"][d] + 0.5) for d in DOMAINS}}
    outside = {"eagle": {**inside["eagle"], "math": SimpleNamespace(tau=2.8)}}
    wins = points({0.24: dict.fromkeys(DOMAINS, ABOVE), 0.6: dict.fromkeys(DOMAINS, BELOW)})
    rows = ch03x.verdict_rows(inside, paper, 0.75, wins, 0.28)
    assert [r[3] for r in rows] == [True, True]
    assert rows[1][2].startswith("math +5.0 [+2.0, +8.0]%")
    rows = ch03x.verdict_rows(outside, paper, 0.75, points({0.24: {**dict.fromkeys(DOMAINS, ABOVE), "chat": TIE}}), 0.28)
    assert [r[3] for r in rows] == [False, False]


def test_the_result_holds_every_number() -> None:
    split = {k: {d: [one_seed_split(0.8, 0.6, 0.3)] * 2 for d in DOMAINS} for k in ("dflash", "eagle")}
    means = ch03x.split_means(split)
    out = ch03x.result(points=points({0.24: dict.fromkeys(DOMAINS, ABOVE)}), means=means, gaps=ch03x.split_gaps(means, 0),
                       deficit=ch03x.deficit_parts(means), loss_gain=TIE, ratio_tv=0.42, tv_tau=dict.fromkeys(DOMAINS, 3.0),
                       dependency_share=dict.fromkeys(DOMAINS, 0.1), paper_ratio=0.28, seeds=[0, 1], threshold=0.5)
    assert out["map"][0]["gain_percent"] == [5.0, 2.0, 8.0] and out["loss_ablation"]["eagle3_over_tv_percent"] == [1.0, -2.0, 4.0]
    assert out["split"]["dflash"]["chat"]["branched"] == pytest.approx(0.6, abs=0.01)


def test_the_baseline_calibration_sentence_says_why_one_world_cannot_hold_both(said: list[str]) -> None:
    paper = {"dflash": {"math": 4.80, "code": 4.44, "chat": 2.95}, "eagle": {"math": 4.56, "code": 3.87, "chat": 2.40}}
    tau = lambda m, c, ch: {"math": SimpleNamespace(tau=m), "code": SimpleNamespace(tau=c), "chat": SimpleNamespace(tau=ch)}
    flat = {0.24: tau(2.3, 2.6, 2.3), 0.42: tau(3.9, 4.2, 3.8)}
    ch03x.say_baseline_calibration(tau(2.8, 3.2, 2.9), flat, paper, 0.75)
    ch03x.say_baseline_calibration(tau(4.5, 3.9, 2.5), {0.24: tau(4.5, 3.9, 2.5)}, paper, 0.75)
    assert "outside the window (±0.75) in math" in said[0] and "no size gives Eagle3's shape" in said[0]
    assert "1.00 at capacity ratio 0.24" in said[0] and "Eagle3's math is 1.90 times its chat" in said[0]
    assert "inside the window (±0.75) in every domain" in said[1] and "both calibrations could be held" in said[1]
