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


def test_seeds_widen_the_interval_and_a_seed_that_disagrees_makes_a_tie() -> None:
    """Several training seeds: the estimate is the seed mean of pooled taus, the resamples draw
    seeds then generations, and a verdict that one seed contradicts is a tie."""
    rng = np.random.default_rng(3)
    base = generations(4.0, 40, rng)
    shifted = lambda shift: [[tokens + shift * rounds, rounds] for tokens, rounds in base]  # tau up by `shift`
    # Three seeds of a: +0.3, +0.3 and -0.2 against b; each seed on its own is clear of the prompts' noise.
    a, b = [shifted(0.3), shifted(0.3), shifted(-0.2)], [base, base, base]
    one = verdicts.tau_difference(a[0], b[0])
    assert one.above_zero and one.seeds == ()  # one seed: prompts only
    three = verdicts.tau_difference(a, b)
    per_seed = [verdicts.pooled_tau(x) - verdicts.pooled_tau(y) for x, y in zip(a, b)]
    assert three.estimate == pytest.approx(np.mean(per_seed))
    assert three.seeds == pytest.approx(per_seed)
    assert not three.above_zero and verdicts.compared(three) == verdicts.TIE
    assert three.high - three.low > 2 * (one.high - one.low)  # the seeds' spread is in the interval
    # Seeds that agree keep the verdict.
    agree = verdicts.tau_difference([shifted(0.3), shifted(0.35), shifted(0.25)], b)
    assert agree.above_zero and agree.estimate == pytest.approx(0.3, abs=1e-9)
    gain = verdicts.macro_gain({"math": a, "chat": a}, {"math": b, "chat": b})
    assert not gain.above_zero and len(gain.seeds) == 3 and gain.seeds[2] < 0 < gain.seeds[0]
    with pytest.raises(ValueError, match="same generations"):
        verdicts.tau_difference(a, b[:2])
    values = np.array([[0.8] * 10, [0.6] * 10]) + rng.normal(0, 0.01, (2, 10))
    mean = verdicts.mean_interval(values)
    assert mean.estimate == pytest.approx(values.mean()) and mean.low < 0.65 and mean.high > 0.75
    assert verdicts.seed_spread([4.0, 4.2, 4.4]) == "4.20 ± 0.20" and verdicts.seed_spread([4.0]) == "4.00"


def test_macro_gain_change_is_the_difference_of_two_gains_on_the_same_prompts() -> None:
    rng = np.random.default_rng(4)
    lo_a, lo_b = ({d: generations(tau, 40, rng) for d in ("math", "chat")} for tau in (4.4, 4.0))
    hi_a, hi_b = ({d: generations(tau, 40, rng) for d in ("math", "chat")} for tau in (5.2, 4.0))
    change = verdicts.macro_gain_change(hi_a, hi_b, lo_a, lo_b)
    expected = verdicts.macro_gain(hi_a, hi_b).estimate - verdicts.macro_gain(lo_a, lo_b).estimate
    assert change.estimate == pytest.approx(expected) and change.above_zero  # about +30 - +10 points
    same = verdicts.macro_gain_change(lo_a, lo_b, lo_a, lo_b)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)  # one draw for all four sides: no noise left
    nearly = verdicts.macro_gain_change({d: generations(4.45, 40, rng) for d in lo_a}, lo_b, lo_a, lo_b)
    assert verdicts.compared(nearly) == verdicts.TIE  # half a point of gain is inside 40 generations' noise
    with pytest.raises(ValueError, match="same domains"):
        verdicts.macro_gain_change(hi_a, hi_b, lo_a, {"math": lo_b["math"]})


def seeded(tau: float, seed: int) -> list:
    """2 seeds x 30 generations of 10 rounds each, about `tau` tokens a round: [seeds, generations, 2]."""
    rng = np.random.default_rng(seed)
    return [[[float(np.round(10 * tau + rng.normal(0, 1))), 10.0] for _ in range(30)] for _ in range(2)]


def test_tau_gaps_call_a_domain_won_only_beyond_the_noise() -> None:
    a = {"math": seeded(5.0, 0), "code": seeded(4.5, 1), "chat": seeded(3.0, 2)}
    b = {"math": seeded(4.0, 3), "code": seeded(3.5, 4), "chat": seeded(3.0, 5)}
    gaps = verdicts.tau_gaps(a, b, seed=0)
    assert list(gaps) == ["math", "code", "chat"]
    assert [d for d, gap in gaps.items() if gap.above_zero] == ["math", "code"]
    assert gaps["math"].estimate == pytest.approx(verdicts.pooled_tau(a["math"]) - verdicts.pooled_tau(b["math"]))
    assert gaps["math"] == verdicts.tau_difference(a["math"], b["math"], seed=0)  # the same draw, domain by domain
    with pytest.raises(ValueError, match="same domains"):
        verdicts.tau_gaps(a, {"math": b["math"]})


def test_slot_falls_and_their_paired_differences_follow_the_curves() -> None:
    rng = np.random.default_rng(0)
    curve = lambda fall: np.clip(0.9 - fall * np.linspace(0, 1, 4) + rng.normal(0, 0.01, (2, 20, 4)), 0, 1)
    falling, flat = {d: curve(0.3) for d in ("math", "chat")}, {d: curve(0.0) for d in ("math", "chat")}
    falls = verdicts.slot_falls(falling, seed=0)
    assert all(v.estimate == pytest.approx(0.3, abs=0.02) and v.above_zero for v in falls.values())
    assert not any(v.above_zero or v.below_zero for v in verdicts.slot_falls(flat, seed=0).values())
    cut = verdicts.slot_fall_differences(falling, flat, seed=0)  # the flat curve is flatter beyond the noise
    assert all(v.above_zero for v in cut.values())
    assert cut["math"].estimate == pytest.approx(falls["math"].estimate - verdicts.slot_falls(flat)["math"].estimate)
    assert verdicts.slot_falls({"math": falling["math"].astype(np.float32)})["math"].estimate == pytest.approx(0.3, abs=0.02)


def test_race_speedup_pairs_every_pass_of_every_domain() -> None:
    race = {d: {"ours": {"tokens_per_s_all": [20.0, 22.0, 18.0]}, "alone": {"tokens_per_s_all": [10.0, 11.0, 9.0]}}
            for d in ("math", "chat")}
    twice = verdicts.race_speedup(race, "ours", "alone")
    assert (twice.estimate, twice.low, twice.high) == pytest.approx((100.0, 100.0, 100.0))  # twice as fast in every pass
    race["chat"]["ours"]["tokens_per_s_all"] = [9.0, 12.0, 10.0]
    mixed = verdicts.race_speedup(race, "ours", "alone")
    assert mixed.low < 0 < mixed.high and verdicts.race_speedup(race, "alone", "ours").estimate < 0


def test_the_shared_words_of_chapters_03_and_04_and_an_interval_as_stored() -> None:
    assert (verdicts.plural(1, "layer"), verdicts.plural(2, "layer")) == ("1 layer", "2 layers")
    assert verdicts.falls_by(0.094) == "falls by 0.09"
    assert verdicts.falls_by(-0.031) == "rises by 0.03"
    assert verdicts.falls_by(0.004) == "stays flat"  # rounds to zero at two decimals
    assert verdicts.falls_by(0.004, digits=3) == "falls by 0.004"
    assert verdicts.falls_by(7.26, digits=1, unit=" points") == "falls by 7.3 points"
    # stored with each seed's own estimate beside it (issue 65), and without when there are none
    assert verdicts.Interval(0.5, 0.25, 0.75, (0.4, 0.6)).as_list() == [0.5, 0.25, 0.75, [0.4, 0.6]]
    assert verdicts.Interval(0.5, 0.25, 0.75).as_list() == [0.5, 0.25, 0.75]


# The three outcomes (issue 64): reproduced on the paper's side, contradicted on the other, else inside the noise.
def test_outcome_reads_the_interval_against_the_papers_side() -> None:
    above, below, straddles = (verdicts.Interval(0.3, 0.1, 0.5), verdicts.Interval(-0.3, -0.5, -0.1),
                               verdicts.Interval(0.1, -0.1, 0.3))
    assert verdicts.outcome(above) == verdicts.REPRODUCED
    assert verdicts.outcome(below) == verdicts.CONTRADICTED
    assert verdicts.outcome(straddles) == verdicts.INSIDE_NOISE
    assert verdicts.outcome(below, "below") == verdicts.REPRODUCED and verdicts.outcome(above, "below") == verdicts.CONTRADICTED
    # a bar: an ECE of 2.3% [1.9, 2.8] is "at most the paper's 8%" (beating the paper is on its side)
    ece = verdicts.Interval(0.023, 0.019, 0.028)
    assert verdicts.outcome(ece, "below", 0.08) == verdicts.REPRODUCED
    assert verdicts.outcome(ece, "below", 0.015) == verdicts.CONTRADICTED
    assert verdicts.outcome(ece, "below", 0.025) == verdicts.INSIDE_NOISE
    with pytest.raises(ValueError, match="paper_side"):
        verdicts.outcome(above, "over")


def test_the_interval_alone_decides_not_one_seed() -> None:
    """Issue 65: the interval over seeds already holds their spread (the t rule), so one seed just
    across the line no longer makes a tie by itself."""
    one_seed_across = verdicts.Interval(0.3, 0.1, 0.5, seeds=(0.4, 0.5, -0.01))
    assert verdicts.outcome(one_seed_across) == verdicts.REPRODUCED
    assert verdicts.outcome(verdicts.Interval(-0.3, -0.5, -0.1, seeds=(-0.2, -0.4, -0.3))) == verdicts.CONTRADICTED


def test_the_interval_rule_takes_the_wider_of_the_bootstrap_and_the_seeds_t_interval() -> None:
    spread = (0.0, 0.3, 0.6)  # three seeds far apart: t half-width 4.303 * 0.3 / sqrt(3)
    half = 4.303 * 0.3 / np.sqrt(3)
    assert verdicts.seed_t_half_width(spread) == pytest.approx(half, rel=1e-4)
    assert verdicts.widened(0.3, 0.2, 0.4, spread) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert verdicts.widened(0.3, -2.0, 2.0, spread) == (-2.0, 2.0)  # the bootstrap is wider: kept
    assert verdicts.widened(0.3, 0.2, 0.4, ()) == (0.2, 0.4)  # no seeds: the bootstrap
    rng = np.random.default_rng(0)
    parts_a = [generations(tau, 60, rng) for tau in (3.0, 3.6, 4.2)]  # the seeds disagree a lot
    parts_b = [generations(3.3, 60, rng) for _ in range(3)]
    gap = verdicts.tau_difference(parts_a, parts_b, seed=0)
    assert gap.high - gap.low >= 2 * verdicts.seed_t_half_width(gap.seeds) - 1e-12
    assert gap.as_list()[3] == list(gap.seeds) and len(gap.as_list()) == 4
    assert verdicts.Interval(1.0, 0.5, 1.5).as_list() == [1.0, 0.5, 1.5]


def test_a_claim_in_every_domain_needs_every_domain() -> None:
    yes, tie, no = (verdicts.Interval(0.3, 0.1, 0.5), verdicts.Interval(0.1, -0.1, 0.3),
                    verdicts.Interval(-0.3, -0.5, -0.1))
    assert verdicts.outcome_in_every({"math": yes, "code": yes}) == verdicts.REPRODUCED
    assert verdicts.outcome_in_every({"math": yes, "chat": tie}) == verdicts.INSIDE_NOISE
    assert verdicts.outcome_in_every({"math": yes, "chat": tie, "code": no}) == verdicts.CONTRADICTED
    assert verdicts.per_outcome({"math": yes, "chat": tie}) == \
        "math +0.30 [+0.10, +0.50] reproduced; chat +0.10 [-0.10, +0.30] inside the noise"
    with pytest.raises(ValueError, match="at least one"):
        verdicts.outcome_in_every({})


def test_exact_checks_have_two_outcomes_and_take_only_truth_values() -> None:
    assert verdicts.exact(True) == verdicts.REPRODUCED and verdicts.exact(np.bool_(False)) == verdicts.CONTRADICTED
    with pytest.raises(ValueError, match="truth value"):
        verdicts.exact(0.3)


def test_a_window_tests_both_edges_and_combined_joins_outcomes() -> None:
    tau = verdicts.Interval(4.18, 3.82, 4.51)
    assert verdicts.in_window(tau, 4.80, 0.75) == verdicts.INSIDE_NOISE  # reaches below the low edge 4.05
    assert verdicts.in_window(tau, 4.30, 0.75) == verdicts.REPRODUCED
    assert verdicts.in_window(tau, 5.50, 0.75) == verdicts.CONTRADICTED  # wholly below 4.75
    assert verdicts.between(verdicts.Interval(0.70, 0.698, 0.702), 0.69, 0.71) == verdicts.REPRODUCED
    assert verdicts.combined(verdicts.REPRODUCED, verdicts.INSIDE_NOISE) == verdicts.INSIDE_NOISE
    assert verdicts.combined(verdicts.REPRODUCED, verdicts.NOT_TESTABLE) == verdicts.NOT_TESTABLE
    assert verdicts.combined(verdicts.NOT_TESTABLE, verdicts.CONTRADICTED) == verdicts.CONTRADICTED
    with pytest.raises(ValueError, match="outcomes"):
        verdicts.combined("not reproduced")
    assert tau.plain() == "4.18 [3.82, 4.51]"
    assert verdicts.versus_paper(True) == "as in the paper"
    assert verdicts.versus_paper(False, "chat") == "unlike the paper, where it is chat"


def test_the_t_interval_over_seeds_matches_scipy_and_one_seed_calls_nothing() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    values = [3.6, 2.9, 3.1]
    found = verdicts.t_interval(values)
    low, high = scipy_stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=scipy_stats.sem(values))
    assert found.estimate == pytest.approx(np.mean(values)) and found.seeds == tuple(values)
    assert (found.low, found.high) == (pytest.approx(low, abs=1e-3), pytest.approx(high, abs=1e-3))
    assert verdicts.t_interval(values, seeds=False).seeds == ()
    one = verdicts.t_interval([0.4, float("nan")])
    assert one.low == -np.inf and one.high == np.inf and verdicts.outcome(one) == verdicts.INSIDE_NOISE
    with pytest.raises(ValueError, match="at least one"):
        verdicts.t_interval([float("nan")])


def test_tau_interval_is_tau_with_its_bootstrap() -> None:
    rng = np.random.default_rng(0)
    parts = [generations(3.0, 40, rng) for _ in range(3)]
    found = verdicts.tau_interval(parts, seed=1)
    assert found.estimate == pytest.approx(verdicts.pooled_tau(parts))
    assert found.low < found.estimate < found.high and len(found.seeds) == 3
    gap = verdicts.tau_difference(parts, np.ones_like(np.asarray(parts, dtype=float)), seed=1)  # tau minus 1
    assert (found.low, found.high) == (pytest.approx(gap.low + 1), pytest.approx(gap.high + 1))


def test_two_seeds_describe_and_call_nothing() -> None:
    two = verdicts.Interval(-0.9, -1.37, -0.57, seeds=(-0.85, -0.95))
    assert verdicts.outcome(two) == verdicts.NOT_TESTABLE
    assert verdicts.outcome_in_every({"math": two, "code": verdicts.Interval(0.3, 0.1, 0.5)}) == verdicts.NOT_TESTABLE
    assert verdicts.outcome(verdicts.Interval(-0.9, -1.37, -0.57, seeds=(-0.85, -0.95, -0.9))) == verdicts.CONTRADICTED
