"""The verdicts' bootstrap (chapters 03-04): intervals that hold their level, ties called ties."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_lite.harness.book import verdicts


def generations(tau: float, n: int, rng: np.random.Generator, rounds: int = 30) -> list[list[float]]:
    """n generations of `rounds` rounds each, emitting 1 + Binomial(6, (tau - 1) / 6) tokens a round."""
    return [[float((1 + rng.binomial(6, (tau - 1) / 6, size=rounds)).sum()), rounds] for _ in range(n)]


def test_pooled_tau_is_tokens_over_rounds() -> None:
    assert verdicts.pooled_tau([[10, 4], [6, 4]]) == 2.0
    with pytest.raises(ValueError, match="pairs"):
        verdicts.pooled_tau([1, 2, 3])


def test_a_real_gap_is_called_and_equal_drafters_tie_at_the_level() -> None:
    rng = np.random.default_rng(0)
    far = verdicts.tau_difference(generations(4.5, 40, rng), generations(3.5, 40, rng))
    assert far.above_zero and verdicts.compared(far) == "above"
    assert verdicts.compared(verdicts.tau_difference(generations(3.5, 40, rng), generations(4.5, 40, rng))) == "below"
    # equal drafters: the 95% interval of their difference holds zero about 95% of the time
    covered = sum(not (i.above_zero or i.below_zero) for i in (
        verdicts.tau_difference(generations(4.0, 20, rng), generations(4.0, 20, rng), seed=s, paired=False)
        for s in range(60)))
    assert covered >= 51, covered
    tie = verdicts.tau_difference(generations(4.0, 20, rng), generations(4.0, 20, rng), paired=False)
    if not (tie.above_zero or tie.below_zero):
        assert verdicts.compared(tie) == "tied with (within noise)"
    straddles = verdicts.Interval(0.1, -0.2, 0.4)
    assert verdicts.compared(straddles, "holds", "is reversed", "is a tie") == "is a tie"
    assert verdicts.compared(verdicts.Interval(0.3, 0.1, 0.5), "holds", "is reversed", "is a tie") == "holds"


def test_paired_needs_the_same_generations_and_macro_gain_is_a_percentage() -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="same generations"):
        verdicts.tau_difference(generations(4, 5, rng), generations(4, 6, rng))
    a = {d: generations(5.0, 30, rng) for d in ("math", "chat")}
    b = {d: generations(4.0, 30, rng) for d in ("math", "chat")}
    gain = verdicts.macro_gain(a, b)
    assert 15 < gain.estimate < 35 and gain.low < gain.estimate < gain.high and gain.above_zero
    with pytest.raises(ValueError, match="same domains"):
        verdicts.macro_gain(a, {"math": b["math"]})


def test_fitted_slope_matches_scipy_and_calls_only_clear_trends() -> None:
    from scipy import stats

    curve = [0.87, 0.86, 0.84, 0.85, 0.81, 0.80, 0.78]
    fit = stats.linregress(range(1, 8), curve)
    slope = verdicts.fitted_slope(curve)
    half = stats.t.ppf(0.975, 5) * fit.stderr
    assert slope.estimate == pytest.approx(fit.slope)
    assert slope.low == pytest.approx(fit.slope - half, abs=1e-3) and slope.high == pytest.approx(fit.slope + half, abs=1e-3)
    assert slope.below_zero
    zigzag = [0.82, 0.69, 0.81, 0.54, 0.75, 0.61, 0.73]  # chapter 03's chat curve in an earlier run
    assert verdicts.compared(verdicts.fitted_slope(zigzag)) == "tied with (within noise)"
    assert verdicts.fitted_slope([0.8, None, 0.7, 0.6]).estimate < 0
    with pytest.raises(ValueError, match="3 finite"):
        verdicts.fitted_slope([0.5, None])


def test_ratio_interval_calls_a_real_speed_up_and_ties_equal_speeds_at_the_level() -> None:
    """Chapters 02 and 04's race verdicts: paired speeds, a t interval on the log ratio."""
    rng = np.random.default_rng(3)
    base = rng.uniform(50, 150, size=12)  # prompts differ a lot; the pairing removes that
    fast = verdicts.ratio_interval(base * 1.2 * rng.lognormal(0, 0.02, 12), base)
    assert fast.above_zero and 15 < fast.estimate < 25 and verdicts.compared(fast) == "above"
    covered = sum(not (i.above_zero or i.below_zero) for i in (
        verdicts.ratio_interval(base * rng.lognormal(0, 0.05, 12), base) for _ in range(200)))
    assert 180 <= covered <= 199, covered  # about 95% of equal-speed runs are ties
    assert verdicts.ratio_interval([2.0, 2.0], [1.0, 1.0]).text() == "+100.00 [+100.00, +100.00]"
    with pytest.raises(ValueError, match="paired"):
        verdicts.ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        verdicts.ratio_interval([1.0, 0.0], [1.0, 1.0])


def test_word_list_and_domains_phrase() -> None:
    """The one wording of lists in the chapters' sentences (moved out of chapters 03 and 04)."""
    assert verdicts.word_list([]) == ""
    assert verdicts.word_list(["math"]) == "math"
    assert verdicts.word_list(["math", "code"]) == "math and code"
    assert verdicts.word_list(x for x in ("math", "code", "chat")) == "math, code and chat"
    every = ("math", "code", "chat")
    assert verdicts.domains_phrase(["math", "code", "chat"], every) == "every domain"
    assert verdicts.domains_phrase(["math", "chat"], every) == "math and chat only"
    assert verdicts.domains_phrase(["code"], every) == "code only"
    assert verdicts.domains_phrase([], every) == "no domain"
