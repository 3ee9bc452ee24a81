"""Tests for dspark_lite.harness.serving.simulator (chapter 06b): the serving simulator, on synthetic block
records and analytic step curves."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dspark_lite.scheduler import global_search, static_threshold
from dspark_lite.stepcurve import StepCurve
from dspark_lite.harness.serving.simulator import (ordering_agreement, replayed_sweep, resolve_scheduler,
                                                   sample_block_records, simulate, sla_gain, lead_with_noise,
                                                   sweep, versus_best_baseline)
from dspark_lite.record import Rounds, logit

pytestmark = pytest.mark.usefixtures("one_thread")

BASELINES = ("fixed", "mtp1", "threshold", "async")
FLAT = StepCurve((1, 4096), (1.0, 1.0), {"kind": "flat"})


def blocks(confidences, accepted, domain) -> Rounds:
    """Full blocks of the given confidences c[N, gamma] (recorded as logits) and accepted counts."""
    c = np.asarray(confidences, dtype=float)
    return Rounds.of(np.full(c.shape[0], c.shape[1]), accepted, logit(c), domain=domain)


def random_records(seed: int, n: int = 400, gamma: int = 5, low: float = 0.05, high: float = 1.0) -> Rounds:
    """Calibrated synthetic records in two domains with different confidence levels."""
    rng = np.random.default_rng(seed)
    confidences = rng.uniform(low, high, (n, gamma))
    confidences[: n // 2] = np.sqrt(confidences[: n // 2])  # "math" blocks are more confident
    domains = np.where(np.arange(n) < n // 2, "math", "chat")
    return sample_block_records(confidences, domains, rng)


def test_certain_blocks_give_fixed_gamma_plus_one_and_mtp1_two():
    gamma, R = 4, 8
    records = blocks(np.ones((5, gamma)), np.full(5, gamma), "chat")  # c = 1: logits +inf
    fixed = simulate(records, "fixed", FLAT, R, 20, rng=np.random.default_rng(0))
    assert fixed.tokens_per_step == gamma + 1 and fixed.batch_per_request == gamma + 1
    assert fixed.mean_budget == gamma and fixed.tokens == 20 * R * (gamma + 1)
    assert fixed.throughput == pytest.approx(R * (gamma + 1)) and fixed.per_user == pytest.approx(gamma + 1)
    assert simulate(records, "mtp1", FLAT, R, 20, rng=np.random.default_rng(0)).tokens_per_step == 2
    assert simulate(random_records(0), "mtp1", FLAT, R, 50, rng=np.random.default_rng(0)).tokens_per_step <= 2


@pytest.mark.parametrize("seed", range(4))
def test_dspark_never_loses_on_a_flat_curve(seed):
    records = random_records(seed)
    for R in (1, 8, 32):
        results = {name: simulate(records, name, FLAT, R, 60, rng=np.random.default_rng([seed, R]))
                   for name in ("dspark",) + BASELINES}
        for name in BASELINES:
            assert results["dspark"].throughput >= results[name].throughput * (1 - 1e-12), (R, name)
            assert results["dspark"].expected_throughput >= results[name].expected_throughput * (1 - 1e-12)


def test_dspark_budget_shrinks_as_concurrency_grows_past_the_knee():
    records = random_records(3, low=0.7, high=0.95)
    curve = StepCurve.analytic(2048, knee=64)
    budgets = [simulate(records, "dspark", curve, R, 100, rng=np.random.default_rng(R)).mean_budget
               for R in (1, 4, 16, 64, 256)]
    assert all(later <= earlier for earlier, later in zip(budgets, budgets[1:])), budgets
    assert budgets[0] == records.width and budgets[-1] < 1


def test_async_takes_its_capacity_from_two_steps_earlier():
    one_block = np.array([[0.9, 0.8, 0.6, 0.3]])
    records = blocks(np.repeat(one_block, 3, axis=0), np.array([4, 2, 1]), "code")
    curve = StepCurve.analytic(256, knee=12)
    # The same confidences every step: the stale capacity is the global search's.
    async_run = simulate(records, "async", curve, 6, 10, rng=np.random.default_rng(0))
    global_run = simulate(records, global_search, curve, 6, 10, rng=np.random.default_rng(0))
    assert async_run.mean_budget == global_run.mean_budget and async_run.tokens == global_run.tokens
    assert global_run.scheduler == "global_search" and async_run.scheduler == "async"


def test_sweep_and_sla_gain():
    records, curve = random_records(1), StepCurve.analytic(512, knee=16)
    df = sweep(records, ["dspark", "mtp1", "threshold:0.7"], curve, [1, 4, 16, 64], 40, {"math": 1, "chat": 2}, seed=0)
    assert len(df) == 12 and set(df["scheduler"]) == {"dspark", "mtp1", "threshold:0.7"}
    assert np.allclose(df["per_user"], df["throughput"] / df["R"])
    table = sla_gain(df, baseline="mtp1", per_user_slas=(0.5, 1.5), tolerance=0.0)
    for _, row in table.iterrows():
        meets = df[df["per_user"] >= row["per_user_sla"]]
        best = meets.groupby("scheduler")["throughput"].max()
        assert row["dspark"] == pytest.approx(best["dspark"])
        assert row["gain_pct"] == pytest.approx(100 * (best["dspark"] / best["mtp1"] - 1))
    assert len(sla_gain(df)) == 4  # default: the baseline's own operating points
    speeds = df[df["scheduler"] == "mtp1"].sort_values("per_user")["per_user"].to_numpy()
    just_above = speeds[1] * 1.005  # within 1% of the second slowest point, which misses it exactly
    loose, strict = sla_gain(df, per_user_slas=[just_above]), sla_gain(df, per_user_slas=[just_above], tolerance=0.0)
    best_at = lambda speed: df[(df["scheduler"] == "mtp1") & (df["per_user"] >= speed)]["throughput"].max()
    assert loose["mtp1"].iloc[0] == pytest.approx(best_at(speeds[1]))
    assert strict["mtp1"].iloc[0] == pytest.approx(best_at(just_above))
    with pytest.raises(ValueError, match="tolerance is a relative slack"):
        sla_gain(df, tolerance=1.0)
    with pytest.raises(ValueError, match="scheduler 'eagle' not in df"):
        sla_gain(df, baseline="eagle")


def test_sweep_reads_each_concurrencys_own_table():
    records = random_records(1)
    flat, steep = StepCurve.analytic(512, knee=512), StepCurve.analytic(512, knee=1, slope=2.0)
    df = sweep(records, ["dspark"], {4: flat, 16: steep}, [4, 16], 40, seed=0).set_index("R")
    alone = {R: sweep(records, ["dspark"], curve, [R], 40, seed=0).iloc[0] for R, curve in ((4, flat), (16, steep))}
    for R in (4, 16):
        assert df.loc[R, "throughput"] == pytest.approx(alone[R]["throughput"])
    with pytest.raises(ValueError, match="no step curve was profiled for R = 8"):
        sweep(records, ["dspark"], {4: flat}, [8], 5)


def test_cumulative_threshold_is_a_named_scheduler():
    c = np.array([[0.9, 0.6, 0.9], [0.4, 0.9, 0.9]])  # a = (0.9, 0.54, 0.486), (0.4, ...)
    for name, cumulative, threshold in [("threshold-cumulative", True, 0.5), ("threshold-cumulative:0.8", True, 0.8),
                                        ("threshold", False, 0.5)]:
        resolved, choose = resolve_scheduler(name)
        assert resolved == name
        np.testing.assert_array_equal(choose(c, FLAT, c), static_threshold(threshold, cumulative)(c, FLAT))
    assert resolve_scheduler("threshold-cumulative")[1](c, FLAT, c).tolist() == [2, 0]
    assert resolve_scheduler("threshold")[1](c, FLAT, c).tolist() == [3, 0]


def test_replayed_sweep_aggregates_independent_replays():
    records, curve = random_records(2), StepCurve.analytic(256, knee=16)
    agg, runs = replayed_sweep(records, ["dspark", "mtp1"], curve, [2, 8], 20, replays=3, seed=1)
    assert len(runs) == 12 and sorted(runs["replay"].unique()) == [0, 1, 2]
    first = sweep(records, ["dspark", "mtp1"], curve, [2, 8], 20, seed=3)  # replay 0 uses seed 1 * 3 + 0
    assert np.allclose(runs[runs["replay"] == 0]["throughput"].to_numpy(), first["throughput"].to_numpy())
    row = agg[(agg["scheduler"] == "dspark") & (agg["R"] == 8)].iloc[0]
    mine = runs[(runs["scheduler"] == "dspark") & (runs["R"] == 8)]
    assert row["throughput"] == pytest.approx(mine["tokens"].sum() / mine["seconds"].sum())
    assert row["per_user"] == pytest.approx(row["throughput"] / 8)
    assert row["budget"] == pytest.approx(mine["batch_per_request"].mean())
    assert row["budget_se"] == pytest.approx(mine["batch_per_request"].std(ddof=1) / np.sqrt(3))
    assert (agg.loc[agg["scheduler"] == "mtp1", "budget"] == 2).all()



def test_per_replay_sets_each_replays_throughput_side_by_side():
    from dspark_lite.harness.serving.simulator import per_replay

    records, curve = random_records(2), StepCurve.analytic(256, knee=16)
    _, runs = replayed_sweep(records, ["dspark", "mtp1"], curve, [2, 8], 20, replays=3, seed=1)
    table = per_replay(runs, 8)
    assert list(table.index) == [0, 1, 2] and sorted(table.columns) == ["dspark", "mtp1"]
    mine = runs[(runs["R"] == 8) & (runs["scheduler"] == "mtp1")].sort_values("replay")
    assert np.allclose(table["mtp1"].to_numpy(), mine["throughput"].to_numpy())
    with pytest.raises(ValueError, match="no run at R = 3"):
        per_replay(runs, 3)
    with pytest.raises(ValueError, match="columns"):
        per_replay(runs.drop(columns="replay"), 8)

def test_versus_best_baseline_reads_the_best_baseline_within_noise():
    agg = pd.DataFrame({"scheduler": ["dspark", "fixed", "mtp1"] * 2, "R": [1, 1, 1, 4, 4, 4],
                        "throughput": [10.0, 9.0, 5.0, 9.95, 10.0, 6.0]})
    runs = pd.DataFrame({"scheduler": ["dspark", "fixed", "mtp1"] * 4, "R": [1] * 6 + [4] * 6,
                         "replay": [0, 0, 0, 1, 1, 1] * 2,
                         "throughput": [10, 9, 5, 10, 9, 5, 9, 10, 6, 10.9, 10, 6.0]})
    table = versus_best_baseline(agg, runs, ["fixed", "mtp1"])
    assert table["best baseline"].tolist() == ["fixed", "fixed"]
    assert table.loc[1, "gain %"] == pytest.approx(100 / 9) and table.loc[1, "noise %"] == 0
    # At R = 4 the per-replay differences are -1 and +0.9: noise 2 * std / sqrt(2) = 1.9.
    assert table.loc[4, "noise %"] == pytest.approx(100 * 2 * np.std([-1, 0.9], ddof=1) / np.sqrt(2) / 10)
    assert table["at least the best, within noise"].all()
    # One replay: no noise estimate, so only the 1% margin separates 9.95 from 10; without it, DSpark is short.
    one = runs[runs["replay"] == 0]
    assert versus_best_baseline(agg, one, ["fixed", "mtp1"]).loc[4, "at least the best, within noise"]
    strict = versus_best_baseline(agg, one, ["fixed", "mtp1"], min_margin=0.0)
    assert not strict.loc[4, "at least the best, within noise"]


def test_lead_with_noise_calls_a_tie_only_inside_the_replays_noise():
    """Chapter 06b's closest baseline: a lead inside two standard errors of the paired per-replay
    difference is a tie; outside it, not (no fixed margin)."""
    agg = pd.DataFrame({"scheduler": ["dspark", "fixed"] * 2, "R": [1, 1, 4, 4], "throughput": [10.0, 9.0, 9.95, 10.0]})
    runs = pd.DataFrame({"scheduler": ["dspark", "fixed"] * 4, "R": [1] * 4 + [4] * 4, "replay": [0, 0, 1, 1] * 2,
                         "throughput": [10, 9, 10, 9, 9, 10, 10.9, 10]})
    table = lead_with_noise(agg, runs, "fixed")
    assert table.loc[1, "lead %"] == pytest.approx(100 / 9) and table.loc[1, "noise %"] == 0 and not table.loc[1, "tie"]
    assert table.loc[4, "noise %"] == pytest.approx(100 * 2 * np.std([-1, 0.9], ddof=1) / np.sqrt(2) / 10)
    assert table.loc[4, "tie"]
    assert np.isnan(lead_with_noise(agg, runs[runs["replay"] == 0], "fixed").loc[4, "noise %"])


def test_ordering_agreement_checks_pairs_separated_beyond_the_tie():
    table = pd.DataFrame({"R": [1, 1, 1, 4, 4], "scheduler": ["a", "b", "c", "a", "b"],
                          "predicted": [100.0, 50.0, 95.0, 10.0, 20.0], "real": [90.0, 60.0, 99.0, 12.0, 11.0]})
    rows = ordering_agreement(table, "real", "predicted", tie=0.1)
    # R = 1: a vs b (+100%) and b vs c (-47%) are separated, a vs c (+5%) is a tie; R = 4: a vs b (-50%).
    assert rows["pair"].tolist() == ["a vs b", "b vs c", "a vs b"]
    assert rows["same order"].tolist() == [True, True, False]
    assert rows["predicted %"].iloc[0] == pytest.approx(100)
    assert rows["real %"].iloc[2] == pytest.approx(100 * (12 / 11 - 1))
    assert ordering_agreement(table, "real", "predicted", tie=5.0).empty


def test_bad_simulation_arguments_are_refused():
    records = random_records(0, gamma=4)
    with pytest.raises(ValueError, match=r"concurrency R \(active requests\) must be an integer >= 1; got 0"):
        simulate(records, "dspark", FLAT, 0, 10)
    with pytest.raises(ValueError, match="unknown scheduler 'eagle'"):
        simulate(records, "eagle", FLAT, 4, 10)
    with pytest.raises(ValueError, match="unknown scheduler"):
        resolve_scheduler("dspark:2")
    with pytest.raises(ValueError, match=r"\['code'\] in domain_mix have no records \(empty pool\)"):
        simulate(records, "dspark", FLAT, 4, 10, {"math": 1.0, "code": 1.0})
    with pytest.raises(ValueError, match="weights must be finite"):
        simulate(records, "dspark", FLAT, 4, 10, {"math": -1.0})
    small = StepCurve.analytic(16, knee=8)
    with pytest.raises(ValueError, match="batch of B = 40 tokens .* beyond the step curve's largest profiled size 16"):
        simulate(records, "fixed", small, 8, 10)
    with pytest.raises(ValueError, match="R = 32 requests need batches of at least 32 tokens"):
        simulate(records, "dspark", small, 32, 10)
    with pytest.raises(ValueError, match="gamma = 6 exceeds the records' block of 4"):
        simulate(records, "dspark", FLAT, 4, 10, gamma=6)
    with pytest.raises(ValueError, match="warmup_steps must be an integer >= 0"):
        simulate(records, "dspark", FLAT, 4, 10, warmup_steps=-1)
    with pytest.raises(ValueError, match=r"the lengths of scheduler .* must be 4 integers in"):
        simulate(records, lambda c, curve: np.full(4, 9), FLAT, 4, 10)
