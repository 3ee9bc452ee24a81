"""Chapter 03's page module says what the run found, and its verdicts follow the numbers given."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from dspark_lite.harness.book.pages import ch03  # noqa: E402
from dspark_lite.harness.book.verdicts import Interval  # noqa: E402

DOMAINS = ("math", "code", "chat")
ABOVE, BELOW, TIE = Interval(0.5, 0.2, 0.8), Interval(-0.5, -0.8, -0.2), Interval(0.1, -0.2, 0.4)


@pytest.fixture
def said(said_by) -> list[str]:
    """What ch03 says, one string a call, instead of displaying it."""
    return said_by(ch03)


def measured(tau: dict[str, float], first: float = 0.8, last: float = 0.7) -> dict[str, SimpleNamespace]:
    """One drafter's acceptance per domain, as `zoo.measured_seeds` returns it (the fields the page reads)."""
    return {d: SimpleNamespace(tau=t, conditional=[first, 0.75, last], prefix_survival=[0.9, 0.6],
                               seed_taus=[t - 0.1, t + 0.1]) for d, t in tau.items()}


def test_the_recipe_sentence_names_the_layers_read() -> None:
    recipe = SimpleNamespace(gamma=4, target_layer_ids=(1, 3), dflash_layers=2, eagle_layers=1, steps=8, eagle_steps=6)
    out: list[str] = []
    target = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=4))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ch03, "say", lambda *p: out.append(" ".join(p)))
        ch03.say_recipe(target, recipe, [0, 1])
        ch03.say_recipe(SimpleNamespace(config=SimpleNamespace(num_hidden_layers=2)),
                        SimpleNamespace(**{**vars(recipe), "target_layer_ids": (1, 0)}), [0])
    assert "between 1 and 5" in out[0] and "the target's layers 1, 3 (of 4)" in out[0]
    assert "2 decoder layers" in out[0] and "1 decoder layer;" in out[0] and "2 training seeds (0 and 1)" in out[0]
    assert "all 2 of the target's layers" in out[1] and "1 training seed (0)" in out[1]


def test_the_loss_sentence_says_whether_it_is_the_papers(said: list[str]) -> None:
    ch03.say_loss(SimpleNamespace(loss_decay=None, ce_weight=0.1, tv_weight=0.9, eagle_loss="eagle3"), 4)
    ch03.say_loss(SimpleNamespace(loss_decay=None, ce_weight=0.1, tv_weight=0.9, eagle_loss="dspark"), 7)
    assert "exp(-(k-1)/4): the paper's loss" in said[0] and "Eagle3's soft cross-entropy" in said[0]
    assert "exp(-(k-1)/7): not the paper's loss" in said[1] and "the same loss as DFlash, not Eagle3's" in said[1]


def test_the_calibration_sentence_names_the_domains_outside_the_window(said: list[str]) -> None:
    table = pd.DataFrame({"DFlash (ours)": {"math": 4.6, "code": 4.3, "chat": 4.26}})
    in_window = {"math": True, "code": True, "chat": False}
    margin = {"math": 0.55, "code": 0.61, "chat": -0.56}
    ch03.say_calibration(table, 0.75, in_window, margin, "math", False, {"dflash": TIE, "eagle": BELOW})
    ch03.say_calibration(table, 0.75, dict.fromkeys(DOMAINS, True), margin, "chat", True, {"dflash": TIE, "eagle": TIE})
    assert "landed outside the window on chat (4.26), and chat was not the lowest (math was)" in said[0]
    assert "math inside, code inside, chat outside" in said[0] and "chat -0.56" in said[0]
    assert "landed inside the window in every domain, with chat the lowest" in said[1]


def test_the_ordering_verdict_follows_the_intervals(said: list[str]) -> None:
    table = pd.DataFrame({"EAGLE-style (ours)": {"math": 4.0, "code": 3.0, "chat": 2.0}})
    paper = {"eagle": {"math": 4.56, "code": 3.87, "chat": 2.40}}
    ch03.say_ordering(table, paper, dict.fromkeys(DOMAINS, ABOVE), list(DOMAINS), [], [])
    ch03.say_ordering(table, paper, {"math": ABOVE, "code": TIE, "chat": BELOW}, ["math"], ["chat"], ["code"])
    ch03.say_ordering(table, paper, dict.fromkeys(DOMAINS, TIE), [], [], list(DOMAINS))
    assert said[0].startswith("**DFlash beats the autoregressive baseline in every domain")
    assert "reproduces only in part" in said[1] and "beats DFlash on chat, loses to it on math" in said[1]
    assert "code +0.10 [-0.20, +0.40] (a tie)" in said[1] and "chat -0.50 [-0.80, -0.20] (the baseline ahead)" in said[1]
    assert said[2].startswith("**The paper's ordering does not reproduce here.**")
    assert "fewer than the paper's Eagle3 in every domain" in said[2]
    assert ch03.eagle_summary(list(DOMAINS), [], []).endswith("as the paper's Eagle3 does")


def test_the_suffix_decay_sentence_follows_the_verdict(said: list[str]) -> None:
    fall = {"dflash": dict.fromkeys(DOMAINS, Interval(0.05, 0.02, 0.08)), "eagle": dict.fromkeys(DOMAINS, TIE)}
    ch03.say_suffix_decay(fall, dict.fromkeys(DOMAINS, ABOVE), list(DOMAINS), True, 7, 3, 40)
    ch03.say_suffix_decay(fall, dict.fromkeys(DOMAINS, TIE), ["chat"], False, 7, 3, 40)
    assert "falls by 0.050 on math" in said[0] and "beyond the noise on every domain" in said[0]
    assert "**suffix decay is reproduced" in said[0] and "3 training seeds" in said[0] and "40 held-out" in said[0]
    assert "on chat only" in said[1] and "**suffix decay is not reproduced by this test" in said[1]


def test_the_latency_and_collision_verdicts_follow_their_thresholds(said: list[str]) -> None:
    ch03.say_latency((4, 16), {"dflash": 1.5, "eagle": 4.0}, True)
    ch03.say_latency((4, 16), {"dflash": 2.5, "eagle": 4.0}, False)
    ch03.say_latency((1, 4), {"dflash": 4.0, "eagle": 4.0}, False)
    assert "from gamma = 4 to gamma = 16" in said[0] and "1.50x" in said[0] and "far more slowly" in said[0]
    assert "not by the factor of three" in said[1]
    assert "no more slowly than the sequential drafter's" in said[2]
    ch03.say_collision({"DFlash": 0.4, "EAGLE-style": 0.1, "target": 0.0}, 5, True)
    ch03.say_collision({"DFlash": 0.15, "EAGLE-style": 0.1, "target": 0.0}, 5, False)
    assert "over 5 openers" in said[3] and "40% of DFlash's drafts" in said[3] and "the collision is plain" in said[3]
    assert "does not show in this run" in said[4]


def test_the_verdict_box_rows_follow_the_measurements() -> None:
    acceptance = {"dflash": measured({"math": 4.6, "code": 4.3, "chat": 2.9}, 0.72, 0.63),
                  "eagle": measured({"math": 4.2, "code": 3.9, "chat": 2.5}, 0.53, 0.74)}
    box = ch03.verdict_box(
        acceptance=acceptance, paper_tau={"dflash": {"math": 4.80, "code": 4.44, "chat": 2.95},
                                          "eagle": {"math": 4.56, "code": 3.87, "chat": 2.40}},
        n_seeds=3, gap=dict.fromkeys(DOMAINS, ABOVE), dflash_wins=list(DOMAINS),
        chat_gap={"dflash": BELOW, "eagle": TIE}, window=0.75, in_window=dict.fromkeys(DOMAINS, True),
        chat_lowest=True, gamma=3, slot_mean={"dflash": {"chat": [Interval(0.8, 0.7, 0.9), Interval(0.7, 0.6, 0.8)]}},
        fall={"dflash": {"chat": ABOVE}}, extra_fall={"chat": ABOVE}, decay_reproduced=True,
        slopes={"dflash": {"chat": BELOW}, "eagle": {"chat": TIE}}, conditional_decay=True, pair=(4, 16),
        pair_ratio={"dflash": 1.2, "eagle": 3.8}, block_scales_slowly=False,
        mixed={"DFlash": 0.3, "EAGLE-style": 0.05, "target": 0.0}, collision_seen=True)
    rows = box.data
    assert list(rows["verdict"]) == ["reproduced", "not reproduced", "reproduced", "reproduced", "reproduced",
                                     "reproduced", "not reproduced", "reproduced"]
    assert rows["this run"][0].startswith("4.60 / 4.30 / 2.90 vs 4.20 / 3.90 / 2.50")
    assert rows["this run"][4].startswith("code 0.72 -> 0.63, chat 0.72 -> 0.63")
    assert rows["this run"][7] == "DFlash 30%, EAGLE-style 5%, target 0%"
