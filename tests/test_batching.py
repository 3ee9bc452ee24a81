"""Tests for dspark_lite.harness.serving.batching (chapter 06b): batched verification, padded and packed into a
varlen kernel, equals one-request verification, and real batched steps are timed, on a tiny
random Qwen3 target."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from dspark_lite.harness.serving.batching import (PACKED_ATTENTION, PackedBatch, batched_verify,
                                                  batched_verify_logits, pack_layout, packed_model,
                                                  packed_verify_logits, profile_varlen_step_curves,
                                                  real_step_throughput, saved_or_profiled_step_curves,
                                                  time_batched_step, time_packed_step)
from dspark_lite.harness.serving.costs import step_curves_file
from dspark_lite.runtime import model_device
from dspark_lite.stepcurve import StepCurve
from dspark_lite.record import Rounds, logit
from dspark_lite.baselines import autoregressive_generate
from dspark_lite.speculative import Draft, verify_block
from test_drafters import VOCAB, tiny_target

pytestmark = pytest.mark.usefixtures("one_thread")

FLAT = StepCurve((1, 4096), (1.0, 1.0), {"kind": "flat"})


@pytest.fixture(scope="module")
def target():
    return tiny_target()


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


def test_batched_verification_rejects_bad_batches(target):
    with pytest.raises(ValueError, match="one draft per context"):
        batched_verify(target, contexts_of([3, 4]), [greedy_draft(torch.tensor([1]))], 0.0, None)
    with pytest.raises(ValueError, match=r"drafts\[0\].tokens holds ids outside"):
        batched_verify(target, contexts_of([3]), [Draft(torch.tensor([VOCAB]), torch.ones(1, VOCAB) / VOCAB)], 0.0, None)
    with pytest.raises(ValueError, match="non-empty 1-D tensor"):
        batched_verify(target, [torch.empty(0, dtype=torch.long)], [greedy_draft(torch.tensor([1]))], 0.0, None)


def test_time_batched_step_times_a_real_forward(target):
    seconds = time_batched_step(target, 3, [0, 4, 2], context_len=10, repeats=2, warmup=1)
    assert np.isfinite(seconds) and seconds > 0  # a time, not a bound on it (that would flake on a busy machine)
    with pytest.raises(ValueError, match="lengths must be R = 3 integers"):
        time_batched_step(target, 3, [1, 2], context_len=10, repeats=1)


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
    packed_seconds = time_packed_step(batch, [0, 4, 2], repeats=2, warmup=1)
    assert np.isfinite(packed_seconds) and packed_seconds > 0
    assert batch.cache.get_seq_length() == 30
    with pytest.raises(ValueError, match="lengths must be R = 3 integers"):
        time_packed_step(batch, [1, 2], repeats=1)


# ----------------------------------------------------------------------------- real batched steps


def test_real_step_throughput_credits_record_tokens_and_times_both_kernels(target):
    records = Rounds.of(np.full(4, 3), [3, 3, 1, 1], logit(np.full((4, 3), 0.9)), domain=["math", "math", "chat", "chat"])
    table = real_step_throughput(target, records, ["fixed", "mtp1"], FLAT, [1, 3], steps=2, context_len=8, repeats=1)
    assert table[["R", "scheduler"]].values.tolist() == [[1, "fixed"], [1, "mtp1"], [3, "fixed"], [3, "mtp1"]]
    assert (table.drop(columns=["R", "scheduler"]) > 0).all().all()
    # On the flat table a step takes 1 s: predicted tokens/s = tokens per step. MTP-1 always gets 2 per request.
    assert table.loc[table["scheduler"] == "mtp1", "predicted (table)"].tolist() == [2.0, 6.0]
    fixed = table.loc[table["scheduler"] == "fixed", "predicted (table)"]
    assert ((fixed >= 2 * table["R"].unique()) & (fixed <= 4 * table["R"].unique())).all()


def test_varlen_profile_gives_one_table_per_concurrency(target):
    curves = profile_varlen_step_curves(target, [4, 1, 4], gamma=3, points=3, context_len=8, repeats=2, seed=0)
    assert sorted(curves) == [1, 4]
    assert curves[4].sizes == (4, 10, 16) and curves[1].sizes == (1, 2, 4)  # B from R to R(gamma + 1)
    meta = curves[4].meta
    assert meta["kernel"] == "varlen (packed)" and meta["requests"] == 4 and meta["repeats"] == 2
    assert len(meta["seconds_per_step"]) == 3 and min(meta["seconds_per_step"]) > 0
    with pytest.raises(ValueError, match="concurrencies is empty"):
        profile_varlen_step_curves(target, [], gamma=3, points=3, context_len=8, repeats=1)
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        profile_varlen_step_curves(target, [2], gamma=3, points=3, context_len=8, repeats=0)


def test_a_saved_table_serves_the_next_notebook_only_with_the_same_settings(target, tmp_path, monkeypatch):
    """The first call profiles and saves; the same settings read that table back (a chapter's and its
    studies' one table, in the run's results folder); any other setting, or a damaged file, profiles
    afresh and saves over it."""
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path))  # the run's results folder
    path = step_curves_file(model_device(target))
    assert path == tmp_path / "tables" / "step_curves_cpu.json"
    settings = dict(concurrencies=[1, 4], gamma=3, points=3, context_len=8, repeats=1, seed=0)
    first, read = saved_or_profiled_step_curves(target, path=path, **settings)
    assert not read and path.is_file()
    again, read = saved_or_profiled_step_curves(target, path=path, **settings)
    assert read and again == first  # the very table, timings and all
    for change in ({"gamma": 2}, {"points": 4}, {"context_len": 9}, {"repeats": 2}, {"seed": 1},
                   {"concurrencies": [1, 2]}):
        other, read = saved_or_profiled_step_curves(target, path=path, **{**settings, **change})
        assert not read, change
        assert saved_or_profiled_step_curves(target, path=path, **{**settings, **change})[1], change
    path.write_text("{not json")
    assert not saved_or_profiled_step_curves(target, path=path, **settings)[1]
