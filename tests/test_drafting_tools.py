"""Tests for the measuring tools of chapters 03 and 04: collisions, draft latency, acceptance
summaries and the zoo's recipe plumbing, on tiny random targets (seconds)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from test_drafters import GAMMA, dflash, eagle, hidden_of, random_ids, tiny_target

from dspark_lite.harness.toy import collisions, zoo
from dspark_lite.harness.toy import samplers
from dspark_lite.harness.toy.knobs import CorpusKnobs
from dspark_lite.harness.serving.costs import compare_draft_latency, draft_latency_curve
from dspark_lite.harness.toy.evaluation import summarize
from dspark_lite.harness.toy.profiles import get_profile
from dspark_lite.record import Rounds

pytestmark = pytest.mark.usefixtures("one_thread")

OPENERS = collisions.Phrasings("opener", ("Of", "No", "Absolutely"), (" course!", " problem!", "!"))


@pytest.mark.parametrize("text, outcome", [
    ("Of course! I would", "coherent"),
    ("Absolutely! I", "coherent"),
    ("Of problem! I would", "mixed"),
    ("No! I would", "mixed"),
    ("No course!", "mixed"),
    ("Sure thing!", "other"),
    ("Of", "other"),
    ("", "other"),
])
def test_phrasings_sort_coherent_mixed_and_other(text, outcome):
    assert OPENERS.classify(text) == outcome


def test_phrasings_need_matching_heads_and_tails():
    with pytest.raises(ValueError, match="head and one tail"):
        collisions.Phrasings("bad", ("a", "b"), (" c",))


def test_chat_phrasings_come_from_the_corpus_lists():
    opener, agreement = collisions.chat_phrasings(CorpusKnobs(chat_branching=3))
    assert [h + t for h, t in zip(opener.heads, opener.tails)] == list(samplers.OPENERS[:3])
    adjective, verb = samplers.AGREEMENT[0]
    assert agreement.classify(f" {adjective} to {verb}. Here") == "coherent"
    assert agreement.classify(f" {adjective} to {samplers.AGREEMENT[1][1]}.") == "mixed"


def test_count_tallies_outcomes_and_keeps_distinct_examples():
    tally = collisions.count("drafter", OPENERS, ["Of course!", "Of course!", "Of problem!", "Hi"], keep=2)
    assert tally.counts == {"coherent": 2, "mixed": 1, "other": 1} and tally.total == 4
    assert tally.examples["coherent"] == ["Of course!"] and tally.share("mixed") == 0.25


class CharTokenizer:
    """decode: token id i -> chr(ord('a') + i % 26)."""

    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def test_draft_texts_and_target_texts_return_one_text_per_sample():
    target = tiny_target(seed=5)
    context = random_ids(3, 9)
    generator = torch.Generator().manual_seed(0)
    for drafter in (dflash(target), eagle(target)):
        texts = collisions.draft_texts(drafter, target, CharTokenizer(), context, 3, 4, generator)
        assert len(texts) == 4 and all(len(t) == 3 for t in texts)
    assert [len(t) for t in collisions.target_texts(target, CharTokenizer(), context, 2, 3, generator)] == [2, 2, 2]


def test_draft_latency_curve_times_each_gamma_and_leaves_a_usable_drafter():
    target = tiny_target(seed=6)
    drafter = eagle(target)
    times = draft_latency_curve({1: drafter, 3: drafter, 6: drafter}, target, random_ids(1, 10), repeats=2, warmup=0)
    assert sorted(times) == [1, 3, 6] and all(t > 0 for t in times.values())
    prompt = random_ids(2, 6)
    drafter.start(prompt, hidden_of(target, prompt[None])[0])
    assert drafter.draft(torch.cat([prompt, prompt[:1]]), 2, 1.0, None).gamma == 2


def test_draft_latency_curve_also_times_a_token_only_draft_model():
    from dspark_lite.baselines import ModelDrafter

    target = tiny_target(seed=6)
    times = draft_latency_curve({2: ModelDrafter(tiny_target(seed=7))}, target, random_ids(1, 8), repeats=1, warmup=0)
    assert list(times) == [2] and times[2] > 0


def test_draft_latency_curve_rejects_bad_input():
    target = tiny_target(seed=6)
    with pytest.raises(ValueError, match=">= 3 tokens"):
        draft_latency_curve({2: dflash(target)}, target, random_ids(1, 2))
    with pytest.raises(ValueError, match="gammas >= 1"):
        draft_latency_curve({0: dflash(target)}, target, random_ids(1, 8))


def test_compare_draft_latency_times_every_drafter_at_every_gamma():
    target = tiny_target(seed=6)
    times = compare_draft_latency({"a": {2: dflash(target), 4: dflash(target)}, "b": {4: eagle(target)}}, target,
                                  random_ids(1, 10), repeats=2, warmup=0)
    assert {name: sorted(curve) for name, curve in times.items()} == {"a": [2, 4], "b": [4]}
    assert all(t > 0 for curve in times.values() for t in curve.values())


def test_summarize_computes_tau_and_both_acceptance_curves():
    rounds = Rounds.of([GAMMA] * 4, [GAMMA, 0, 1, 1])
    report = summarize("math", rounds, GAMMA, tokens=12)
    assert report.tau == pytest.approx(np.mean([GAMMA + 1, 1, 2, 2]))
    assert report.conditional[:2] == [0.75, pytest.approx(1 / 3, abs=1e-4)]
    assert report.prefix_survival[:2] == [0.75, 0.25]
    assert report.rounds == 4 and report.to_dict()["domain"] == "math"


def test_zoo_maps_the_recipe_and_rejects_unknown_kinds():
    recipe = replace(get_profile("smoke").drafter, steps=5, loss_decay=4.0)
    cfg = zoo.train_config(recipe, lr=1e-4)
    assert (cfg.steps, cfg.loss_decay, cfg.lr, cfg.ce_weight) == (5, 4.0, 1e-4, recipe.ce_weight)
    assert zoo.with_gamma(recipe, 9).gamma == 9
    assert [zoo.training_steps(kind, recipe) for kind in ("dflash", "eagle", "dspark-markov", "dspark-rnn")] == [
        recipe.steps, recipe.eagle_steps, recipe.dspark_steps, recipe.dspark_steps]
    with pytest.raises(ValueError, match="unknown drafter kind"):
        zoo.load_or_train_drafter(None, "medusa", recipe)


def test_the_baseline_trains_on_eagle3s_loss_and_its_ablation_on_the_parallel_drafters():
    """"eagle": soft cross-entropy alone with step weights 0.8^(k-1); "eagle-tv" (the book's earlier
    baseline: its shape, CE + TV) and every parallel drafter: the recipe's CE + TV."""
    from dspark_lite import loss

    recipe = get_profile("full").drafter
    eagle = zoo.train_config(recipe, "eagle")
    assert (eagle.ce_weight, eagle.tv_weight, eagle.soft_ce_weight) == (0.0, 0.0, 1.0)
    assert loss.position_weights(7, eagle.loss_decay).tolist() == pytest.approx([0.8 ** k for k in range(7)])
    for kind in ("eagle-tv", "dflash", "dspark-markov"):
        cfg = zoo.train_config(recipe, kind)
        assert (cfg.ce_weight, cfg.tv_weight, cfg.soft_ce_weight, cfg.loss_decay) == (0.1, 0.9, 0.0, recipe.loss_decay)
    assert zoo.train_config(replace(recipe, eagle_loss="dspark"), "eagle").soft_ce_weight == 0.0
    old = zoo.tv_baseline_recipe(recipe)
    assert (old.eagle_intermediate_size, old.eagle_num_heads, old.eagle_head_dim, old.eagle_loss) == (32, 2, None, "dspark")
    with pytest.raises(ValueError, match="eagle_loss must be 'eagle3' or 'dspark'"):
        replace(recipe, eagle_loss="kl")


def test_dflash_and_dspark_share_the_recipes_thin_backbone():
    """Five thin layers as the paper's (one attention head, one key/value head, a narrow MLP): DFlash
    and every DSpark kind get the same backbone, weight for weight in shape; the head is DSpark's own."""
    from types import SimpleNamespace

    from test_drafters import LAYER_IDS, MASK_ID

    world = SimpleNamespace(target=tiny_target(), tokenizer=SimpleNamespace(mask_token_id=MASK_ID))
    recipe = replace(get_profile("smoke").drafter, target_layer_ids=LAYER_IDS, dflash_layers=5,
                     draft_intermediate_size=12, draft_num_heads=1, draft_head_dim=8)
    shapes = {}
    for kind in ("dflash", "dspark-markov", "dspark-rnn", "dspark-confidence"):
        drafter = zoo.BUILDERS[kind](world, recipe, 0)
        layer = drafter.layers[0].self_attn
        assert len(drafter.layers) == 5
        assert (layer.q_proj.out_features, layer.k_proj.out_features, layer.v_proj.out_features) == (8, 8, 8)
        assert drafter.layers[0].mlp.gate_proj.out_features == 12
        shapes[kind] = {k: tuple(v.shape) for k, v in drafter.state_dict().items() if k.startswith(("fc", "layers"))}
    assert all(s == shapes["dflash"] for s in shapes.values())
    wide = zoo.build_dflash(world, replace(recipe, draft_num_heads=None, draft_head_dim=None), 0).layers[0].self_attn
    assert (wide.q_proj.out_features, wide.k_proj.out_features) == (32, 16)  # None: the target's 4 x 8 and 2 x 8


def test_ablation_recipe_is_lean_alike_for_every_kind_and_keeps_slots_per_sequence():
    profile = get_profile("full")
    for gamma in (4, 7, 16):
        lean = zoo.ablation_recipe(profile.drafter, profile.heads, gamma, layers=3)
        assert (lean.gamma, lean.dflash_layers) == (gamma, 3)
        assert {zoo.training_steps(k, lean) for k in ("dflash", "dspark-markov", "eagle", "eagle-tv")} == {
            profile.heads.ablation_steps}
        assert lean.anchors_per_sequence == profile.heads.ablation_block_tokens // gamma
        assert lean.training_replies == profile.drafter.training_replies  # the same cached replies


def test_anchors_cover_the_last_prompt_token_and_every_reply_position_with_a_target():
    from dspark_lite.training_data import sample_anchor_positions

    lengths, prompt_lengths = torch.tensor([10, 6]), torch.tensor([4, 3])
    anchors = sample_anchor_positions(lengths, prompt_lengths, 400, torch.Generator().manual_seed(0))
    assert set(anchors[0].tolist()) == set(range(3, 9)) and set(anchors[1].tolist()) == set(range(2, 5))
    with pytest.raises(AssertionError, match="reply of >= 2 tokens"):  # `TrainingSequences` checks it at the door
        sample_anchor_positions(torch.tensor([5]), torch.tensor([4]), 3, torch.Generator())
