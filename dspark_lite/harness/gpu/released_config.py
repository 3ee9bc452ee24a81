"""The config.json of DeepSpec's released drafters, DSpark, DFlash and Eagle3, read into one
`ReleasedConfig` and turned into dspark_lite's one `DrafterConfig`, and written back from our
drafters (chapter 07). `checkpoints` loads and saves the weights beside it.

DeepSpec (deepseek-ai/DeepSpec, commit afdfa7c) releases its Table 1 drafters on the hub:
deepseek-ai/{dspark,dflash}_qwen3_{4b,8b,14b}_block7 and deepseek-ai/eagle3_qwen3_{4b,8b,14b}_ttt7.
Each is what `save_pretrained` writes: a config.json (a copy of the target's Qwen3 config with
`num_hidden_layers` set to the draft layers, `tie_word_embeddings` false) and bf16 safetensors
whose keys are the module names. The fields each kind adds:

* DSpark and DFlash (architectures ["Qwen3DSparkModel"]): num_target_layers, block_size,
  mask_token_id, target_layer_ids, num_anchors (a training setting), enable_confidence_head,
  confidence_head_with_markov, markov_rank (0 for DFlash) and markov_head_type ("vanilla" or
  "rnn"). DeepSpec names the head `markov_head` and its tables `markov_w1` / `markov_w2`
  whichever head it is; `KEY_MAP` maps those names to ours.
* Eagle3 (architectures ["Qwen3Eagle3Model"], or "Eagle3DraftModel", which eval.py accepts too):
  num_target_layers, target_layer_ids, ttt_length (the chain's length), step_loss_decay,
  draft_num_hidden_layers, layer_types and target_model_name_or_path
  (deepspec/modeling/eagle3/qwen3/config.py, `build_draft_config`). Its key names are ours. The
  evaluator runs one draft layer only and refuses a target layer id that is the target's last
  (deepspec/eval/eagle3/evaluator.py); its lm_head covers the full vocabulary (no d2t / t2d map).

Both kinds carry `embed_tokens.weight` and `lm_head.weight`, copies of the target's own (Eagle3's
trainer copies and freezes them): `SHARED_KEYS`. Our drafters share the target's instead.
Where a file's block is `block_size` (DSpark, DFlash) or `ttt_length` (Eagle3), ours is gamma.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn
from transformers import PretrainedConfig

from ...eagle import EagleDrafter
from ...hidden_drafter import DrafterConfig
from .weights import WEIGHTS_FILE, CheckpointError

# The released drafters and the target each was trained against (DeepSpec's README, Table 1 and
# "Released checkpoints").
RELEASED_DRAFTERS: dict[str, str] = {
    "deepseek-ai/dspark_qwen3_4b_block7": "Qwen/Qwen3-4B",
    "deepseek-ai/dflash_qwen3_4b_block7": "Qwen/Qwen3-4B",
    "deepseek-ai/dspark_qwen3_8b_block7": "Qwen/Qwen3-8B",
    "deepseek-ai/dflash_qwen3_8b_block7": "Qwen/Qwen3-8B",
    "deepseek-ai/dspark_qwen3_14b_block7": "Qwen/Qwen3-14B",
    "deepseek-ai/dflash_qwen3_14b_block7": "Qwen/Qwen3-14B",
    "deepseek-ai/eagle3_qwen3_4b_ttt7": "Qwen/Qwen3-4B",
    "deepseek-ai/eagle3_qwen3_8b_ttt7": "Qwen/Qwen3-8B",
    "deepseek-ai/eagle3_qwen3_14b_ttt7": "Qwen/Qwen3-14B",
}

CONFIG_FILE = "config.json"
DSPARK_ARCHITECTURE = "Qwen3DSparkModel"  # DSpark and DFlash
EAGLE3_ARCHITECTURES: tuple[str, ...] = ("Qwen3Eagle3Model", "Eagle3DraftModel")  # what DeepSpec's eval.py accepts
NUM_ANCHORS = 512  # DeepSpec's DSpark training setting (anchors per sequence); unused at inference
EAGLE3_STEP_LOSS_DECAY = 0.8  # config/eagle3/eagle3_qwen3_4b.py (a training setting; unused at inference)
EAGLE3_DRAFT_VOCAB_KEYS: tuple[str, ...] = ("d2t", "t2d")  # a SpecForge-style reduced vocabulary; not DeepSpec's

# Released key prefix -> our state_dict prefix, first match wins. Every other name is DeepSpec's.
KEY_MAP: tuple[tuple[str, str], ...] = (
    ("markov_head.markov_w1.", "head.w1."),
    ("markov_head.markov_w2.", "head.w2."),
    ("markov_head.", "head."),
)
# Released keys that are copies of the target's weights: checked, never loaded into a drafter that
# shares the target's.
SHARED_KEYS: dict[str, str] = {
    "embed_tokens.weight": "the target's input embedding",
    "lm_head.weight": "the target's LM head",
}
# DeepSpec's markov_head_type -> ours ("gated" has no dspark_lite class).
HEAD_TYPES: dict[str, str] = {"vanilla": "markov", "rnn": "rnn"}


@dataclass(frozen=True)
class ReleasedConfig:
    """What decides a released drafter's shape, whatever its kind.

    kind: "dspark" (a Markov or RNN head), "dflash" (markov_rank 0) or "eagle3".
    gamma: the file's block_size (DSpark, DFlash) or ttt_length (Eagle3).
    head_type / head_rank: ours ("markov" for DeepSpec's "vanilla", or "rnn") and markov_rank;
        None / 0 without a head. mask_token_id: None for Eagle3.
    target_*: the target it was built for (num_target_layers None when the file lacks it). The
    other layer dims are the draft layers'.
    """

    kind: str
    architecture: str
    gamma: int
    num_draft_layers: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int | None
    head_type: str | None
    head_rank: int
    confidence_head: bool
    vocab_size: int
    hidden_size: int
    num_target_layers: int | None
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float | None


# ========================================================================== reading


def parse_released_config(raw: Mapping[str, Any], where: str = "config.json") -> ReleasedConfig:
    """A released config dict as a ReleasedConfig; CheckpointError names an unknown architecture, a
    missing field, or a shape dspark_lite (or DeepSpec's evaluator) does not run."""
    arch = (raw.get("architectures") or [DSPARK_ARCHITECTURE])[0]
    if arch not in (DSPARK_ARCHITECTURE, *EAGLE3_ARCHITECTURES):
        raise CheckpointError(f"{where}: architectures {raw.get('architectures')} is none of DeepSpec's drafters "
                              f"({DSPARK_ARCHITECTURE} for DSpark and DFlash, or {list(EAGLE3_ARCHITECTURES)})")
    eagle3 = arch in EAGLE3_ARCHITECTURES

    def field(name: str) -> Any:
        if name not in raw:
            fields = "ttt_length, target_layer_ids, ..." if eagle3 else "block_size, target_layer_ids, mask_token_id, ..."
            raise CheckpointError(f"{where}: config.json lacks the field {name!r}; expected a DeepSpec {arch} config "
                                  f"({fields})")
        return raw[name]

    layer_ids = field("target_layer_ids")
    if not isinstance(layer_ids, (list, tuple)) or not layer_ids:
        raise CheckpointError(f"{where}: target_layer_ids {layer_ids!r} must be a non-empty list of target layer ids")
    gamma = int(field("ttt_length" if eagle3 else "block_size"))
    if gamma < 1:
        raise CheckpointError(f"{where}: {'ttt_length' if eagle3 else 'block_size'} {gamma} must be >= 1")
    layers = int(field("num_hidden_layers"))
    rank = 0 if eagle3 else int(raw.get("markov_rank", 0))
    head_type = _head_type(raw, rank, where)
    confidence = bool(raw.get("enable_confidence_head", False))
    if eagle3:
        _eagle3_layers(raw, layers, where)
    elif confidence and rank == 0:
        raise CheckpointError(f"{where}: a confidence head without a Markov head (markov_rank 0) has no dspark_lite "
                              "class; DSpark's confidence head reads the Markov embedding (Eq. 7)")
    elif confidence and raw.get("confidence_head_with_markov") is False:
        raise CheckpointError(f"{where}: confidence_head_with_markov = false (a head on h_k alone) has no dspark_lite "
                              "class; dspark_lite's ConfidenceHead reads [h_k; W1[x_{k-1}]] (Eq. 7)")
    hidden, heads = int(field("hidden_size")), int(field("num_attention_heads"))
    return ReleasedConfig(
        kind="eagle3" if eagle3 else ("dspark" if rank > 0 else "dflash"), architecture=str(arch), gamma=gamma,
        num_draft_layers=layers, target_layer_ids=tuple(int(i) for i in layer_ids),
        mask_token_id=None if eagle3 else int(field("mask_token_id")), head_type=head_type, head_rank=rank,
        confidence_head=confidence, vocab_size=int(field("vocab_size")), hidden_size=hidden,
        num_target_layers=int(raw["num_target_layers"]) if raw.get("num_target_layers") is not None else None,
        intermediate_size=int(field("intermediate_size")), num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads), head_dim=int(raw.get("head_dim") or hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=rope_theta(raw))


def read_released_config(folder: str | Path) -> ReleasedConfig:
    """parse_released_config of `folder`/config.json; clear errors when it is absent or not JSON."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {folder}; expected a released drafter folder "
                                f"({CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None
    return parse_released_config(raw, str(path))


def rope_theta(config: Mapping[str, Any]) -> float | None:
    """rope_theta of a config dict, written flat (transformers 4.x) or in rope_parameters (5.x)."""
    if config.get("rope_theta") is not None:
        return float(config["rope_theta"])
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    return float(params["rope_theta"]) if isinstance(params, Mapping) and "rope_theta" in params else None


def target_dict(target_config: PretrainedConfig) -> dict[str, Any]:
    text = getattr(target_config, "text_config", None) or target_config
    return text.to_dict()


def drafter_config(released: ReleasedConfig, target_config: PretrainedConfig,
                   own_embeddings: bool = False) -> DrafterConfig:
    """Our `DrafterConfig` of a released drafter on this target, after `check_target`. Layer dims
    equal to the target's stay None (the drafter takes the target's). `own_embeddings`: an Eagle3
    reads the file's own embedding and LM head instead of sharing the target's."""
    check_target(released, target_config)
    target = target_dict(target_config)

    def unless_targets(value: int, name: str) -> int | None:
        return None if value == int(target.get(name) or 0) else value

    return DrafterConfig(
        target_layer_ids=released.target_layer_ids, gamma=released.gamma, mask_token_id=released.mask_token_id,
        num_layers=released.num_draft_layers,
        intermediate_size=unless_targets(released.intermediate_size, "intermediate_size"),
        num_heads=unless_targets(released.num_attention_heads, "num_attention_heads"),
        num_kv_heads=unless_targets(released.num_key_value_heads, "num_key_value_heads"),
        head_dim=unless_targets(released.head_dim, "head_dim"),
        **({"head_type": released.head_type, "head_rank": released.head_rank} if released.head_type else {}),
        confidence_head=released.confidence_head, own_embeddings=own_embeddings and released.kind == "eagle3")


def check_target(released: ReleasedConfig, target_config: PretrainedConfig) -> None:
    """CheckpointError ("another target") unless `released` was built for a target shaped like this
    one: vocabulary, hidden size, layer count, RMSNorm eps, RoPE base, layer ids in range (and, for
    Eagle3, not the last layer, which DeepSpec's evaluator refuses: it is final-normed there)."""
    target, name = target_dict(target_config), f"the {released.kind} drafter"
    layers = int(target["num_hidden_layers"])
    theirs = {"vocab_size": released.vocab_size, "hidden_size": released.hidden_size}
    ours = {"vocab_size": int(target["vocab_size"]), "hidden_size": int(target["hidden_size"])}
    if released.num_target_layers is not None:
        theirs["num_hidden_layers"], ours["num_hidden_layers"] = released.num_target_layers, layers
    if theirs != ours:
        raise CheckpointError(f"{name} was built for another target: it expects {theirs}, but this target has "
                              f"{ours}; load the target the drafter was trained against")
    rope = rope_theta(target)
    if abs(released.rms_norm_eps - float(target.get("rms_norm_eps", 1e-6))) > 1e-12 or (
            released.rope_theta is not None and rope is not None and abs(released.rope_theta - rope) > 1e-6):
        raise CheckpointError(f"{name} was built for another target: rms_norm_eps {released.rms_norm_eps} and "
                              f"rope_theta {released.rope_theta}, but this target has {target.get('rms_norm_eps')} "
                              f"and {rope}; dspark_lite's drafters take both from the target")
    bad = [i for i in released.target_layer_ids if not 0 <= i < layers]
    if bad:
        raise CheckpointError(f"{name} was built for another target: target_layer_ids {released.target_layer_ids} "
                              f"name layers {bad}, beyond this target's decoder layers 0..{layers - 1}")
    if released.kind == "eagle3" and layers - 1 in released.target_layer_ids:
        raise CheckpointError(f"the Eagle3 drafter reads target layer {layers - 1}, the target's last; DeepSpec's "
                              "evaluator refuses that (assert_no_final_target_layer): hidden_states there is final-normed")


# ========================================================================== keys


def released_key(our_key: str) -> str:
    """Our state_dict key -> the released key, by KEY_MAP (DeepSpec's name where no rule applies)."""
    for theirs, ours in KEY_MAP:
        if our_key.startswith(ours):
            return theirs + our_key[len(ours):]
    return our_key


def our_key(released: str) -> str:
    """The released key -> our state_dict key, by KEY_MAP."""
    for theirs, ours in KEY_MAP:
        if released.startswith(theirs):
            return ours + released[len(theirs):]
    return released


# ========================================================================== writing


def released_config_dict(drafter: nn.Module, target_config: PretrainedConfig | None = None,
                         dtype: torch.dtype | None = None, architecture: str | None = None) -> dict[str, Any]:
    """The config.json DeepSpec's trainer writes for this drafter: the draft layers' Qwen3 config
    (a copy of the target's, transformers' diff form) plus the fields of its kind (above).
    `architecture`: an Eagle3's name, one of EAGLE3_ARCHITECTURES (default the first). Without
    `target_config`, num_target_layers is left out (the reader then does not check it)."""
    eagle3 = isinstance(drafter, EagleDrafter)
    architecture = architecture or (EAGLE3_ARCHITECTURES[0] if eagle3 else DSPARK_ARCHITECTURE)
    if architecture not in (EAGLE3_ARCHITECTURES if eagle3 else (DSPARK_ARCHITECTURE,)):
        raise ValueError(f"architecture {architecture!r} does not name a {type(drafter).__name__}")
    config = copy.deepcopy(drafter.layer_config)
    config.architectures, config.tie_word_embeddings, config.dtype = [architecture], False, dtype or drafter.dtype
    raw = json.loads(config.to_json_string(use_diff=True))
    raw["target_layer_ids"] = list(drafter.target_layer_ids)
    layers = len(drafter.layers)
    if eagle3:
        raw.update({"ttt_length": drafter.gamma, "step_loss_decay": EAGLE3_STEP_LOSS_DECAY,
                    "draft_num_hidden_layers": layers, "num_hidden_layers": layers,
                    "layer_types": ["full_attention"] * layers})
    else:
        head = getattr(drafter, "head", None)
        raw.update({"block_size": drafter.gamma, "mask_token_id": drafter.mask_token_id, "num_anchors": NUM_ANCHORS,
                    "markov_rank": 0 if head is None else int(head.rank),
                    "enable_confidence_head": getattr(drafter, "confidence_head", None) is not None})
        if head is not None:
            raw["markov_head_type"] = {ours: theirs for theirs, ours in HEAD_TYPES.items()}[drafter.cfg.head_type]
        if raw["enable_confidence_head"]:
            raw["confidence_head_with_markov"] = True
    if target_config is not None:
        raw["num_target_layers"] = int(target_dict(target_config)["num_hidden_layers"])
        name = getattr(target_config, "_name_or_path", "")
        if eagle3 and name:
            raw["target_model_name_or_path"] = str(name)
    return raw


# --- checks (this module's door)


def _head_type(raw: Mapping[str, Any], rank: int, where: str) -> str | None:
    """Our head type of a DSpark config (None without a head); CheckpointError for one we lack."""
    if rank <= 0:
        return None
    theirs = raw.get("markov_head_type")
    if theirs is None:
        raise CheckpointError(f"{where}: markov_rank {rank} but no markov_head_type")
    if str(theirs).lower() not in HEAD_TYPES:
        raise CheckpointError(f"{where}: markov_head_type {theirs!r} has no dspark_lite class; supported: "
                              f"{sorted(HEAD_TYPES)}")
    return HEAD_TYPES[str(theirs).lower()]


def _eagle3_layers(raw: Mapping[str, Any], layers: int, where: str) -> None:
    """CheckpointError unless an Eagle3 config declares the one draft layer DeepSpec's evaluator runs."""
    declared = raw.get("draft_num_hidden_layers")
    if declared is not None and int(declared) != layers:
        raise CheckpointError(f"{where}: draft_num_hidden_layers {declared} differs from num_hidden_layers {layers}")
    if layers != 1:
        raise CheckpointError(f"{where}: {layers} draft layers; DeepSpec's Eagle3 evaluator runs only one "
                              "(deepspec/eval/eagle3/evaluator.py requires draft_num_hidden_layers == 1)")
