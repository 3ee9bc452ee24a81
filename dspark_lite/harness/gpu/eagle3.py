"""DeepSpec's Eagle3 drafters in dspark_lite's EAGLE-style drafter, and ours in their layout
(chapter 07).

DeepSpec's Eagle3 drafters (deepseek-ai/eagle3_qwen3_{4b,8b,14b}_ttt7; architectures
Qwen3Eagle3Model or Eagle3DraftModel) load into `eagle.EagleDrafter` through
`load_released_eagle3`, which `load_released` calls for them; `save_released_eagle3` writes an
EagleDrafter in their layout. The facts they rest on head the Eagle3 section at the end.
"""
from __future__ import annotations

import contextlib
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import PretrainedConfig, PreTrainedModel

from ...checks import end_ids as checked_end_ids
from ...eagle import EagleDrafter
from ...hidden_drafter import DrafterConfig, SharedTargetWeights
from .checkpoints import (
    CONFIG_FILE,
    SHARED_KEYS,
    check_keys,
    check_target,
    config_json,
    default_dtype,
    differs_from_target,
    layer_shape,
    model_place,
    resolve_source,
    rope_in_float32,
    target_dict,
    warn_if_shared_differ,
)
from .weights import WEIGHTS_FILE, CheckpointError, checkpoint_shapes, read_tensors

# ========================================================================== Eagle3
#
# DeepSpec's released Eagle3 drafters, read into `eagle.EagleDrafter` (issue 31, item 6).
# Facts taken from deepseek-ai/DeepSpec (commit afdfa7c):
#
# * deepspec/modeling/eagle3/qwen3/modeling.py, `Qwen3Eagle3Model`: modules embed_tokens
#   (nn.Embedding [vocab, hidden]), fc (nn.Linear(len(target_layer_ids) * hidden, hidden, bias=False):
#   weight [hidden, n_layers * hidden]), layers.N (`Qwen3Eagle3DecoderLayer`: hidden_norm,
#   input_layernorm, post_attention_layernorm, self_attn.{q,k,v}_proj of input 2 * hidden,
#   self_attn.o_proj, self_attn.{q,k}_norm [head_dim], mlp.{gate,up,down}_proj), norm, rotary_emb
#   (inv_freq, not saved) and lm_head (nn.Linear(hidden, vocab, bias=False): the FULL vocabulary;
#   there is no d2t / t2d draft-vocabulary map). logits = lm_head(norm(h)). Required config
#   fields: target_layer_ids, ttt_length, step_loss_decay.
# * deepspec/trainer/eagle3_trainer.py: embed_tokens and lm_head are copied from the target and
#   frozen (`initialize_embeddings_and_head(..., freeze=True)`), so a released checkpoint carries
#   the target's own two matrices; deepspec/trainer/ckpt_manager.py saves the draft model's whole
#   state_dict with `save_pretrained` (config.json + model.safetensors, keys as the module names).
# * deepspec/modeling/eagle3/qwen3/config.py, `build_draft_config`: the config is a deep copy of
#   the target's with architectures ["Qwen3Eagle3Model"], num_target_layers, num_hidden_layers =
#   draft_num_hidden_layers, layer_types, target_model_name_or_path, target_layer_ids, ttt_length,
#   step_loss_decay, draft_num_hidden_layers and tie_word_embeddings false.
#   deepspec/modeling/eagle3/common.py validates exactly 5 strictly increasing target layers;
#   we read the ids (and so their number and fc's width) from the config instead of assuming 5.
# * config/eagle3/eagle3_qwen3_4b.py: target Qwen/Qwen3-4B, target_layer_ids [1, 9, 17, 25, 33],
#   ttt_length 7, step_loss_decay 0.8, draft_num_hidden_layers 1.
# * eval.py, EVALUATORS: architectures[0] "Qwen3Eagle3Model" or "Eagle3DraftModel" both run
#   `Qwen3Eagle3Evaluator`, which loads `Qwen3Eagle3Model.from_pretrained` (the same layout).
# * deepspec/eval/eagle3/evaluator.py: the evaluator requires draft_num_hidden_layers == 1 (its
#   cache extension is not causal) and that no target layer id is the target's last
#   (`assert_no_final_target_layer`); `_propose` runs the chain for ttt_length steps and breaks
#   after drafting a stop id (kept in the draft); its stop ids are the target's generation
#   config eos ids (base_evaluator.py, `resolve_stop_token_ids`). The accounting of the shorter
#   draft is `speculative.speculative_generate`'s.

EAGLE3_ARCHITECTURE = "Qwen3Eagle3Model"  # what DeepSpec's trainer writes
EAGLE3_ARCHITECTURES: tuple[str, ...] = (EAGLE3_ARCHITECTURE, "Eagle3DraftModel")  # what eval.py accepts
EAGLE3_STEP_LOSS_DECAY = 0.8  # config/eagle3/eagle3_qwen3_4b.py (a training setting; unused at inference)
# A SpecForge-style Eagle3 with a reduced draft vocabulary carries these; DeepSpec's does not.
EAGLE3_DRAFT_VOCAB_KEYS: tuple[str, ...] = ("d2t", "t2d")


@dataclass(frozen=True)
class ReleasedEagle3Config:
    """The fields of a released Eagle3 drafter's config.json that decide its shape.

    target_layer_ids: the fused target layers (their number sets fc's width); ttt_length: the
    chain's length (DeepSpec drafts up to ttt_length tokens a round); num_draft_layers: the
    draft decoder layers (DeepSpec evaluates 1). target_* as in `ReleasedConfig`.
    """

    architecture: str
    target_layer_ids: tuple[int, ...]
    ttt_length: int
    num_draft_layers: int
    step_loss_decay: float | None
    vocab_size: int
    hidden_size: int
    num_target_layers: int | None
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float | None


def _eagle3_field(raw: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in raw:
        raise CheckpointError(f"{where}: config.json lacks the field {name!r}; expected a DeepSpec Eagle3 config "
                              "(architectures Qwen3Eagle3Model, target_layer_ids, ttt_length, hidden_size, ...)")
    return raw[name]


def released_architecture(folder: str | Path) -> str | None:
    """architectures[0] of `folder`/config.json, or None when it cannot be read.
    DeepSpec's eval.py picks its evaluator by this name."""
    try:
        arch = json.loads((Path(folder) / CONFIG_FILE).read_text()).get("architectures") or [None]
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return arch[0] if isinstance(arch, list) and arch else None


def parse_eagle3_config(raw: Mapping[str, Any], where: str = "config.json") -> ReleasedEagle3Config:
    """Read a released Eagle3 config dict; CheckpointError names a wrong
    architecture, a missing field or a shape DeepSpec's evaluator does not run."""
    arch = raw.get("architectures") or []
    if not arch or arch[0] not in EAGLE3_ARCHITECTURES:
        raise CheckpointError(f"{where}: architectures {arch} is not one of DeepSpec's Eagle3 names "
                              f"{list(EAGLE3_ARCHITECTURES)}; a Qwen3DSparkModel (DSpark/DFlash) loads with "
                              "load_released")
    layer_ids = _eagle3_field(raw, "target_layer_ids", where)
    if not isinstance(layer_ids, (list, tuple)) or not layer_ids:
        raise CheckpointError(f"{where}: target_layer_ids {layer_ids!r} must be a non-empty list of target layer ids")
    ttt_length = int(_eagle3_field(raw, "ttt_length", where))
    if ttt_length < 1:
        raise CheckpointError(f"{where}: ttt_length {ttt_length} must be >= 1 (the chain's length)")
    layers = int(_eagle3_field(raw, "num_hidden_layers", where))
    declared = raw.get("draft_num_hidden_layers")
    if declared is not None and int(declared) != layers:
        raise CheckpointError(f"{where}: draft_num_hidden_layers {declared} differs from num_hidden_layers {layers}")
    if layers != 1:
        raise CheckpointError(f"{where}: {layers} draft layers; DeepSpec's Eagle3 evaluator runs only one "
                              "(deepspec/eval/eagle3/evaluator.py requires draft_num_hidden_layers == 1)")
    decay = raw.get("step_loss_decay")
    return ReleasedEagle3Config(
        architecture=str(arch[0]), target_layer_ids=tuple(int(i) for i in layer_ids), ttt_length=ttt_length,
        num_draft_layers=layers, step_loss_decay=None if decay is None else float(decay),
        **layer_shape(raw, _eagle3_field, where),
    )


def read_eagle3_config(folder: str | Path) -> ReleasedEagle3Config:
    """parse_eagle3_config of `folder`/config.json."""
    return parse_eagle3_config(*config_json(folder, "released Eagle3 drafter"))


def eagle3_drafter_config(released: ReleasedEagle3Config, target_config: PretrainedConfig,
                          own_embeddings: bool = False) -> DrafterConfig:
    """The EagleConfig of a released Eagle3 on this target, after checking that it
    was built for a target of this shape and reads no final layer (DeepSpec's evaluator refuses
    one: `output_hidden_states` holds the final-normed state there)."""
    check_target(released, target_config, "the Eagle3 drafter")
    target = target_dict(target_config)
    last = int(target["num_hidden_layers"]) - 1
    if last in released.target_layer_ids:
        raise CheckpointError(f"the Eagle3 drafter reads target layer {last}, the target's last; DeepSpec's evaluator "
                              "refuses that (assert_no_final_target_layer): hidden_states there is final-normed")
    return DrafterConfig(
        target_layer_ids=released.target_layer_ids, gamma=released.ttt_length,
        num_layers=released.num_draft_layers,
        intermediate_size=differs_from_target(released.intermediate_size, int(target["intermediate_size"])),
        num_heads=differs_from_target(released.num_attention_heads, int(target["num_attention_heads"])),
        num_kv_heads=differs_from_target(released.num_key_value_heads, int(target.get("num_key_value_heads") or 0)),
        head_dim=differs_from_target(released.head_dim, int(target.get("head_dim") or 0)),
        own_embeddings=own_embeddings,
    )


def target_end_ids(target: PreTrainedModel) -> tuple[int, ...]:
    """The ids that end a reply for `target`: its generation config's eos_token_id,
    else its config's, as DeepSpec's `resolve_stop_token_ids` reads them; () when neither has one."""
    for config in (getattr(target, "generation_config", None), target.config):
        ids = getattr(config, "eos_token_id", None)
        if ids is not None:
            return checked_end_ids(ids)
    return ()


def build_eagle3(released: ReleasedEagle3Config, target: PreTrainedModel, seed: int = 0,
                 dtype: torch.dtype | None = None, own_embeddings: bool = False,
                 end_ids: int | list[int] | tuple[int, ...] | None = None) -> EagleDrafter:
    """An EagleDrafter of the released shape on `target`, with random weights, in
    `dtype` (default: the target's) on the target's device (`meta` gives `meta`). `end_ids` stop
    its chain (None: `target_end_ids(target)`; () never stops early). RoPE stays float32."""
    cfg = eagle3_drafter_config(released, target.config, own_embeddings)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    place = torch.device("meta") if device.type == "meta" else contextlib.nullcontext()
    with default_dtype(dtype if dtype.is_floating_point else None), place:
        drafter = EagleDrafter(target, cfg, seed, end_ids=target_end_ids(target) if end_ids is None else end_ids)
    return rope_in_float32(drafter.to(dtype))


def eagle3_expected_shapes(drafter: EagleDrafter) -> dict[str, tuple[int, ...]]:
    """Every key a released Eagle3 checkpoint of this drafter holds, with its shape:
    DeepSpec's names are ours (the identity), plus embed_tokens / lm_head [vocab, hidden] (the
    drafter's own with `own_embeddings`, else copies of the target's that it shares)."""
    shapes = {key: tuple(value.shape) for key, value in drafter.state_dict().items()}
    shapes.update({key: (drafter.vocab_size, drafter.hidden_size) for key in SHARED_KEYS})
    return shapes


def load_released_eagle3(source: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None,
                         download: bool = True, check_shared: bool = True, own_embeddings: bool = False,
                         end_ids: int | list[int] | tuple[int, ...] | None = None) -> EagleDrafter:
    """A released DeepSpec Eagle3 drafter (folder or hub id, e.g. deepseek-ai/eagle3_qwen3_4b_ttt7)
    as an `EagleDrafter` on `target`, in `dtype` (default: the target's), on the
    target's device. `load_released` calls this for either Eagle3 architecture name.

    What is read (DeepSpec's layout, see the facts above this section): config.json with
    architectures "Qwen3Eagle3Model" or "Eagle3DraftModel", target_layer_ids (any number: fc's
    width is len(target_layer_ids) * hidden_size, read, not assumed), ttt_length (the chain: the
    drafter's `block_size`; run the engine with gamma = ttt_length, as DeepSpec does), one draft
    layer; model.safetensors with embed_tokens, fc, layers.0.*, norm and a full-vocabulary
    lm_head (no d2t / t2d).

    Checks, in order and before any tensor is read: the config (architecture, fields, one draft
    layer), the target (CheckpointError saying "another target", or a final target layer read),
    then every key and shape (missing, unexpected, mis-shaped; a draft-vocabulary map named as
    such). The drafter is built on the `meta` device and its weights are read straight onto the
    target's device; RoPE frequencies are float32.

    own_embeddings: False (default) shares the target's embedding and LM head, which DeepSpec's
        trainer copied from the target and froze, so the checkpoint's are the same matrices (with
        `check_shared`, 16 rows of each are compared and a warning names a difference); True reads
        the checkpoint's own two matrices into the drafter (as DeepSpec's evaluator uses them;
        2 x 0.78 GB more for Qwen3-4B in bf16).
    end_ids: the ids that stop the chain (kept in the draft); None takes the target's
        generation-config end ids (`target_end_ids`), as DeepSpec does; () never stops early.
    """
    folder = resolve_source(source, download)
    released = read_eagle3_config(folder)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    with torch.device("meta"):
        shell = type(target)(target.config)
    drafter = build_eagle3(released, shell, dtype=dtype, own_embeddings=own_embeddings, end_ids=())
    drafter.shared = SharedTargetWeights.of(target)
    expected = eagle3_expected_shapes(drafter)
    found = checkpoint_shapes(folder)
    vocab_maps = [key for key in EAGLE3_DRAFT_VOCAB_KEYS if key in found]
    if vocab_maps:
        raise CheckpointError(f"{folder}: {vocab_maps} map a reduced draft vocabulary (a SpecForge-style Eagle3); "
                              "DeepSpec's Qwen3Eagle3Model has a full-vocabulary lm_head and dspark_lite's "
                              "EagleDrafter drafts over the target's whole vocabulary")
    absent = [key for key in SHARED_KEYS if key not in found]
    if own_embeddings and absent:
        raise CheckpointError(f"{folder}: missing key {absent[0]!r} (expected shape {list(expected[absent[0]])}); "
                              "own_embeddings=True reads the checkpoint's own embedding and LM head")
    check_keys(found, expected, str(folder))
    if check_shared and not own_embeddings and not absent:
        warn_if_shared_differ(drafter, folder)
    keys = set(expected) if own_embeddings else set(expected) - set(SHARED_KEYS)
    tensors = read_tensors(folder, keys, device)
    drafter.load_state_dict({key: value.to(dtype) for key, value in tensors.items()}, strict=True, assign=True)
    if own_embeddings:
        drafter.embed_tokens.requires_grad_(False)
        drafter.lm_head.requires_grad_(False)
    drafter.end_ids = target_end_ids(target) if end_ids is None else end_ids
    return rope_in_float32(drafter).eval()


def eagle3_config_dict(drafter: EagleDrafter, target_config: PretrainedConfig | None = None,
                       dtype: torch.dtype | None = None, architecture: str = EAGLE3_ARCHITECTURE) -> dict[str, Any]:
    """The config.json DeepSpec's trainer writes for this Eagle3 drafter: the draft
    layers' Qwen3 config (a copy of the target's, transformers' diff form) plus DeepSpec's
    fields (`build_draft_config`). Without `target_config`, num_target_layers and
    target_model_name_or_path are left out (the loader then does not check the layer count)."""
    if architecture not in EAGLE3_ARCHITECTURES:
        raise ValueError(f"architecture {architecture!r} is not one of {list(EAGLE3_ARCHITECTURES)}")
    config = copy.deepcopy(drafter.layer_config)
    config.architectures = [architecture]
    config.tie_word_embeddings = False
    config.dtype = dtype or drafter.dtype
    raw = json.loads(config.to_json_string(use_diff=True))
    layers = len(drafter.layers)
    raw.update({"target_layer_ids": list(drafter.target_layer_ids), "ttt_length": drafter.gamma,
                "step_loss_decay": EAGLE3_STEP_LOSS_DECAY, "draft_num_hidden_layers": layers,
                "num_hidden_layers": layers, "layer_types": ["full_attention"] * layers})
    if target_config is not None:
        raw["num_target_layers"] = int(target_dict(target_config)["num_hidden_layers"])
        name = getattr(target_config, "_name_or_path", "")
        if name:
            raw["target_model_name_or_path"] = str(name)
    return raw


def save_released_eagle3(drafter: EagleDrafter, folder: str | Path, target_config: PretrainedConfig | None = None,
                         dtype: torch.dtype | None = None, architecture: str = EAGLE3_ARCHITECTURE) -> Path:
    """Write an EagleDrafter in DeepSpec's released Eagle3 layout: `folder`/config.json
    (`eagle3_config_dict`) and `folder`/model.safetensors with DeepSpec's key names: embed_tokens,
    fc, layers.N.*, norm and lm_head (the drafter's own, or copies of the target's it shares).
    `dtype` (default: the drafter's; releases are bf16). Returns the folder;
    `load_released(folder, target)` (or `load_released_eagle3`) reads it back."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or drafter.dtype
    tensors = {key: value.detach().to("cpu", dtype).contiguous() for key, value in drafter.state_dict().items()}
    if not drafter.cfg.own_embeddings:
        tensors["embed_tokens.weight"] = drafter.shared.embed_tokens.weight.detach().to("cpu", dtype).clone()
        tensors["lm_head.weight"] = drafter.shared.lm_head.weight.detach().to("cpu", dtype).clone()
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    raw = eagle3_config_dict(drafter, target_config, dtype, architecture)
    (folder / CONFIG_FILE).write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    return folder
