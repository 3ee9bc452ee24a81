"""Chapter 06's page module says what the run found, and its verdicts follow the numbers given."""
from __future__ import annotations

import math

import matplotlib
import pandas as pd
import pytest

matplotlib.use("Agg")

from dspark_lite.harness.book import results  # noqa: E402
from dspark_lite.harness.book.pages import ch06  # noqa: E402


@pytest.fixture
def said(said_by) -> list[str]:
    """What ch06 says, one string a call, instead of displaying it."""
    return said_by(ch06)


def appendix_of(frequency: dict[str, float], trials: int) -> pd.DataFrame:
    """Appendix A's table as the chapter builds it."""
    se = math.sqrt(0.7 * 0.3 / trials)
    table = pd.DataFrame({"P(output = A)": frequency, "z vs 0.70": {k: (v - 0.7) / se for k, v in frequency.items()}})
    table["p-value (lossless?)"] = [math.erfc(abs(z) / math.sqrt(2)) for z in table["z vs 0.70"]]
    return table


FREQUENCY = {"Algorithm 1": 0.6993, "global search": 0.8497, "asynchronous": 0.7003}


def test_appendix_a_says_each_frequency_and_an_underflowed_p_value(said: list[str]) -> None:
    ch06.say_appendix_a(appendix_of(FREQUENCY, 200_000), 200_000)
    assert "0.6993" in said[0] and "0.7003" in said[0] and "0.8497" in said[0] and "200,000 trials" in said[0]
    assert "p < 1e-300" in said[0] and "p = 0)" not in said[0]


def test_the_verdicts_follow_the_p_values_and_the_goal() -> None:
    good = appendix_of(FREQUENCY, 200_000)["p-value (lossless?)"]
    biased = appendix_of({**FREQUENCY, "Algorithm 1": 0.75}, 200_000)["p-value (lossless?)"]
    speed = {"median_us": 95.0, "p90_us": 97.0}
    assert [row[3] for row in ch06.verdict_rows(FREQUENCY, good, speed, 200, True)] == [True, True, True]
    assert [row[3] for row in ch06.verdict_rows(FREQUENCY, biased, speed, 200, False)] == [False, True, False]
    results.run_shows(ch06.verdict_rows(FREQUENCY, good, speed, 200, True))


def test_the_brute_force_sentence_gives_the_counts(said: list[str]) -> None:
    ch06.say_brute_force({"unimodal": 311, "unimodal, optimum found": 311, "not unimodal": 89,
                          "not unimodal, optimum missed": 15}, 400)
    assert "311 of 400" in said[0] and "other 89" in said[0] and "on 15 of those" in said[0]


def test_the_timing_says_where_its_script_is_missing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(ch06, "BENCH_SCRIPT", tmp_path / "bench_scheduler.py")
    with pytest.raises(FileNotFoundError, match="clone of the repository"):
        ch06.bench_scheduler(requests=4, gamma=2, calls=3, seed=0)
