"""Tests for dspark_lite.attention, .hidden_drafter, .dflash, .eagle, .training_data and .training
(chapter 03), on tiny random Qwen3 targets (vocab 48, hidden 32): seconds in total."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from dspark_lite.attention import RMSNorm, cat_kv
from dspark_lite.dflash import DFlashDrafter
from dspark_lite.eagle import EagleDrafter
from dspark_lite.hidden_drafter import AnchorBatch, DrafterConfig
from dspark_lite.baselines import autoregressive_generate
from dspark_lite.harness.toy.replies import generate_training_sequences
from dspark_lite.speculative import Drafter, select_target_hidden, speculative_generate
from dspark_lite.training import (
    DrafterTrainConfig,
    train_drafter,
    drafter_loss,
    target_batch,
    train_drafters,
)
from dspark_lite.training_data import TargetViews, TrainingSequences

VOCAB, MASK_ID, EOS_ID, PAD_ID = 48, 47, 46, 45
LAYER_IDS = (0, 2)
GAMMA = 4


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_target(seed: int = 0, logit_scale: float = 4.0) -> Qwen3ForCausalLM:
    """A random 3-layer Qwen3 with tied embeddings; `logit_scale` sharpens its outputs."""
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model


@pytest.fixture(scope="module")
def target() -> Qwen3ForCausalLM:
    return tiny_target()


def dflash(target, num_layers: int = 2, seed: int = 1) -> DFlashDrafter:
    return DFlashDrafter(target, DrafterConfig(LAYER_IDS, mask_token_id=MASK_ID, gamma=GAMMA,
                                              num_layers=num_layers), seed=seed)


def eagle(target, seed: int = 1) -> EagleDrafter:
    return EagleDrafter(target, DrafterConfig(LAYER_IDS, gamma=GAMMA), seed=seed)


def hidden_of(target, ids: torch.Tensor) -> torch.Tensor:
    """The target's selected layers for a batch of sequences [B, T] -> [B, T, m*H]."""
    with torch.no_grad():
        out = target(input_ids=ids, output_hidden_states=True)
    return select_target_hidden(out.hidden_states, LAYER_IDS)


def random_ids(seed: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, PAD_ID, shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------
# The block attention mask and batching
# ----------------------------------------------------------------------------------------


def test_block_never_sees_context_at_or_after_its_anchor(target):
    drafter = dflash(target)
    ids = random_ids(0, 1, 20)
    hidden, anchor = hidden_of(target, ids), torch.tensor([9])
    block = drafter.make_block_ids(ids[:, 9])
    reference = drafter.block_logits(hidden, block, anchor)
    later = hidden.clone()
    later[:, 9:] += torch.randn_like(later[:, 9:])
    assert torch.equal(drafter.block_logits(later, block, anchor), reference)
    earlier = hidden.clone()
    earlier[:, 8] += torch.randn_like(earlier[:, 8])
    assert not torch.allclose(drafter.block_logits(earlier, block, anchor), reference, atol=1e-4)


def test_eagle_training_never_sees_features_at_or_after_the_anchor(target):
    drafter = eagle(target)
    ids = random_ids(1, 1, 20)
    hidden, anchors = hidden_of(target, ids), torch.tensor([[9]])
    reference = drafter.train_logits(AnchorBatch(ids, hidden, anchors)).logits
    later = hidden.clone()
    later[:, 9:] += torch.randn_like(later[:, 9:])
    assert torch.equal(drafter.train_logits(AnchorBatch(ids, later, anchors)).logits, reference)
    earlier = hidden.clone()
    earlier[:, 8] += torch.randn_like(earlier[:, 8])
    assert not torch.allclose(drafter.train_logits(AnchorBatch(ids, earlier, anchors)).logits, reference, atol=1e-4)


def test_block_logits_do_not_depend_on_batch_composition(target):
    drafter = dflash(target)
    short, long = random_ids(2, 1, 12), random_ids(3, 1, 20)
    padded = torch.cat([short, torch.full((1, 8), PAD_ID)], dim=1)
    alone = drafter.block_logits(hidden_of(target, short), drafter.make_block_ids(short[:, 6]), torch.tensor([6]))
    # a batch: the short sequence (padded) with anchors 6 and 10, the long one with anchors 15 and 3
    ids = torch.cat([padded, long])
    anchors = torch.tensor([[6, 10], [15, 3]])
    blocks = drafter.make_block_ids(ids.gather(1, anchors))
    batched = drafter.block_logits(hidden_of(target, ids), blocks, anchors)
    assert batched.shape == (2, 2, GAMMA, VOCAB)
    torch.testing.assert_close(batched[0, 0], alone[0], atol=1e-5, rtol=1e-5)
    long_alone = drafter.block_logits(hidden_of(target, long), drafter.make_block_ids(long[:, 3]), torch.tensor([3]))
    torch.testing.assert_close(batched[1, 1], long_alone[0], atol=1e-5, rtol=1e-5)


def test_eagle_training_logits_do_not_depend_on_batch_composition(target):
    drafter = eagle(target)
    short, long = random_ids(4, 1, 12), random_ids(5, 1, 20)
    ids = torch.cat([torch.cat([short, torch.full((1, 8), PAD_ID)], dim=1), long])
    alone = drafter.train_logits(AnchorBatch(short, hidden_of(target, short), torch.tensor([[5]]))).logits
    batched = drafter.train_logits(AnchorBatch(ids, hidden_of(target, ids), torch.tensor([[5, 2], [14, 7]]))).logits
    torch.testing.assert_close(batched[0, 0], alone[0, 0], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------
# The Drafter protocol agrees with the training forward
# ----------------------------------------------------------------------------------------


def run_protocol(drafter, target, prompt: torch.Tensor, accepted: list[int], gamma: int, seed: int):
    """start on the prompt, then rounds that accept `accepted[i]` drafts of each draft (the
    correction token = the next random id); returns the full sequence and the last draft."""
    sequence = torch.cat([prompt, random_ids(seed, 1)])
    drafter.start(prompt, hidden_of(target, prompt[None])[0, : prompt.shape[0]])
    generator = torch.Generator().manual_seed(seed)
    for n_accepted in accepted:
        draft = drafter.draft(sequence, gamma, 1.0, generator)
        new = torch.cat([sequence[-1:], draft.tokens[:n_accepted]])
        committed = torch.cat([sequence, draft.tokens[:n_accepted]])
        drafter.accept(n_accepted, hidden_of(target, committed[None])[0, -new.shape[0]:])
        sequence = torch.cat([committed, random_ids(seed + n_accepted + sequence.shape[0], 1)])
    return sequence, drafter.draft(sequence, gamma, 1.0, generator)


def test_dflash_draft_equals_block_logits(target):
    drafter = dflash(target)
    assert isinstance(drafter, Drafter)
    sequence, draft = run_protocol(drafter, target, random_ids(6, 7), [2, 0, 3], GAMMA - 1, seed=6)
    anchor = sequence.shape[0] - 1
    logits = drafter.block_logits(hidden_of(target, sequence[None]), drafter.make_block_ids(sequence[-1:]),
                                  torch.tensor([anchor]))
    assert draft.probs.dtype == torch.float32 and draft.gamma == GAMMA - 1
    torch.testing.assert_close(draft.probs, torch.softmax(logits[0, : GAMMA - 1], -1), atol=1e-5, rtol=1e-4)


def test_eagle_drafts_the_same_twice_without_accept(target):
    drafter = eagle(target)
    prompt = random_ids(9, 6)
    drafter.start(prompt, hidden_of(target, prompt[None])[0])
    context = torch.cat([prompt, random_ids(10, 1)])
    first = drafter.draft(context, GAMMA, 1.0, torch.Generator().manual_seed(1))
    again = drafter.draft(context, GAMMA, 1.0, torch.Generator().manual_seed(1))
    assert torch.equal(first.tokens, again.tokens) and torch.equal(first.probs, again.probs)
    with pytest.raises(ValueError, match="accept"):
        drafter.draft(torch.cat([context, context[:1]]), GAMMA, 1.0, None)


def test_eagle_draft_equals_training_forward_on_its_own_tokens(target):
    drafter = eagle(target)
    assert isinstance(drafter, Drafter)
    sequence, draft = run_protocol(drafter, target, random_ids(7, 6), [1, 3, 0], GAMMA, seed=7)
    anchor = sequence.shape[0] - 1
    teacher = torch.cat([sequence, draft.tokens])[None]
    logits = drafter.train_logits(AnchorBatch(teacher, hidden_of(target, teacher), torch.tensor([[anchor]]))).logits
    torch.testing.assert_close(draft.probs, torch.softmax(logits[0, 0], -1), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("make", [dflash, eagle], ids=["dflash", "eagle"])
def test_greedy_speculative_decoding_reproduces_the_target(target, make):
    drafter = make(target)
    for seed in range(3):
        prompt = random_ids(10 + seed, 5 + seed)
        expected = autoregressive_generate(target, prompt, 40, 0.0, None)
        rollout = speculative_generate(target, drafter, prompt, 40, GAMMA, 0.0, None)
        assert torch.equal(rollout.tokens, expected)


def test_sampled_speculative_decoding_runs_with_exact_draft_probabilities(target):
    for drafter in (dflash(target), eagle(target)):
        rollout = speculative_generate(target, drafter, random_ids(20, 6), 30, GAMMA, 1.0,
                                       torch.Generator().manual_seed(0))
        assert rollout.tokens.shape == (30,)


# ----------------------------------------------------------------------------------------
# Configuration errors, weight sharing, DeepSpec names
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"target_layer_ids": (0, 3)}, r"in \[0, 3\); got \(0, 3\)"),
    ({"target_layer_ids": (-1,)}, r"in \[0, 3\); got \(-1,\)"),
    ({"target_layer_ids": ()}, r"non-empty.*got \(\)"),
    ({"target_layer_ids": (2, 1)}, r"strictly increasing.*got \(2, 1\)"),
    ({"gamma": 0}, "gamma"),
    ({"mask_token_id": VOCAB}, "mask_token_id"),
    ({"num_layers": 0}, "num_layers"),
])
def test_bad_dflash_configs_raise_clear_errors(target, kwargs, message):
    fields = {"target_layer_ids": LAYER_IDS, "mask_token_id": MASK_ID, "gamma": GAMMA, **kwargs}
    with pytest.raises(ValueError, match=message):
        DFlashDrafter(target, DrafterConfig(**fields))


def test_bad_eagle_config_and_misuse_raise_clear_errors(target):
    with pytest.raises(ValueError, match=r"in \[0, 3\); got \(5,\)"):
        EagleDrafter(target, DrafterConfig((5,)))
    with pytest.raises(ValueError, match="gamma"):
        EagleDrafter(target, DrafterConfig(LAYER_IDS, gamma=0))
    drafter = dflash(target)
    with pytest.raises(ValueError, match="before start"):
        drafter.draft(random_ids(0, 5), 2, 0.0, None)
    prompt = random_ids(0, 5)
    drafter.start(prompt, hidden_of(target, prompt[None])[0])
    with pytest.raises(ValueError, match=r"gamma must be in \[1, 4\]"):
        drafter.draft(torch.cat([prompt, prompt[:1]]), GAMMA + 1, 0.0, None)
    with pytest.raises(ValueError, match="accept"):
        drafter.draft(torch.cat([prompt, prompt[:3]]), 2, 0.0, None)


@pytest.mark.parametrize("make", [dflash, eagle], ids=["dflash", "eagle"])
def test_embedding_and_lm_head_are_the_targets_and_stay_frozen(make):
    target = tiny_target(seed=3)
    drafter = make(target)
    assert drafter.shared.embed_tokens is target.get_input_embeddings()
    assert drafter.shared.lm_head is target.get_output_embeddings()
    target_params = {id(p) for p in target.parameters()}
    assert not any(id(p) in target_params for p in drafter.parameters())
    assert not any(k.startswith(("embed_tokens", "lm_head", "shared")) for k in drafter.state_dict())
    before = {k: v.clone() for k, v in target.state_dict().items()}
    sequences = TrainingSequences([random_ids(s, 14) for s in range(4)], [4] * 4, PAD_ID)
    train_drafter(drafter, target, sequences, DrafterTrainConfig(steps=2, sequences_per_batch=2, warmup_steps=0))
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    assert all(p.grad is None for p in target.parameters())


@pytest.mark.parametrize("autocast", [False, True])
def test_rmsnorm_matches_qwen3s(autocast):
    """The drafters' RMSNorm (one F.rms_norm call) gives Qwen3RMSNorm's outputs, dtype and gradients, in float32
    and under the trainer's bfloat16 autocast (where the input arrives in bfloat16)."""
    ours, theirs = RMSNorm(16, eps=1e-6), Qwen3RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.linspace(0.5, 1.5, 16))
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(0)) * 4
    outs, grads = [], []
    for norm in (ours, theirs):
        inputs = x.clone().requires_grad_(True)
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            out = norm(inputs.to(torch.bfloat16) if autocast else inputs)
        (out.float() * torch.arange(16.0)).sum().backward()
        outs.append(out)
        grads.append((inputs.grad, norm.weight.grad))
    assert outs[0].dtype == outs[1].dtype == torch.float32
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-6, atol=1e-6)
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


LAYER_KEYS = [
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
]


def test_state_dict_keys_follow_deepspec(target):
    """Names of deepspec/modeling/dspark/qwen3/modeling.py (Qwen3DSparkModel without its
    Markov/confidence heads) and deepspec/modeling/eagle3/qwen3/modeling.py (Qwen3Eagle3Model),
    less the target's embed_tokens / lm_head copies that DeepSpec checkpoints carry."""
    dflash_keys = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {
        f"layers.{i}.{k}" for i in range(2) for k in LAYER_KEYS}
    assert set(dflash(target).state_dict()) == dflash_keys
    eagle_keys = {"fc.weight", "norm.weight", "layers.0.hidden_norm.weight"} | {f"layers.0.{k}" for k in LAYER_KEYS}
    assert set(eagle(target).state_dict()) == eagle_keys
    shapes = {k: tuple(v.shape) for k, v in eagle(target).state_dict().items()}
    assert shapes["fc.weight"] == (32, 2 * 32) and shapes["layers.0.self_attn.q_proj.weight"] == (4 * 8, 2 * 32)


# ----------------------------------------------------------------------------------------
# Training data and the trainer
# ----------------------------------------------------------------------------------------


def stub_tokenizer() -> SimpleNamespace:
    return SimpleNamespace(eos_token_id=EOS_ID, pad_token_id=PAD_ID)


def test_batched_reply_generation_matches_the_target_greedy(target):
    prompts = [random_ids(30 + i, 3 + 2 * i) for i in range(4)]
    data = generate_training_sequences(target, stub_tokenizer(), prompts, 12, 0.0, None, batch_size=4)
    assert len(data) == len(prompts)
    for prompt, sequence, prompt_length in zip(prompts, data.sequences, data.prompt_lengths):
        assert prompt_length == prompt.shape[0] and torch.equal(sequence[:prompt_length], prompt)
        expected = autoregressive_generate(target, prompt, 12, 0.0, None, eos_token_id=EOS_ID)
        assert torch.equal(sequence[prompt_length:], expected)


@torch.no_grad()
def evaluate_drafter(drafter, target, sequences, cfg, seed=0) -> dict:
    """Held-out loss and acceptance proxies: every sequence once, anchors drawn with `seed`,
    metrics averaged over batches (the drafter left in the mode it was in)."""
    generator = torch.Generator().manual_seed(seed)
    views = TargetViews(target, sequences, drafter.target_layer_ids)
    was_training = drafter.training
    drafter.eval()
    totals: dict[str, list] = {}
    for start in range(0, len(sequences), cfg.sequences_per_batch):
        indices = range(start, min(start + cfg.sequences_per_batch, len(sequences)))
        batch = target_batch(views, sequences, indices, cfg, generator)
        loss, parts = drafter_loss(drafter, batch, cfg)
        for name, value in {"loss": loss.item(), **parts}.items():
            totals.setdefault(name, []).append(value)
    drafter.train(was_training)
    return {name: torch.tensor(values).mean(0).tolist() for name, values in totals.items()}


@pytest.mark.parametrize("make", [dflash, eagle], ids=["dflash", "eagle"])
def test_a_few_training_steps_reduce_the_loss(make):
    target = tiny_target(seed=4)
    prompts = [random_ids(40 + i, 4 + i % 3) for i in range(16)]
    data = generate_training_sequences(target, stub_tokenizer(), prompts, 16, 1.0, torch.Generator().manual_seed(0),
                                       batch_size=16)
    drafter = make(target)
    cfg = DrafterTrainConfig(steps=30, sequences_per_batch=4, anchors_per_sequence=8, lr=1e-2, warmup_steps=2)
    before = evaluate_drafter(drafter, target, data, cfg, seed=1)
    history = train_drafter(drafter, target, data, cfg, seed=0)
    after = evaluate_drafter(drafter, target, data, cfg, seed=1)
    assert len(history.loss) == cfg.steps and len(history.prefix_survival_tv[-1]) == GAMMA
    assert after["loss"] < 0.9 * before["loss"]
    assert after["expected_tau_tv"] > before["expected_tau_tv"]


def test_drafters_trained_side_by_side_train_exactly_as_alone():
    target = tiny_target(seed=4)
    prompts = [random_ids(40 + i, 4 + i % 3) for i in range(8)]
    data = generate_training_sequences(target, stub_tokenizer(), prompts, 12, 1.0, torch.Generator().manual_seed(0),
                                       batch_size=8)
    cfg = DrafterTrainConfig(steps=5, sequences_per_batch=2, anchors_per_sequence=4, lr=1e-2, warmup_steps=1)
    together = {"two": dflash(target), "one": dflash(target, num_layers=1, seed=2), "eagle": eagle(target)}
    histories = train_drafters(together, target, data, cfg, seed=3)
    for name, alone in {"two": dflash(target), "one": dflash(target, num_layers=1, seed=2), "eagle": eagle(target)}.items():
        history = train_drafter(alone, target, data, cfg, seed=3)
        assert histories[name].loss == history.loss
        theirs = together[name].state_dict()
        assert all(torch.equal(value, theirs[key]) for key, value in alone.state_dict().items())
    assert sum(h.seconds for h in histories.values()) > 0


def test_drafters_trained_side_by_side_must_read_the_same_target_layers():
    target = tiny_target(seed=4)
    data = generate_training_sequences(target, stub_tokenizer(), [random_ids(1, 4), random_ids(2, 5)], 8, 1.0,
                                       torch.Generator().manual_seed(0), batch_size=2)
    other = DFlashDrafter(target, DrafterConfig((1,), mask_token_id=MASK_ID, gamma=GAMMA, num_layers=1), seed=1)
    with pytest.raises(ValueError, match="same target layers"):
        train_drafters({"a": dflash(target), "b": other}, target, data, DrafterTrainConfig(steps=1))
    with pytest.raises(ValueError, match="number of drafters must be an integer >= 1"):
        train_drafters({}, target, data, DrafterTrainConfig(steps=1))


def test_a_training_recipe_is_checked_at_its_constructor():
    for bad, message in [({"steps": 0}, "steps must be an integer >= 1; got 0"),
                         ({"warmup_steps": -1}, "warmup_steps must be an integer >= 0; got -1"),
                         ({"tv_weight": -0.1}, "tv_weight must be >= 0; got -0.1"),
                         ({"ce_weight": 0.0, "tv_weight": 0.0}, r"ce_weight \+ tv_weight \+ soft_ce_weight must be > 0; got 0.0"),
                         ({"lr": 0.0}, "lr must be > 0; got 0.0"),
                         ({"loss_decay": -1.0}, "loss_decay must be > 0; got -1.0")]:
        with pytest.raises(ValueError, match=message):
            DrafterTrainConfig(**bad)
    assert DrafterTrainConfig(loss_decay=None, warmup_steps=0).loss_decay is None


def test_training_sequences_need_a_prompt_and_a_reply_of_two_tokens():
    with pytest.raises(ValueError, match="sequence 1: needs a 1-D tensor with a prompt of >= 1 token and a reply of >= 2"):
        TrainingSequences([random_ids(0, 6), random_ids(1, 5)], [4, 4], PAD_ID)
    with pytest.raises(ValueError, match="2 sequences but 1 prompt lengths"):
        TrainingSequences([random_ids(0, 6), random_ids(1, 6)], [4], PAD_ID)


def test_target_views_equal_the_targets_own_forward(target, float32_matmuls):
    """What the trainer reads (kept per sequence, the LM head applied per batch) is the target's
    own logits and selected hidden states, in any batch a sequence lands in."""
    prompts = [random_ids(60 + i, 3 + i) for i in range(5)]
    data = generate_training_sequences(target, stub_tokenizer(), prompts, 10, 1.0, torch.Generator().manual_seed(2),
                                       batch_size=5)
    views = TargetViews(target, data, LAYER_IDS, chunk=2)
    for indices in ([0, 1, 2], [3, 1], [4, 0, 3]):
        logits, hidden = views.batch(indices)
        for row, i in enumerate(indices):
            ids, n = data.sequences[i], data.sequences[i].shape[0]
            with torch.no_grad():
                out = target(input_ids=ids[None], output_hidden_states=True)
            torch.testing.assert_close(logits[row, :n], out.logits[0].float(), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(hidden[row, :n], select_target_hidden(out.hidden_states, LAYER_IDS)[0])
            assert not hidden[row, n:].any()
    assert len(views.final) == len(views.hidden) == len(data)
