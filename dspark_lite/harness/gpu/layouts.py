"""Our drafters written in DeepSpec's released layout, and any released drafter whatever its kind
(chapter 07): `save_released` writes a DSpark or DFlash drafter exactly as DeepSpec's
`save_pretrained` does, so a tiny drafter round-trips through the real loader; `build_from_config`,
`released_shapes`, `save_any_released` and `load_released` dispatch on the architecture name
(DSpark, DFlash or Eagle3).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ...dflash import DFlashDrafter
from ...eagle import EagleDrafter
from .checkpoints import (
    load_released_dspark,
    resolve_source,
    ARCHITECTURE,
    CONFIG_FILE,
    NUM_ANCHORS,
    OURS_TO_RELEASED_HEAD,
    build_drafter,
    expected_shapes,
    read_released_config,
    released_key,
    target_dict,
)
from .eagle3 import (
    EAGLE3_ARCHITECTURES,
    build_eagle3,
    eagle3_expected_shapes,
    load_released_eagle3,
    read_eagle3_config,
    released_architecture,
    save_released_eagle3,
)
from .weights import WEIGHTS_FILE

# ========================================================================== writing our drafter


def released_config_dict(drafter: DFlashDrafter, target_config: PretrainedConfig | None = None,
                         dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The config.json DeepSpec's save_pretrained writes for this drafter: the
    draft layers' Qwen3 config (transformers' diff form) plus DeepSpec's fields. Without
    `target_config`, num_target_layers is left out (the loader then does not check it)."""
    config = copy.deepcopy(drafter.layer_config)
    config.architectures = [ARCHITECTURE]
    config.tie_word_embeddings = False
    config.dtype = dtype or drafter.dtype
    extra: dict[str, Any] = {"block_size": drafter.gamma, "mask_token_id": drafter.mask_token_id,
                             "target_layer_ids": list(drafter.target_layer_ids), "num_anchors": NUM_ANCHORS}
    if target_config is not None:
        extra["num_target_layers"] = int(target_dict(target_config)["num_hidden_layers"])
    head = getattr(drafter, "head", None)
    extra["markov_rank"] = 0 if head is None else int(head.rank)
    if head is not None:
        extra["markov_head_type"] = OURS_TO_RELEASED_HEAD[drafter.cfg.head_type]
    extra["enable_confidence_head"] = getattr(drafter, "confidence_head", None) is not None
    if extra["enable_confidence_head"]:
        extra["confidence_head_with_markov"] = True
    raw = json.loads(config.to_json_string(use_diff=True))
    raw.update(extra)
    return raw


def save_released(drafter: DFlashDrafter, folder: str | Path, target_config: PretrainedConfig | None = None,
                  dtype: torch.dtype | None = None) -> Path:
    """Write `drafter` in DeepSpec's released layout: `folder`/config.json and
    `folder`/model.safetensors with DeepSpec's key names, including embed_tokens.weight and
    lm_head.weight (copies of the target's). `dtype` (default: the drafter's; releases are bf16).
    Returns the folder; `load_released(folder, target)` reads it back."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or drafter.dtype
    tensors = {released_key(k): v.detach().to("cpu", dtype).contiguous() for k, v in drafter.state_dict().items()}
    tensors["embed_tokens.weight"] = drafter.shared.embed_tokens.weight.detach().to("cpu", dtype).clone()
    tensors["lm_head.weight"] = drafter.shared.lm_head.weight.detach().to("cpu", dtype).clone()
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    raw = released_config_dict(drafter, target_config, dtype)
    (folder / CONFIG_FILE).write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    return folder


# ========================================================================== any released drafter


def build_from_config(folder: str | Path, target: PreTrainedModel, seed: int = 0,
                      dtype: torch.dtype | None = None) -> nn.Module:
    """A drafter shaped like the released one whose config.json is in `folder` (DSpark, DFlash or
    Eagle3, by its architecture name), with random weights, on the target's device (for
    random-weights mode, the memory table, the full-size dry run)."""
    if released_architecture(folder) in EAGLE3_ARCHITECTURES:
        return build_eagle3(read_eagle3_config(folder), target, seed, dtype)
    return build_drafter(read_released_config(folder), target, seed, dtype=dtype)


def released_shapes(drafter: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every key (and shape) a released file of this drafter holds, whatever its kind."""
    return eagle3_expected_shapes(drafter) if isinstance(drafter, EagleDrafter) else expected_shapes(drafter)


def save_any_released(drafter: nn.Module, folder: str | Path, target_config: PretrainedConfig | None = None,
                      dtype: torch.dtype | None = None) -> Path:
    """`save_released_eagle3` for an EagleDrafter, else `save_released`."""
    if isinstance(drafter, EagleDrafter):
        return save_released_eagle3(drafter, folder, target_config, dtype)
    return save_released(drafter, folder, target_config, dtype)


def load_released(source: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None,
                  download: bool = True, check_shared: bool = True) -> nn.Module:
    """A released drafter (folder or hub id) of any kind on `target`, in `dtype` (default: the
    target's): an Eagle3 drafter through `eagle3.load_released_eagle3`, a DSpark or DFlash one
    through `checkpoints.load_released_dspark`; each checks every key and shape before it reads a
    weight, and nothing is downloaded unless `download` and the hub is online."""
    folder = resolve_source(source, download)
    if released_architecture(folder) in EAGLE3_ARCHITECTURES:
        return load_released_eagle3(folder, target, dtype, download=False, check_shared=check_shared)
    return load_released_dspark(folder, target, dtype, download=False, check_shared=check_shared)
