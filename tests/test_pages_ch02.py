"""Chapter 02's page module says what the run found, and its verdicts follow the numbers given."""
from __future__ import annotations

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from dspark_lite.harness.book import results  # noqa: E402
from dspark_lite.harness.book.pages import ch02  # noqa: E402


@pytest.fixture
def said(said_by) -> list[str]:
    """What ch02 says, one string a call, instead of displaying it."""
    return said_by(ch02)


def race_of(ours: list[float], hf: list[float], alone: list[float]) -> tuple[dict, pd.DataFrame]:
    """`benchmark.race`'s shape for three decoders' tokens/s per pass, and the race table from it."""
    import statistics

    speeds = {name: {"tokens_per_s": statistics.median(v), "tokens_per_s_all": v, "tokens": 100}
              for name, v in ((ch02.TARGET_ONLY, alone), (ch02.ENGINE, ours), (ch02.ASSISTED, hf))}
    race = pd.DataFrame({n: {"tokens/s (median)": v["tokens_per_s"]} for n, v in speeds.items()}).T
    race["vs target only"] = race["tokens/s (median)"] / race.loc[ch02.TARGET_ONLY, "tokens/s (median)"]
    return speeds, race


def test_the_race_sentence_follows_the_paired_passes(said: list[str]) -> None:
    fast = ch02.say_race(*race_of([200, 210, 205, 208], [100, 104, 101, 99], [100, 101, 99, 100]))
    slow = ch02.say_race(*race_of([50, 52, 51, 49], [100, 104, 101, 99], [100, 101, 99, 100]))
    assert fast["goal_met"] and "reaches the goal" in said[0] and "speculation pays" in said[0]
    assert not slow["goal_met"] and "falls short of the goal" in said[1]
    assert "speculation neither pays nor loses" in said[1]  # assisted generation ties the target alone


def test_the_verdict_rows_make_a_box(said: list[str]) -> None:
    race = ch02.say_race(*race_of([200, 210, 205, 208], [100, 104, 101, 99], [100, 101, 99, 100]))
    terms = pd.DataFrame({"L (ms/token)": [3.0]}, index=["gamma=4"])
    eq1 = {"row": terms.loc["gamma=4"], "target_only_ms": 2.0,
           "gap": ch02.verdicts.ratio_interval([3.0, 3.1, 2.9], [2.0, 2.1, 1.9])}
    rows = ch02.verdict_rows(0.002, 200_000, {"math": 10, "code": 12, "chat": 9}, 4, eq1, race)
    assert [row[3] for row in rows] == [True, True, False, True, True]
    results.run_shows(rows)  # the box accepts every row
