"""Per-slot acceptance on the target's own continuations (evaluation.slot_acceptance): every
anchor of every reply, slot k teacher-forced, 1 - TV against the target given the true prefix;
held against a one-anchor-at-a-time loop, and its interval (verdicts.mean_interval)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dspark_lite.harness.book import verdicts
from dspark_lite.harness.toy import cache, evaluation, zoo
from dspark_lite.harness.toy.world import load_toy_world
from dspark_lite.hidden_drafter import AnchorBatch
from dspark_lite.speculative import select_target_hidden


@pytest.mark.parametrize("kind", ["dflash", "eagle", "dspark-markov"])
def test_slot_acceptance_equals_one_anchor_at_a_time(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    float32_matmuls) -> None:
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    recipe = world.profile.drafter
    drafter = zoo.BUILDERS[kind](world, recipe, 1)
    if kind == "dspark-markov":
        with torch.no_grad():  # a visible head, so that the teacher-forced prefix matters
            drafter.head.w2.weight.normal_(0, 1.0)
    replies = zoo.heldout_replies(world, "chat", recipe)
    got = evaluation.slot_acceptance(drafter, world.target, replies, batch_size=1)
    gamma = drafter.gamma
    assert got.shape == (len(replies), gamma)
    for i, (sequence, prompt_length) in enumerate(zip(replies.sequences, replies.prompt_lengths)):
        with torch.no_grad():
            out = world.target(input_ids=sequence[None], output_hidden_states=True)
            hidden = select_target_hidden(out.hidden_states, recipe.target_layer_ids)
            p_target = torch.softmax(out.logits[0].float(), -1)  # [T, V]: position t predicts t + 1
            sums, counts = np.zeros(gamma), np.zeros(gamma)
            for anchor in range(prompt_length - 1, len(sequence) - 1):
                logits = drafter.train_logits(AnchorBatch(sequence[None], hidden, torch.tensor([[anchor]])))
                logits = logits if isinstance(logits, torch.Tensor) else logits.logits
                for k in range(1, gamma + 1):
                    if anchor + k < len(sequence):
                        p_draft = torch.softmax(logits[0, 0, k - 1].float(), -1)
                        sums[k - 1] += 1 - 0.5 * float((p_draft - p_target[anchor + k - 1]).abs().sum())
                        counts[k - 1] += 1
        expected = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        np.testing.assert_allclose(got[i], expected, atol=2e-5, equal_nan=True)


def test_mean_interval_resamples_units_and_drops_missing_ones() -> None:
    values = [0.1, 0.2, np.nan, 0.3, 0.4]
    interval = verdicts.mean_interval(values)
    assert interval.estimate == pytest.approx(0.25)
    assert 0.1 <= interval.low < 0.25 < interval.high <= 0.4
    assert verdicts.mean_interval([1.0, 1.0, 1.0]).text() == "+1.00 [+1.00, +1.00]"
    with pytest.raises(ValueError, match="at least two"):
        verdicts.mean_interval([np.nan, 0.5])


def test_branch_split_recombines_into_slot_acceptance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      float32_matmuls) -> None:
    """Slot 1 is always clean; a threshold no entropy reaches leaves every slot clean (and equal to
    slot_acceptance); one every choice passes makes every later slot branched; in between, the
    clean and branched means weighted by their shares give back slot_acceptance."""
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    recipe = world.profile.drafter
    drafter = zoo.BUILDERS["dflash"](world, recipe, 1)
    replies = zoo.heldout_replies(world, "chat", recipe)
    whole = evaluation.slot_acceptance(drafter, world.target, replies, batch_size=2)
    never = evaluation.slot_acceptance_split(drafter, world.target, replies, branch_entropy=1e9, batch_size=2)
    np.testing.assert_allclose(never["clean"], whole, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(never["all"], whole, atol=1e-6, equal_nan=True)
    assert np.isnan(never["branched"]).all() and (never["branched_share"][~np.isnan(whole)] == 0).all()
    always = evaluation.slot_acceptance_split(drafter, world.target, replies, branch_entropy=1e-12, batch_size=2)
    assert np.isnan(always["branched"][:, 0]).all() and np.isnan(always["clean"][:, 1:]).all()
    np.testing.assert_allclose(always["branched"][:, 1:], whole[:, 1:], atol=1e-6, equal_nan=True)
    low, high = 1e-12, 20.0  # every slot after slot 1 branched at low, none at high (> ln V): bisect to a threshold between
    for _ in range(30):  # (the smoke target is hardly trained: its entropies sit close together)
        some = evaluation.slot_acceptance_split(drafter, world.target, replies, branch_entropy=(low + high) / 2, batch_size=2)
        share = some["branched_share"]
        if ((share > 0) & (share < 1)).any():
            break
        low, high = ((low + high) / 2, high) if share[:, 1:].mean() >= 1 else (low, (low + high) / 2)
    assert ((share > 0) & (share < 1)).any(), "some threshold should split some slots"
    mixed = np.nan_to_num(some["clean"]) * (1 - share) + np.nan_to_num(some["branched"]) * share
    np.testing.assert_allclose(mixed, np.nan_to_num(whole), atol=1e-5)
    with pytest.raises(ValueError, match="threshold in nats"):
        evaluation.slot_acceptance_split(drafter, world.target, replies, branch_entropy=0.0)
