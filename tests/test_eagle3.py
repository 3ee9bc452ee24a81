"""DeepSpec's released Eagle3 drafters in dspark_lite (issue 31, item 6; chapter 07): the loader reads
DeepSpec's Eagle3 layout into `EagleDrafter`, the drafter's chain stops at an end id, and the engine
verifies and counts a draft shorter than gamma as DeepSpec's evaluator does.

What DeepSpec does is read from deepseek-ai/DeepSpec: deepspec/modeling/eagle3/qwen3/modeling.py
(keys, shapes, the forward), deepspec/modeling/eagle3/qwen3/config.py (config fields), eval.py
(architecture names), deepspec/eval/eagle3/evaluator.py (the chain and its early stop) and
deepspec/eval/base_evaluator.py (verification and accounting). Tiny checkpoints here are written
by hand in that layout, not with our writer, so that the loader is checked against DeepSpec's
layout and not against itself.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from dspark_lite.eagle import EagleDrafter
from dspark_lite.hidden_drafter import DrafterConfig
from dspark_lite.harness.gpu import checkpoints, released_config, weights
from dspark_lite.harness.gpu.weights import CheckpointError
from dspark_lite.record import prefix_survival, tau
from dspark_lite.baselines import autoregressive_generate
from dspark_lite.speculative import Draft, speculative_generate, target_hidden
from dspark_lite.training import DrafterTrainConfig, train_drafter
from dspark_lite.training_data import TrainingSequences
from room_patch import patch_room

pytestmark = pytest.mark.usefixtures("one_thread")

QWEN3_4B = Path(__file__).resolve().parent.parent / "data" / "qwen3_4b"
VOCAB, HIDDEN, TARGET_LAYERS = 97, 32, 6

# Qwen3Eagle3Model's modules (deepspec/modeling/eagle3/qwen3/modeling.py), as save_pretrained names them.
LAYER_KEYS = (
    "hidden_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)
DEEPSPEC_KEYS = {"embed_tokens.weight", "fc.weight", "norm.weight", "lm_head.weight"} | {
    f"layers.0.{key}" for key in LAYER_KEYS}


def tiny_target(layers: int = TARGET_LAYERS, vocab: int = VOCAB, hidden: int = HIDDEN, seed: int = 0,
                logit_scale: float = 1.0, tied: bool = False) -> Qwen3ForCausalLM:
    """A random tiny Qwen3 (untied by default: its greedy replies vary instead of repeating one token)."""
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=48, max_position_embeddings=256,
                         tie_word_embeddings=tied)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model


@pytest.fixture(scope="module")
def target() -> Qwen3ForCausalLM:
    return tiny_target()


# ---------------------------------------------------------------------------------------- DeepSpec's layout


def deepspec_config(target: Qwen3ForCausalLM, layer_ids, ttt_length: int = 7,
                    architecture: str = "Qwen3Eagle3Model") -> dict:
    """config.json as DeepSpec's build_draft_config writes it: the target's config, deep-copied,
    with the Eagle3 fields set (deepspec/modeling/eagle3/qwen3/config.py)."""
    raw = json.loads(target.config.to_json_string(use_diff=False))
    raw.update(architectures=[architecture], num_target_layers=target.config.num_hidden_layers,
               num_hidden_layers=1, layer_types=["full_attention"], target_model_name_or_path="tiny/target",
               target_layer_ids=list(layer_ids), ttt_length=ttt_length, step_loss_decay=0.8,
               draft_num_hidden_layers=1, tie_word_embeddings=False)
    return raw


def deepspec_tensors(target: Qwen3ForCausalLM, n_fused: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under Qwen3Eagle3Model's names and shapes (fc: [hidden, n_fused * hidden];
    q/k/v read 2 * hidden); embed_tokens and lm_head are the target's, as DeepSpec's trainer
    copies and freezes them (deepspec/trainer/eagle3_trainer.py)."""
    c = target.config
    h, d, i = c.hidden_size, c.head_dim, c.intermediate_size
    q, kv = c.num_attention_heads * d, c.num_key_value_heads * d
    g = torch.Generator().manual_seed(seed)
    shapes = {"fc.weight": (h, n_fused * h), "norm.weight": (h,),
              "layers.0.hidden_norm.weight": (h,), "layers.0.input_layernorm.weight": (h,),
              "layers.0.post_attention_layernorm.weight": (h,),
              "layers.0.self_attn.q_proj.weight": (q, 2 * h), "layers.0.self_attn.k_proj.weight": (kv, 2 * h),
              "layers.0.self_attn.v_proj.weight": (kv, 2 * h), "layers.0.self_attn.o_proj.weight": (h, q),
              "layers.0.self_attn.q_norm.weight": (d,), "layers.0.self_attn.k_norm.weight": (d,),
              "layers.0.mlp.gate_proj.weight": (i, h), "layers.0.mlp.up_proj.weight": (i, h),
              "layers.0.mlp.down_proj.weight": (h, i)}
    tensors = {key: (1.0 + 0.2 * torch.randn(shape, generator=g)) if len(shape) == 1 else
               0.2 * torch.randn(shape, generator=g) for key, shape in shapes.items()}
    tensors["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().clone()
    tensors["lm_head.weight"] = target.get_output_embeddings().weight.detach().clone()
    return tensors


def write_deepspec(folder: Path, target: Qwen3ForCausalLM, layer_ids, architecture: str = "Qwen3Eagle3Model",
                   seed: int = 0, tensors: dict | None = None, config: dict | None = None) -> Path:
    """A tiny Eagle3 checkpoint in DeepSpec's layout (config.json + model.safetensors), by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = deepspec_tensors(target, len(layer_ids), seed) if tensors is None else tensors
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    config = deepspec_config(target, layer_ids, architecture=architecture) if config is None else config
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.mark.parametrize("layer_ids", [(1, 3), (0, 1, 2, 3, 4), (2,)], ids=["2_fused", "5_fused", "1_fused"])
@pytest.mark.parametrize("architecture", ["Qwen3Eagle3Model", "Eagle3DraftModel"])
def test_loader_reads_deepspecs_layout(tmp_path, target, layer_ids, architecture) -> None:
    """Both names eval.py maps to Qwen3Eagle3Evaluator load; the fused layers and their number
    (fc's width) come from the config, not from DeepSpec's 5; every tensor lands under its name."""
    folder = write_deepspec(tmp_path / "eagle3", target, layer_ids, architecture)
    drafter = checkpoints.load_released(folder, target)
    assert isinstance(drafter, EagleDrafter)
    assert drafter.target_layer_ids == layer_ids and drafter.gamma == 7 and len(drafter.layers) == 1
    assert drafter.fc.weight.shape == (HIDDEN, len(layer_ids) * HIDDEN)
    written, state = load_file(str(folder / "model.safetensors")), drafter.state_dict()
    assert set(state) == DEEPSPEC_KEYS - set(released_config.SHARED_KEYS)
    for key, value in state.items():
        assert torch.equal(value, written[key]), key
    assert drafter.shared.lm_head is target.get_output_embeddings()
    assert drafter.rotary_emb.inv_freq.dtype == torch.float32
    direct = checkpoints.load_released(folder, target)
    assert all(torch.equal(v, direct.state_dict()[k]) for k, v in state.items())


# ---------------------------------------------------------------------------------------- DeepSpec's forward


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x [heads, T, D] rotated at `positions` [T] (Qwen3's half-split convention)."""
    dim = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions[:, None].float() * inv[None]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    rotated = torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], -1)
    return x * cos + rotated * sin


def deepspec_layer(w: dict, config, embeds, hidden, positions, past):
    """Qwen3Eagle3DecoderLayer on T new entries over `past` (k, v) entries (each new entry sees
    the past and the new entries up to itself); returns the layer output and the new (k, v)."""
    d, heads, kv_heads = config.head_dim, config.num_attention_heads, config.num_key_value_heads
    p = lambda name: w[f"layers.0.{name}.weight"]
    fused = torch.cat([_rms(embeds, p("input_layernorm")), _rms(hidden, p("hidden_norm"))], -1)
    n = fused.shape[0]
    q = _rms((fused @ p("self_attn.q_proj").T).view(n, heads, d), p("self_attn.q_norm")).transpose(0, 1)
    k = _rms((fused @ p("self_attn.k_proj").T).view(n, kv_heads, d), p("self_attn.k_norm")).transpose(0, 1)
    v = (fused @ p("self_attn.v_proj").T).view(n, kv_heads, d).transpose(0, 1)
    theta = config.rope_parameters["rope_theta"]
    q, k = _rope(q, positions, theta), _rope(k, positions, theta)
    if past is not None:
        k, v = torch.cat([past[0], k], 1), torch.cat([past[1], v], 1)
    k_all, v_all = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
    scores = q @ k_all.transpose(1, 2) / d ** 0.5
    n_past = k.shape[1] - n
    allowed = torch.arange(k.shape[1])[None] <= (n_past + torch.arange(n))[:, None]
    attended = (scores.masked_fill(~allowed, -torch.inf).softmax(-1) @ v_all).transpose(0, 1).reshape(n, -1)
    hidden = hidden + attended @ p("self_attn.o_proj").T
    x = _rms(hidden, p("post_attention_layernorm"))
    mlp = (F.silu(x @ p("mlp.gate_proj").T) * (x @ p("mlp.up_proj").T)) @ p("mlp.down_proj").T
    return hidden + mlp, (k, v)


def deepspec_chain_logits(w: dict, config, fused_hidden, context_ids, chain_ids) -> list[torch.Tensor]:
    """Logits of DeepSpec's Eagle3 chain (deepspec/eval/eagle3/evaluator.py): the draft cache holds
    entries (fc(target layers at t), x_{t+1}) at RoPE position t for the committed positions t <
    p (`_init_context` / `_update`), step 1 reads the last entry's output, and step k + 1 appends
    (previous output, chain_ids[k - 1]) at position p + k - 1 (`_propose`). logits =
    lm_head(norm(h))."""
    p = len(context_ids) - 1
    embed = w["embed_tokens.weight"]
    logits_of = lambda h: _rms(h, w["norm.weight"]) @ w["lm_head.weight"].T
    out, past = deepspec_layer(w, config, embed[context_ids[1:]], fused_hidden[:p] @ w["fc.weight"].T,
                               torch.arange(p), None)
    hidden = out[-1:]
    logits = [logits_of(hidden)[0]]
    for k, token in enumerate(chain_ids, start=1):
        hidden, (new_k, new_v) = deepspec_layer(w, config, embed[[token]], hidden, torch.tensor([p + k - 1]), past)
        past = (new_k, new_v)
        logits.append(logits_of(hidden)[0])
    return logits


def test_loaded_drafter_drafts_as_deepspecs_model(tmp_path, target) -> None:
    """The loaded drafter's chain gives the logits of DeepSpec's Qwen3Eagle3Model (re-derived above
    from its forward), for a whole chain and again after a round accepted one draft."""
    layer_ids = (1, 3, 4)
    folder = write_deepspec(tmp_path / "eagle3", target, layer_ids, seed=4)
    weights = load_file(str(folder / "model.safetensors"))
    drafter = checkpoints.load_released(folder, target)
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, VOCAB, (9,), generator=generator)
    drafter.start(context[:-1], target_hidden(target, context[:-1], layer_ids))
    first = drafter.draft(context, 4, 1.0, generator)
    chain = first.tokens.tolist()
    expected = deepspec_chain_logits(weights, target.config, target_hidden(target, context, layer_ids),
                                     context.tolist(), chain[:-1])
    torch.testing.assert_close(first.probs, torch.stack(expected).softmax(-1), atol=1e-5, rtol=1e-4)
    # the round kept one draft; the correction token (any id) is the next anchor
    drafter.accept(1, target_hidden(target, torch.cat([context, first.tokens[:1]]), layer_ids)[-2:])
    context = torch.cat([context, first.tokens[:1], torch.tensor([5])])
    second = drafter.draft(context, 3, 1.0, generator)
    expected = deepspec_chain_logits(weights, target.config, target_hidden(target, context, layer_ids),
                                     context.tolist(), second.tokens.tolist()[:-1])
    torch.testing.assert_close(second.probs, torch.stack(expected).softmax(-1), atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------- our writer


def test_writer_writes_deepspecs_layout_and_reads_back(tmp_path, target) -> None:
    """save_released writes an Eagle3 in DeepSpec's keys and config fields; the loader reads it back
    (the lead's CPU smoke world writes a tiny checkpoint this way)."""
    drafter = EagleDrafter(target, DrafterConfig((0, 2, 4), gamma=7), seed=2)
    with torch.no_grad():
        for param in drafter.parameters():
            param.add_(0.05 * torch.randn_like(param))
    folder = checkpoints.save_released(drafter, tmp_path / "ours", target.config)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert set(weights.checkpoint_shapes(folder)) == DEEPSPEC_KEYS
    raw = json.loads((folder / "config.json").read_text())
    assert raw["architectures"] == ["Qwen3Eagle3Model"] and raw["target_layer_ids"] == [0, 2, 4]
    assert (raw["ttt_length"], raw["num_hidden_layers"], raw["draft_num_hidden_layers"]) == (7, 1, 1)
    assert (raw["num_target_layers"], raw["tie_word_embeddings"], raw["step_loss_decay"]) == (TARGET_LAYERS, False, 0.8)
    loaded = checkpoints.load_released(folder, target)
    assert loaded.cfg == drafter.cfg
    for (k1, v1), (k2, v2) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1
    prompt = torch.arange(3, 12)
    for model in (drafter, loaded):
        model.start(prompt[:-1], target_hidden(target, prompt[:-1], model.target_layer_ids))
    drafts = [m.draft(prompt, 5, 1.0, torch.Generator().manual_seed(1)) for m in (drafter, loaded)]
    assert torch.equal(drafts[0].tokens, drafts[1].tokens) and torch.equal(drafts[0].probs, drafts[1].probs)


def test_own_embeddings_read_the_checkpoints_head(tmp_path, target) -> None:
    """By default the drafter shares the target's embedding and head (the checkpoint's are copies)
    and warns when they differ; own_embeddings=True reads the checkpoint's own, as DeepSpec's
    evaluator uses them, frozen, and writes them back."""
    tensors = deepspec_tensors(target, 2, seed=1)
    tensors["lm_head.weight"] = 2.0 * tensors["lm_head.weight"]
    folder = write_deepspec(tmp_path / "eagle3", target, (1, 3), tensors=tensors)
    with pytest.warns(UserWarning, match="lm_head.weight differs from the target's"):
        shared = checkpoints.load_released(folder, target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        own = checkpoints.load_released(folder, target, own_embeddings=True)
    assert own.cfg.own_embeddings and not shared.cfg.own_embeddings
    assert torch.equal(own.lm_head.weight, tensors["lm_head.weight"])
    assert not own.lm_head.weight.requires_grad and not own.embed_tokens.weight.requires_grad
    h = torch.randn(3, HIDDEN)
    torch.testing.assert_close(own.logits_from_hidden(h), h @ tensors["lm_head.weight"].T)
    torch.testing.assert_close(shared.logits_from_hidden(h), h @ target.lm_head.weight.detach().T)
    again = checkpoints.load_released(checkpoints.save_released(own, tmp_path / "again"), target,
                                             own_embeddings=True)
    assert torch.equal(again.lm_head.weight, tensors["lm_head.weight"])


def test_qwen3_4b_shaped_eagle3_builds_on_meta() -> None:
    """DeepSpec's Qwen3-4B Eagle3 (config/eagle3/eagle3_qwen3_4b.py: layers 1, 9, 17, 25, 33,
    ttt_length 7, one draft layer) on a Qwen3-4B-shaped target: fc reads 5 x 2560, the chain is 7
    long and stops at the target's two end ids (generation_config.json)."""
    assert released_config.RELEASED_DRAFTERS["deepseek-ai/eagle3_qwen3_4b_ttt7"] == "Qwen/Qwen3-4B"
    config = Qwen3Config.from_pretrained(QWEN3_4B)
    with torch.device("meta"):
        shell = Qwen3ForCausalLM(config)
    shell.generation_config = GenerationConfig.from_pretrained(QWEN3_4B)
    released = released_config.parse_released_config(deepspec_config(shell, [1, 9, 17, 25, 33]))
    drafter = checkpoints.build_drafter(released, shell, dtype=torch.bfloat16)
    assert drafter.fc.weight.shape == (2560, 5 * 2560) and drafter.fc.weight.device.type == "meta"
    assert drafter.layers[0].self_attn.q_proj.weight.shape == (32 * 128, 2 * 2560)
    assert drafter.gamma == 7 and drafter.end_ids == (151645, 151643)
    # fc, q/k/v (2 x 2560 inputs), o, the MLP, four RMSNorms of 2560 and q/k norms of 128: about 149 M
    expected = 2560 * 12800 + 5120 * (4096 + 2 * 1024) + 4096 * 2560 + 3 * 2560 * 9728 + 4 * 2560 + 2 * 128
    assert sum(p.numel() for p in drafter.parameters()) == expected


# ---------------------------------------------------------------------------------------- clear errors


def _no_weights_read(*args, **kwargs):
    raise AssertionError("a tensor was read before the checks")


def _edit_config(**fields):
    return lambda config, tensors: config.update(fields)


def _drop(key):
    return lambda config, tensors: tensors.pop(key)


@pytest.mark.parametrize("edit, message", [
    (_edit_config(architectures=["Qwen3DSparkModel"]), "lacks the field 'block_size'"),
    (_edit_config(architectures=["LlamaForCausalLM"]), "none of DeepSpec's drafters"),
    (_drop("layers.0.mlp.up_proj.weight"), "missing key 'layers.0.mlp.up_proj.weight'"),
    (_edit_config(target_layer_ids=[1, 2, 3]),
     r"'fc.weight' has the wrong shape: expected \[32, 96\], found \[32, 64\]"),
    (lambda config, tensors: tensors.update(d2t=torch.zeros(10, dtype=torch.long)), "reduced draft vocabulary"),
    (_edit_config(num_hidden_layers=2, draft_num_hidden_layers=2), "runs only one"),
    (_edit_config(target_layer_ids=[1, 5]), "target layer 5, the target's last"),
    (_edit_config(target_layer_ids=[1, 6]), "another target"),
    (_edit_config(vocab_size=VOCAB + 1), "another target"),
    (lambda config, tensors: config.pop("ttt_length"), "lacks the field 'ttt_length'"),
])
def test_bad_checkpoints_fail_clearly_before_any_tensor_is_read(tmp_path, target, monkeypatch, edit, message) -> None:
    config, tensors = deepspec_config(target, (1, 3)), deepspec_tensors(target, 2)
    edit(config, tensors)
    folder = write_deepspec(tmp_path / "bad", target, (1, 3), tensors=tensors, config=config)
    patch_room(monkeypatch, (checkpoints,), "read_tensors", _no_weights_read)
    monkeypatch.setattr(checkpoints, "read_rows", _no_weights_read)
    with pytest.raises(CheckpointError, match=message):
        checkpoints.load_released(folder, target)


def test_own_embeddings_need_the_checkpoints_copies(tmp_path, target, monkeypatch) -> None:
    tensors = deepspec_tensors(target, 2)
    del tensors["lm_head.weight"]
    folder = write_deepspec(tmp_path / "headless", target, (1, 3), tensors=tensors)
    patch_room(monkeypatch, (checkpoints,), "read_tensors", _no_weights_read)
    with pytest.raises(CheckpointError, match="missing key 'lm_head.weight'"):
        checkpoints.load_released(folder, target, own_embeddings=True)


# ---------------------------------------------------------------------------------------- the early stop


def test_the_chain_stops_after_its_first_end_id(target) -> None:
    """DeepSpec's _propose: sample, append, break at a stop id; the stop id stays in the draft and
    the tokens before it are the ones the unstopped chain drafts. No end ids (the toy default):
    always gamma tokens."""
    drafter = EagleDrafter(target, DrafterConfig((1, 3), gamma=7), seed=5)
    assert drafter.end_ids == ()
    prompt = torch.randint(0, VOCAB, (8,), generator=torch.Generator().manual_seed(3))

    def draft(end_ids):
        drafter.end_ids = end_ids
        drafter.start(prompt[:-1], target_hidden(target, prompt[:-1], drafter.target_layer_ids))
        return drafter.draft(prompt, 7, 1.0, torch.Generator().manual_seed(9))

    full = draft(())
    tokens = full.tokens.tolist()
    assert len(tokens) == 7
    stop = next(j for j in range(1, 7) if tokens[j] not in tokens[:j])
    for ends, length in [([tokens[stop]], stop + 1), ([VOCAB - 1, tokens[0]], 1)]:
        short = draft(ends)
        assert short.tokens.tolist() == tokens[:length]
        assert torch.equal(short.probs, full.probs[:length])


class ChainOracle:
    """A drafter that drafts the target's greedy continuation `full` token by token and stops after
    an end id, as DeepSpec's Eagle3 chain does; at the generated index `swap` it drafts `swap_id`
    instead of the greedy token (an end id the target rejects). Records every draft's length."""

    target_layer_ids = None

    def __init__(self, full: list[int], vocab_size: int, end_ids, swap: int | None = None, swap_id: int = -1):
        self.full, self.vocab_size, self.end_ids = full, vocab_size, set(end_ids)
        self.swap, self.swap_id, self.lengths = swap, swap_id, []

    def start(self, prompt_ids, target_hidden):
        self.prompt_length = len(prompt_ids)

    def draft(self, context_ids, gamma, temperature, generator):
        done = len(context_ids) - self.prompt_length  # generated tokens so far
        tokens = []
        for index in range(done, done + gamma):
            tokens.append(self.swap_id if index == self.swap else self.full[index])
            if tokens[-1] in self.end_ids:
                break
        self.lengths.append(len(tokens))
        return Draft(torch.tensor(tokens), F.one_hot(torch.tensor(tokens), self.vocab_size).float())

    def accept(self, n_accepted, new_target_hidden):
        pass


def deepspec_metrics(proposal_lengths, accepted_draft_lengths, acceptance_lengths, max_proposal_tokens):
    """BaseEvaluator.allreduce_response_metrics and build_metrics_row (deepspec/eval/base_evaluator.py)
    on one response: acceptance length (tau), draft tokens per proposal, accept_rate@k."""
    proposals_at_pos, accepted_at_pos = [0] * max_proposal_tokens, [0] * max_proposal_tokens
    for proposal_length, accepted in zip(proposal_lengths, accepted_draft_lengths):
        for pos in range(max_proposal_tokens):
            proposals_at_pos[pos] += proposal_length > pos
            accepted_at_pos[pos] += accepted > pos
    rates = [a / p if p else np.nan for a, p in zip(accepted_at_pos, proposals_at_pos)]
    count = len(proposal_lengths)
    return sum(acceptance_lengths) / count, sum(proposal_lengths) / count, rates


GAMMA = 4


@pytest.fixture(scope="module")
def greedy(target) -> tuple[torch.Tensor, list[int]]:
    prompt = torch.tensor([5, 17, 33, 2, 40, 9])
    return prompt, autoregressive_generate(target, prompt, 60, 0.0, None).tolist()


def _first_seen(tokens: list[int]) -> dict[int, int]:
    first = {}
    for index, token in enumerate(tokens):
        first.setdefault(token, index)
    return first


@pytest.mark.parametrize("slot", [0, 1, 2])
def test_an_accepted_end_id_mid_chain_is_counted_as_deepspec_counts_it(target, greedy, slot) -> None:
    """The chain stops at the end id in slot `slot` < gamma - 1 of its round: the engine verifies
    the short draft, the target accepts it all and generation ends there. DeepSpec
    (verify_draft_tokens, generate_decoding_sample): proposal length = accepted = slot + 1, an
    acceptance length without the bonus; every earlier round gamma drafts and gamma + 1 tokens."""
    prompt, full = greedy
    index = next(i for t, i in _first_seen(full).items() if i >= 6 and (i - 1) % (GAMMA + 1) == slot)
    end = full[index]
    drafter = ChainOracle(full, VOCAB, [end])
    rollout = speculative_generate(target, drafter, prompt, 60, GAMMA, 0.0, None, eos_token_id=end)
    assert rollout.tokens.tolist() == full[: index + 1]
    rounds_before = (index - 1) // (GAMMA + 1)
    assert drafter.lengths == [GAMMA] * rounds_before + [slot + 1]  # the chain really stopped
    assert rollout.rounds.proposed.tolist() == drafter.lengths
    assert rollout.rounds.accepted.tolist() == drafter.lengths
    assert rollout.rounds.ended_in_draft.tolist() == [False] * rounds_before + [True]
    tau_deepspec, per_proposal, rates = deepspec_metrics(
        drafter.lengths, drafter.lengths, [GAMMA + 1] * rounds_before + [slot + 1], GAMMA)
    assert tau(rollout.rounds) == pytest.approx(tau_deepspec)
    assert rollout.rounds.proposed.mean() == pytest.approx(per_proposal)
    np.testing.assert_allclose(prefix_survival(rollout.rounds, GAMMA), rates)


@pytest.mark.parametrize("slot", [0, 2])
def test_a_rejected_end_id_ends_the_draft_not_the_generation(target, greedy, slot) -> None:
    """The chain drafts an end id that the target does not produce (slot `slot` of the second
    round) and stops there: the round proposes slot + 1 drafts, keeps slot, adds the target's
    correction (acceptance length slot + 1, DeepSpec's accepted + 1), and generation goes on to
    the target's greedy output."""
    prompt, full = greedy
    absent = next(t for t in range(VOCAB) if t not in full)
    swap = 1 + (GAMMA + 1) + slot  # generated index of the second round's slot
    drafter = ChainOracle(full, VOCAB, [absent], swap=swap, swap_id=absent)
    rollout = speculative_generate(target, drafter, prompt, 40, GAMMA, 0.0, None, eos_token_id=absent)
    assert rollout.tokens.tolist() == full[:40]
    assert drafter.lengths[:3] == [GAMMA, slot + 1, GAMMA]
    assert rollout.rounds.proposed.tolist() == drafter.lengths
    accepted = rollout.rounds.accepted.tolist()
    assert accepted[:3] == [GAMMA, slot, GAMMA] and not rollout.rounds.ended_in_draft.any()
    acceptance = [a + 1 for a in accepted]
    tau_deepspec, _, rates = deepspec_metrics(drafter.lengths, accepted, acceptance, GAMMA)
    assert tau(rollout.rounds) == pytest.approx(tau_deepspec)
    np.testing.assert_allclose(prefix_survival(rollout.rounds, GAMMA), rates)


# ---------------------------------------------------------------------------------------- greedy equality


@pytest.fixture(scope="module")
def trained() -> tuple[Qwen3ForCausalLM, EagleDrafter]:
    """An EagleDrafter trained briefly on a tiny target's greedy replies (which loop), so that its
    drafts are often accepted: a few seconds."""
    target = tiny_target(layers=3, vocab=48, logit_scale=4.0)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 48, (4,), generator=generator) for _ in range(32)]
    sequences = [torch.cat([p, autoregressive_generate(target, p, 36, 0.0, None)]) for p in prompts]
    drafter = EagleDrafter(target, DrafterConfig((0, 1), gamma=GAMMA), seed=1)
    train_drafter(drafter, target, TrainingSequences(sequences, [4] * 32, 0),
                  DrafterTrainConfig(steps=150, sequences_per_batch=8, warmup_steps=10, lr=3e-3))
    return target, drafter


def _spy_lengths(drafter, monkeypatch) -> list[int]:
    lengths, real = [], drafter.draft

    def draft(*args):
        out = real(*args)
        lengths.append(out.gamma)
        return out

    monkeypatch.setattr(drafter, "draft", draft)
    return lengths


def test_greedy_output_is_the_targets_with_an_early_stopping_eagle(trained, monkeypatch) -> None:
    """T = 0 with the Eagle chain stopping at end ids: (a) ids that do not end generation, so many
    drafts are short and partly accepted; (b) the target's end id, shared by the engine and the
    drafter as in DeepSpec. Both give exactly the target's greedy output."""
    target, drafter = trained
    prompts = [torch.randint(0, 48, (5,), generator=torch.Generator().manual_seed(s)) for s in range(100, 106)]
    outputs = [autoregressive_generate(target, p, 40, 0.0, None) for p in prompts]
    counts = np.bincount(torch.cat(outputs).numpy(), minlength=48)
    frequent = np.argsort(-counts)[:3].tolist()
    lengths = _spy_lengths(drafter, monkeypatch)
    short_and_kept = 0
    try:
        drafter.end_ids = frequent
        for prompt, expected in zip(prompts, outputs):
            lengths.clear()
            rollout = speculative_generate(target, drafter, prompt, 40, GAMMA, 0.0, None)
            assert torch.equal(rollout.tokens, expected)
            assert rollout.rounds.proposed.tolist() == lengths
            short = rollout.rounds.proposed < GAMMA
            short_and_kept += int((rollout.rounds.accepted[short] > 0).sum())
        assert short_and_kept >= 3, "the test needs short drafts with accepted tokens"
        ended = 0
        for prompt, expected in zip(prompts, outputs):
            # prompts that already hold the reply's loop, so that the drafter predicts its tokens
            prompt = torch.cat([prompt, expected[:20]])
            expected = autoregressive_generate(target, prompt, 20, 0.0, None)
            for end, first in _first_seen(expected.tolist()).items():
                if first < 2:  # the prefill's token, or ended before a draft could hold it
                    continue
                drafter.end_ids = [end]
                rollout = speculative_generate(target, drafter, prompt, 20, GAMMA, 0.0, None, eos_token_id=end)
                assert torch.equal(rollout.tokens, expected[: first + 1])
                ended += int(rollout.rounds.ended_in_draft[-1] and rollout.rounds.proposed[-1] < GAMMA)
        assert ended >= 1, "some chain should stop at the end id mid-chain and be accepted"
    finally:
        drafter.end_ids = ()


def test_a_draft_longer_than_gamma_or_empty_is_refused(target) -> None:
    class Bad(ChainOracle):
        def draft(self, context_ids, gamma, temperature, generator):
            tokens = torch.tensor(self.full[: self.n], dtype=torch.long)
            return Draft(tokens, F.one_hot(tokens, VOCAB).float())

    for n in (0, GAMMA + 1):
        bad = Bad(list(range(10)), VOCAB, [])
        bad.n = n
        with pytest.raises(ValueError, match=f"returned {n} draft tokens; expected between 1 and the {GAMMA}"):
            speculative_generate(target, bad, torch.tensor([1, 2, 3]), 10, GAMMA, 0.0, None)
