"""Tests for dspark_lite.serving (chapter 06): the measured step curve, batched verification
and the serving simulator, on a tiny random Qwen3 target and synthetic block records."""
from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import DynamicCache

from dspark_lite.scheduler import StepCurve, global_search, static_threshold
from dspark_lite.serving import (
    PACKED_ATTENTION, BlockRecords, PackedBatch, batched_verify, batched_verify_logits, load_step_curve,
    ordering_agreement, pack_layout, packed_model, packed_verify_logits, profile_step_curve, real_step_throughput,
    replayed_sweep, resolve_scheduler, sample_block_records, save_step_curve, simulate, sla_gain, spread_tokens, sweep,
    time_batched_step, time_packed_step, versus_best_baseline,
)
from dspark_lite.speculative import Draft, RoundRecord, autoregressive_generate, verify_block
from test_drafters import VOCAB, tiny_target

pytestmark = pytest.mark.usefixtures("one_thread")

BASELINES = ("fixed", "mtp1", "threshold", "async")
FLAT = StepCurve((1, 4096), (1.0, 1.0), {"kind": "flat"})


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def random_records(seed: int, n: int = 400, gamma: int = 5, low: float = 0.05, high: float = 1.0) -> BlockRecords:
    """Calibrated synthetic records in two domains with different confidence levels."""
    rng = np.random.default_rng(seed)
    confidences = rng.uniform(low, high, (n, gamma))
    confidences[: n // 2] = np.sqrt(confidences[: n // 2])  # "math" blocks are more confident
    domains = np.where(np.arange(n) < n // 2, "math", "chat")
    return sample_block_records(confidences, domains, rng)


# ----------------------------------------------------------------------------- cost profile


def test_spread_tokens_is_as_even_as_possible():
    assert spread_tokens(10, 4) == [3, 3, 2, 2]
    assert spread_tokens(3, 8) == [1, 1, 1]
    assert spread_tokens(16, 4) == [4, 4, 4, 4]


def test_profiler_measures_a_valid_curve_and_round_trips_through_json(target, tmp_path):
    curve = profile_step_curve(target, [8, 1, 2, 4], requests=4, context_len=12, repeats=2, warmup=1)
    assert curve.sizes == (1, 2, 4, 8)
    assert all(s > 0 for s in curve.steps_per_second)
    meta = curve.meta
    assert meta["kind"] == "measured" and meta["device"] == "cpu" and meta["torch"] == torch.__version__
    assert (meta["context_len"], meta["requests"], meta["repeats"]) == (12, 4, 2)
    assert meta["dtype"] == "float32" and meta["cpu"]
    path = save_step_curve(curve, tmp_path / "curves" / "tiny.json")
    again = load_step_curve(path)
    assert again == curve and again.meta == json.loads(json.dumps(curve.meta))


def test_profiler_and_loader_reject_bad_input(target, tmp_path):
    with pytest.raises(ValueError, match="requests must be an integer >= 1"):
        profile_step_curve(target, [1, 2], requests=0, context_len=8, repeats=1)
    with pytest.raises(ValueError, match="each batch size must be an integer >= 1"):
        profile_step_curve(target, [0, 2], requests=2, context_len=8, repeats=1)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        profile_step_curve(target, [2], requests=1, context_len=255, repeats=1)
    with pytest.raises(FileNotFoundError, match="no step curve at"):
        load_step_curve(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_step_curve(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        load_step_curve(tmp_path / "list.json")
    (tmp_path / "keys.json").write_text('{"sizes": [1, 2]}')
    with pytest.raises(ValueError, match="not a valid step curve.*steps_per_second"):
        load_step_curve(tmp_path / "keys.json")
    (tmp_path / "rates.json").write_text('{"sizes": [1, 2], "steps_per_second": [1.0, -1.0]}')
    with pytest.raises(ValueError, match="positive and finite"):
        load_step_curve(tmp_path / "rates.json")


def test_time_batched_step_times_a_real_forward(target):
    seconds = time_batched_step(target, 3, [0, 4, 2], context_len=10, repeats=2, warmup=1)
    assert 0 < seconds < 5
    with pytest.raises(ValueError, match="lengths must be R = 3 integers"):
        time_batched_step(target, 3, [1, 2], context_len=10, repeats=1)


# ----------------------------------------------------------------------------- batched verification


def contexts_of(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=generator) for n in lengths]


def unbatched_logits(target, context, draft):
    """One request alone, as the speculative loop does it: prefill, then anchor + drafts."""
    cache = DynamicCache(config=target.config)
    with torch.inference_mode():
        if context.numel() > 1:
            target(input_ids=context[None, :-1], cache=cache, use_cache=True)
        block = torch.cat([context[-1:], draft.tokens])
        return target(input_ids=block[None], cache=cache, use_cache=True).logits[0]


def greedy_draft(tokens):
    return Draft(tokens, torch.nn.functional.one_hot(tokens, VOCAB).float())


def test_batched_greedy_verification_equals_one_request_verification(target):
    contexts = contexts_of([1, 7, 4, 10])
    plans = [(0, None), (3, None), (2, 0), (4, 2)]  # (drafted tokens, position corrupted)
    drafts = []
    for context, (length, wrong) in zip(contexts, plans):
        tokens = autoregressive_generate(target, context, max(length, 1), 0.0, None)[:length].clone()
        if wrong is not None:
            tokens[wrong] = (tokens[wrong] + 1) % VOCAB
        drafts.append(greedy_draft(tokens))
    batched = batched_verify(target, contexts, drafts, 0.0, None)
    alone = [verify_block(unbatched_logits(target, c, d), d, 0.0, None) for c, d in zip(contexts, drafts)]
    assert batched == alone
    assert [n for n, _ in batched] == [0, 3, 0, 2]


def test_batched_logits_match_and_sampled_verification_agrees(target):
    contexts = contexts_of([5, 1, 9, 3, 6], seed=1)
    generator = torch.Generator().manual_seed(2)
    drafts = []
    for length in [2, 0, 4, 1, 3]:
        probs = torch.softmax(torch.randn(length, VOCAB, generator=generator) * 0.5, dim=-1)
        tokens = torch.multinomial(probs, 1, generator=generator).reshape(length) if length else \
            torch.empty(0, dtype=torch.long)
        drafts.append(Draft(tokens, probs))
    batched_logits = batched_verify_logits(target, contexts, drafts)
    alone_logits = [unbatched_logits(target, c, d) for c, d in zip(contexts, drafts)]
    for b, a, d in zip(batched_logits, alone_logits, drafts):
        assert b.shape == a.shape == (1 + d.gamma, VOCAB)
        torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
    for seed in range(5):
        batched = batched_verify(target, contexts, drafts, 1.0, torch.Generator().manual_seed(seed))
        replay = torch.Generator().manual_seed(seed)
        alone = [verify_block(logits, d, 1.0, replay) for logits, d in zip(alone_logits, drafts)]
        assert [n for n, _ in batched] == [n for n, _ in alone]


# ----------------------------------------------------------------------------- packed (varlen) verification


@pytest.fixture(scope="module")
def packed(target):
    return packed_model(target)


def test_pack_layout_on_a_hand_made_batch():
    # Request 0: 2 cached tokens (cache columns 0, 1), 2 new; request 1: 1 cached (column 2), 1 new.
    # The packed row of new tokens starts after the 3 cached ones: request 0's at 3, 4; request 1's at 5.
    layout = pack_layout([2, 1], [2, 1])
    assert layout.q_at.tolist() == [[0, 1], [2, 0]] and layout.valid.tolist() == [[True, True], [True, False]]
    assert layout.k_at.tolist() == [[0, 1, 3, 4], [2, 5, 5, 5]]
    assert layout.mask[:, 0].tolist() == [
        [[True, True, True, False], [True, True, True, True]],    # causal over its own 2 + 2 keys
        [[True, True, False, False], [True, False, False, False]],  # 1 + 1 keys; the pad query sees key 0
    ]
    with pytest.raises(ValueError, match="equally long lists"):
        pack_layout([1, 2], [0])


def test_packed_logits_equal_one_request_logits(target, packed):
    contexts = contexts_of([5, 1, 9, 3, 6], seed=1)  # prefixes of 4, 0, 8, 2, 5 tokens
    generator = torch.Generator().manual_seed(3)
    drafts = [greedy_draft(torch.randint(0, VOCAB, (n,), generator=generator)) for n in [2, 0, 4, 1, 3]]
    varlen = packed_verify_logits(packed, contexts, drafts)
    for logits, context, draft in zip(varlen, contexts, drafts):
        assert logits.shape == (1 + draft.gamma, VOCAB)
        torch.testing.assert_close(logits, unbatched_logits(target, context, draft), atol=1e-4, rtol=0)
    # Every request with no cached prefix at all (contexts of the anchor only), and with no drafts.
    anchors = contexts_of([1, 1, 1], seed=4)
    lone = [greedy_draft(torch.tensor(tokens, dtype=torch.long)) for tokens in ([3, 1], [], [2])]
    for logits, context, draft in zip(packed_verify_logits(packed, anchors, lone), anchors, lone):
        torch.testing.assert_close(logits, unbatched_logits(target, context, draft), atol=1e-4, rtol=0)


def test_a_packed_batch_serves_many_forwards_and_needs_the_packed_model(target, packed):
    assert getattr(target.config, "_attn_implementation") != PACKED_ATTENTION  # the target is left alone
    prefixes = contexts_of([3, 0, 7], seed=5)
    batch = PackedBatch.prefill(packed, prefixes)
    blocks = [torch.tensor([1, 2]), torch.tensor([4]), torch.tensor([5, 6, 7])]
    first, again = batch.forward(blocks), batch.forward(blocks, batch.layout([2, 1, 3]))
    for x, y, prefix, block in zip(first, again, prefixes, blocks):
        torch.testing.assert_close(x, y, atol=0, rtol=0)
        with torch.inference_mode():
            alone = target(input_ids=torch.cat([prefix, block])[None]).logits[0, -block.numel():]
        torch.testing.assert_close(x, alone, atol=1e-4, rtol=0)
    assert batch.lens == [3, 0, 7] and batch.cache.get_seq_length() == 10
    with pytest.raises(ValueError, match=r"must use the packed attention kernel.*packed_model\(target\)"):
        PackedBatch.prefill(target, prefixes)
    with pytest.raises(ValueError, match="one block per request"):
        batch.forward(blocks[:2])


def test_time_packed_step_times_a_real_forward(packed):
    batch = PackedBatch.prefill(packed, contexts_of([10, 10, 10], seed=6))
    assert 0 < time_packed_step(batch, [0, 4, 2], repeats=2, warmup=1) < 5
    assert batch.cache.get_seq_length() == 30
    with pytest.raises(ValueError, match="lengths must be R = 3 integers"):
        time_packed_step(batch, [1, 2], repeats=1)


def test_real_step_throughput_credits_record_tokens_and_times_both_kernels(target):
    records = BlockRecords(np.full((4, 3), 0.9), np.array([3, 3, 1, 1]), ["math", "math", "chat", "chat"])
    table = real_step_throughput(target, records, ["fixed", "mtp1"], FLAT, [1, 3], steps=2, context_len=8, repeats=1)
    assert table[["R", "scheduler"]].values.tolist() == [[1, "fixed"], [1, "mtp1"], [3, "fixed"], [3, "mtp1"]]
    assert (table.drop(columns=["R", "scheduler"]) > 0).all().all()
    # On the flat table a step takes 1 s: predicted tokens/s = tokens per step. MTP-1 always gets 2 per request.
    assert table.loc[table["scheduler"] == "mtp1", "predicted (table)"].tolist() == [2.0, 6.0]
    fixed = table.loc[table["scheduler"] == "fixed", "predicted (table)"]
    assert ((fixed >= 2 * table["R"].unique()) & (fixed <= 4 * table["R"].unique())).all()


def test_batched_verification_rejects_bad_batches(target):
    with pytest.raises(ValueError, match="one draft per context"):
        batched_verify(target, contexts_of([3, 4]), [greedy_draft(torch.tensor([1]))], 0.0, None)
    with pytest.raises(ValueError, match=r"drafts\[0\].tokens holds ids outside"):
        batched_verify(target, contexts_of([3]), [Draft(torch.tensor([VOCAB]), torch.ones(1, VOCAB) / VOCAB)], 0.0, None)
    with pytest.raises(ValueError, match="non-empty 1-D tensor"):
        batched_verify(target, [torch.empty(0, dtype=torch.long)], [greedy_draft(torch.tensor([1]))], 0.0, None)


# ----------------------------------------------------------------------------- simulator


def test_certain_blocks_give_fixed_gamma_plus_one_and_mtp1_two():
    gamma, R = 4, 8
    records = BlockRecords(np.ones((5, gamma)), np.full(5, gamma), "chat")
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
    assert budgets[0] == records.gamma and budgets[-1] < 1


def test_async_takes_its_capacity_from_two_steps_earlier():
    one_block = np.array([[0.9, 0.8, 0.6, 0.3]])
    records = BlockRecords(np.repeat(one_block, 3, axis=0), np.array([4, 2, 1]), "code")
    curve = StepCurve.analytic(256, knee=12)
    # The same confidences every step: the stale capacity is the global search's.
    async_run = simulate(records, "async", curve, 6, 10, rng=np.random.default_rng(0))
    global_run = simulate(records, global_search, curve, 6, 10, rng=np.random.default_rng(0))
    assert async_run.mean_budget == global_run.mean_budget and async_run.tokens == global_run.tokens
    assert global_run.scheduler == "global_search" and async_run.scheduler == "async"


def test_simulator_is_fast_at_high_concurrency():
    records, curve = random_records(0, n=2000, gamma=7), StepCurve.analytic(4096, knee=64)
    for name in ("dspark", "async"):
        start = time.perf_counter()
        simulate(records, name, curve, 256, 300, rng=np.random.default_rng(0))
        assert time.perf_counter() - start < 2.0, name


def test_sweep_and_sla_gain():
    records, curve = random_records(1), StepCurve.analytic(512, knee=16)
    df = sweep(records, ["dspark", "mtp1", "threshold:0.7"], curve, [1, 4, 16, 64], 40, {"math": 1, "chat": 2}, seed=0)
    assert len(df) == 12 and set(df["scheduler"]) == {"dspark", "mtp1", "threshold:0.7"}
    assert np.allclose(df["per_user"], df["throughput"] / df["R"])
    table = sla_gain(df, baseline="mtp1", per_user_slas=(0.5, 1.5))
    for _, row in table.iterrows():
        meets = df[df["per_user"] >= row["per_user_sla"]]
        best = meets.groupby("scheduler")["throughput"].max()
        assert row["dspark"] == pytest.approx(best["dspark"])
        assert row["gain_pct"] == pytest.approx(100 * (best["dspark"] / best["mtp1"] - 1))
    assert len(sla_gain(df)) == 4  # default: the baseline's own operating points
    with pytest.raises(ValueError, match="scheduler 'eagle' not in df"):
        sla_gain(df, baseline="eagle")


def test_cumulative_threshold_is_a_named_scheduler():
    c = np.array([[0.9, 0.6, 0.9], [0.4, 0.9, 0.9]])  # a = (0.9, 0.54, 0.486), (0.4, ...)
    for name, cumulative, threshold in [("threshold-cumulative", True, 0.5), ("threshold-cumulative:0.8", True, 0.8),
                                        ("threshold", False, 0.5)]:
        resolved, choose = resolve_scheduler(name)
        assert resolved == name
        np.testing.assert_array_equal(choose(c, c, FLAT), static_threshold(threshold, cumulative)(c, FLAT))
    assert resolve_scheduler("threshold-cumulative")[1](c, c, FLAT).tolist() == [2, 0]
    assert resolve_scheduler("threshold")[1](c, c, FLAT).tolist() == [3, 0]


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


def test_records_from_rounds_keep_full_blocks_with_confidences():
    full = RoundRecord(3, 2, torch.tensor([0.9, 0.8, 0.4]))
    rounds = {"math": [full, RoundRecord(1, 1, torch.tensor([0.7])), RoundRecord(3, 0, None)],
              "chat": [RoundRecord(3, 3, torch.tensor([0.6, 0.6, 0.5]))]}
    records = BlockRecords.from_rounds(rounds, gamma=3)
    assert len(records) == 2 and records.gamma == 3 and records.counts() == {"chat": 1, "math": 1}
    assert records.n_accepted.tolist() == [2, 3] and np.allclose(records.confidences[0], [0.9, 0.8, 0.4])
    with pytest.raises(ValueError, match="no round proposed a full block of gamma = 4"):
        BlockRecords.from_rounds(rounds, gamma=4)


def test_bad_records_are_refused_with_clear_messages():
    ones = np.full((3, 2), 0.5)
    for bad in (0.0, 1.5, np.nan):
        c = ones.copy()
        c[1, 1] = bad
        with pytest.raises(ValueError, match=r"confidences must (lie in \(0, 1\]|be finite)"):
            BlockRecords(c, [0, 1, 2], "chat")
    with pytest.raises(ValueError, match="n_accepted must lie in 0..gamma = 0..2"):
        BlockRecords(ones, [0, 3, 1], "chat")
    with pytest.raises(ValueError, match="n_accepted must lie in 0..gamma"):
        BlockRecords(ones, [0, -1, 1], "chat")
    with pytest.raises(ValueError, match=r"n_accepted must have one entry per block, shape \(3,\)"):
        BlockRecords(ones, [0, 1], "chat")
    with pytest.raises(ValueError, match=r"domains must have one label per block, shape \(3,\)"):
        BlockRecords(ones, [0, 1, 2], ["chat", "math"])


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
    with pytest.raises(ValueError, match="must return 4 integers in"):
        simulate(records, lambda c, curve: np.full(4, 9), FLAT, 4, 10)
