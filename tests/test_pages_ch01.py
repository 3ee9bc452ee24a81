"""Chapter 01's page module says what the run found, and its verdicts follow the numbers given."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from dspark_lite.harness.book.pages import ch01  # noqa: E402


@pytest.fixture
def said(said_by) -> list[str]:
    """What ch01 says, one string a call, instead of displaying it."""
    return said_by(ch01)


def sweep(learned: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"requested vocab": [512, 1024, 2048, 4096], "learned vocab": learned,
                         "tokens per conversation": [200.0, 150.0, 130.0, 129.0]})


def test_the_cost_verdict_follows_the_ratio_against_q() -> None:
    assert ch01.cost_verdict(3.9, 8) == "far less than"
    assert ch01.cost_verdict(4.0, 8) == "not much less than"
    assert ch01.cost_verdict(8.0, 8) == "no less than"


def test_the_vocabulary_sentence_says_whether_the_curve_flattened(said: list[str]) -> None:
    profile = SimpleNamespace(name="smoke", target=SimpleNamespace(vocab_size=600))
    ch01.show_vocab_sweep(sweep([512, 1024, 1900, 1900]), profile)
    ch01.show_vocab_sweep(sweep([512, 1024, 2048, 3000]), profile)
    assert said[0].startswith("The curve flattens") and "both learned 1900 tokens" in said[0]
    assert said[1].startswith("The curve still falls") and "learned 2048 and 3000 tokens" in said[1]
    assert "600 in the smoke profile" in said[0]


def test_the_cost_sentence_gives_the_largest_q_only_when_it_is_another(said: list[str]) -> None:
    ms = pd.Series({1: 1.0, 8: 2.0, 16: 4.0})
    ch01.show_cost_curve({1: 1.0, 8: 2.0, 16: 4.0}, ms, 8, 2.0, "cpu", 32)
    ch01.show_cost_curve({1: 1.0, 8: 2.0}, ms.iloc[:2], 8, 2.0, "cpu", 32)
    assert "2.00x" in said[0] and "far less than" in said[0] and "at 16 query tokens it took 4.00x" in said[0]
    assert "at 8 query tokens it took" not in said[1]


def test_the_verdict_rows_follow_the_measurements() -> None:
    stats = pd.DataFrame({"entropy": [0.9, 0.2, 0.5]}, index=["chat", "math", "code"])
    target = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=4))
    world = SimpleNamespace(history=SimpleNamespace(seconds=60.0))
    same = torch.arange(5)
    rows = ch01.verdict_rows(stats, True, 8, 5.0, "cpu", same, same.clone(), 70_000, target, world)
    assert [row[3] for row in rows] == [True, False, True, None]
    assert rows[0][2] == "entropy 0.200 / 0.500 / 0.900 nats (math / code / chat)"
    differ = ch01.verdict_rows(stats, False, 8, 1.5, "cpu", same, same + 1, 70_000, target, world)
    assert [row[3] for row in differ] == [False, True, False, None]
