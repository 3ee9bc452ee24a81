"""DeepSpec's released drafters, DSpark, DFlash and Eagle3, loaded into dspark_lite's classes, and
ours saved in their layout (chapter 07): one reader, `load_released`, and one writer,
`save_released`, for every kind. `released_config` reads and writes the config.json; this module
builds the drafter, checks every key and shape, and moves the weights.

`load_released(source, target)` reads a local folder, or a hub id when the hub is reachable (never
when HF_HUB_OFFLINE=1, then only the local hub cache), checks the config against the target, every
key and shape, and returns a `DSparkDrafter`, `DFlashDrafter` or `EagleDrafter`.
`save_released(drafter, folder)` writes ours in exactly that layout, so a tiny drafter can
round-trip through the real loader.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Iterator, Mapping

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ...checks import end_ids as checked_end_ids
from ...dflash import DFlashDrafter
from ...dspark import DSparkDrafter
from ...eagle import EagleDrafter
from ...hidden_drafter import SharedTargetWeights
from .released_config import (CONFIG_FILE, EAGLE3_DRAFT_VOCAB_KEYS, SHARED_KEYS, ReleasedConfig, drafter_config,
                              our_key, read_released_config, released_config_dict, released_key)
from .weights import INDEX_FILE, WEIGHTS_FILE, CheckpointError, checkpoint_shapes, read_rows, read_tensors

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
CLASSES: dict[str, type[nn.Module]] = {"dspark": DSparkDrafter, "dflash": DFlashDrafter, "eagle3": EagleDrafter}


# ========================================================================== building


def build_drafter(released: ReleasedConfig, target: PreTrainedModel, seed: int = 0, dtype: torch.dtype | None = None,
                  own_embeddings: bool = False, end_ids: int | list[int] | tuple[int, ...] | None = None) -> nn.Module:
    """A drafter of the released shape on `target`, with random weights, in `dtype` (default: the
    target's), on the target's device (a target on `meta` gives a drafter on `meta`, allocating
    nothing). An Eagle3's chain stops at `end_ids` (None: `target_end_ids(target)`; (): never early).
    RoPE frequencies stay float32 whatever `dtype` is, as in DeepSpec's evaluator."""
    cfg = drafter_config(released, target.config, own_embeddings)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    extra = {}
    if released.kind == "eagle3":
        extra["end_ids"] = target_end_ids(target) if end_ids is None else end_ids
    place = torch.device("meta") if device.type == "meta" else contextlib.nullcontext()
    with default_dtype(dtype if dtype.is_floating_point else None), place:
        drafter = CLASSES[released.kind](target, cfg, seed, **extra)
    return rope_in_float32(drafter.to(dtype))


def build_from_config(folder: str | Path, target: PreTrainedModel, seed: int = 0,
                      dtype: torch.dtype | None = None) -> nn.Module:
    """A drafter shaped like the released one whose config.json is in `folder`, with random weights
    (random-weights mode, the memory table, the full-size dry run)."""
    return build_drafter(read_released_config(folder), target, seed, dtype)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """Parameters created inside are `dtype` (None: unchanged), so that a 4B model is never
    materialised in float32 first."""
    saved = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


def model_place(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    weight = model.get_input_embeddings().weight
    return weight.device, weight.dtype


def rope_in_float32(drafter: nn.Module) -> nn.Module:
    """Recompute every rotary embedding's `inv_freq` in float32 on the drafter's device.

    `drafter.to(torch.bfloat16)` casts buffers too, and `inv_freq` rounded to bf16 moves every
    rotation angle (at position 2,000 the slowest frequencies are off by whole radians); DeepSpec's
    evaluator loads its drafter with `from_pretrained(dtype=bf16)`, which keeps them float32. A
    drafter built on the `meta` device gets its frequencies here too (they are not in the checkpoint)."""
    device = next(drafter.parameters()).device
    for module in drafter.modules():
        if isinstance(getattr(module, "inv_freq", None), torch.Tensor) and hasattr(module, "config"):
            with torch.device("cpu"):
                fresh = type(module)(module.config)  # computes inv_freq in float32, as transformers does
            module.inv_freq = fresh.inv_freq.to(device=device, dtype=torch.float32)
            if hasattr(module, "original_inv_freq"):
                module.original_inv_freq = module.inv_freq.clone()
    return drafter


def target_end_ids(target: PreTrainedModel) -> tuple[int, ...]:
    """The ids that end a reply for `target`: its generation config's eos_token_id, else its
    config's, as DeepSpec's `resolve_stop_token_ids` reads them; () when neither has one."""
    for config in (getattr(target, "generation_config", None), target.config):
        ids = getattr(config, "eos_token_id", None)
        if ids is not None:
            return checked_end_ids(ids)
    return ()


# ========================================================================== keys


def expected_shapes(drafter: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every key a released checkpoint of this drafter holds, with its shape: ours under DeepSpec's
    names, plus the embedding and LM head [vocab, hidden] (the drafter's own, or the target's copies)."""
    shapes = {released_key(k): tuple(v.shape) for k, v in drafter.state_dict().items()}
    shapes.update({key: (drafter.vocab_size, drafter.hidden_size) for key in SHARED_KEYS})
    return shapes


def check_keys(found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
               where: str = "the checkpoint") -> None:
    """CheckpointError naming the first problem: a shared weight of another target's shape, a
    missing key, an unexpected key or a mis-shaped key, each with both shapes. The shared weights
    (SHARED_KEYS) may be absent, since the loader never reads them (the drafter uses the target's);
    when present they are shape-checked."""
    for key, what in SHARED_KEYS.items():
        if key in found and key in expected and tuple(found[key]) != tuple(expected[key]):
            raise CheckpointError(f"{where}: {key} ({what}) has shape {list(found[key])}, but this target's is "
                                  f"{list(expected[key])} [vocab_size, hidden_size]: the drafter was built for "
                                  "another target")
    missing = sorted(set(expected) - set(found) - set(SHARED_KEYS))
    if missing:
        raise CheckpointError(f"{where}: missing key {missing[0]!r} (expected shape {list(expected[missing[0]])}, "
                              f"found none){f'; {len(missing) - 1} more missing' if len(missing) > 1 else ''}")
    unexpected = sorted(set(found) - set(expected))
    if unexpected:
        key = unexpected[0]
        raise CheckpointError(f"{where}: unexpected key {key!r} (found shape {list(found[key])}, expected none: "
                              f"the drafter has no such weight){f'; {len(unexpected) - 1} more' if len(unexpected) > 1 else ''}")
    for key in sorted(set(expected) & set(found)):
        if tuple(found[key]) != tuple(expected[key]):
            raise CheckpointError(f"{where}: key {key!r} has the wrong shape: expected {list(expected[key])}, "
                                  f"found {list(found[key])}")


# ========================================================================== loading


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks for no network."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve_source(source: str | Path, download: bool = True) -> Path:
    """A local folder as is; a hub id (owner/name) through the hub cache, downloading only when
    `download` and the hub is not offline. Never downloads silently: it says so."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    text = str(source)
    if not _HUB_ID.match(text):
        raise FileNotFoundError(f"{source!r} is neither a folder nor a hub id (owner/name); pass the folder of a "
                                "released drafter (config.json + model.safetensors)")
    from huggingface_hub import snapshot_download

    patterns = [CONFIG_FILE, "*.safetensors", INDEX_FILE]
    if not download or hub_offline():
        try:
            return Path(snapshot_download(text, allow_patterns=patterns, local_files_only=True))
        except Exception:
            why = "HF_HUB_OFFLINE=1" if hub_offline() else "download=False"
            raise FileNotFoundError(f"{text} is not in the local hub cache and {why}: nothing is downloaded; pass a "
                                    f"local folder (e.g. `hf download {text} --local-dir <folder>` on a machine "
                                    "with internet) instead") from None
    print(f"downloading {text} from the Hugging Face hub (config.json and safetensors) ...", flush=True)
    return Path(snapshot_download(text, allow_patterns=patterns))


def load_released(source: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None,
                  download: bool = True, check_shared: bool = True, own_embeddings: bool = False,
                  end_ids: int | list[int] | tuple[int, ...] | None = None) -> nn.Module:
    """A released drafter (folder or hub id) of any kind as a dspark_lite DSparkDrafter,
    DFlashDrafter or EagleDrafter on `target`, in `dtype` (default: the target's), on its device.

    Checks, in order and before any weight is read: the config (`released_config`: kind, fields,
    the target it was built for), then every key and shape (missing, unexpected, mis-shaped: named,
    with both shapes; an Eagle3's draft-vocabulary map named as such). The drafter is built on the
    `meta` device (no random initialisation, no memory) and its weights are read straight onto the
    target's device; RoPE frequencies are float32 (`rope_in_float32`).

    check_shared: warn when the file's copies of the embedding and LM head differ from the target's
        (16 rows of each are compared, and only those rows are read).
    own_embeddings: an Eagle3 reads the file's own embedding and LM head into the drafter, as
        DeepSpec's evaluator uses them (2 x 0.78 GB more for Qwen3-4B in bf16), instead of sharing
        the target's (which DeepSpec's trainer copied and froze: the same matrices).
    end_ids: the ids that stop an Eagle3's chain (kept in the draft); None takes the target's
        generation-config end ids, as DeepSpec does; () never stops early.
    """
    folder = resolve_source(source, download)
    released = read_released_config(folder)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    with torch.device("meta"):
        shell = type(target)(target.config)  # same class and config, no memory
    drafter = build_drafter(released, shell, dtype=dtype, own_embeddings=own_embeddings, end_ids=())
    drafter.shared = SharedTargetWeights.of(target)
    expected, found = expected_shapes(drafter), checkpoint_shapes(folder)
    _no_draft_vocabulary(found, folder)
    own = own_embeddings and released.kind == "eagle3"
    _own_copies_present(own, found, expected, folder)
    check_keys(found, expected, str(folder))
    if check_shared and not own:
        warn_if_shared_differ(drafter, folder)
    keys = set(expected) if own else set(expected) - set(SHARED_KEYS)
    tensors = read_tensors(folder, keys, device)
    drafter.load_state_dict({our_key(k): v.to(dtype) for k, v in tensors.items()}, strict=True, assign=True)
    if own:
        drafter.embed_tokens.requires_grad_(False)
        drafter.lm_head.requires_grad_(False)
    if released.kind == "eagle3":
        drafter.end_ids = target_end_ids(target) if end_ids is None else end_ids
    return rope_in_float32(drafter).eval()


def warn_if_shared_differ(drafter: nn.Module, folder: Path) -> None:
    """Warn when a copy of the target's embedding or LM head in the file differs from the target's;
    a file without the copies (they are never read) has nothing to compare."""
    modules = {"embed_tokens.weight": drafter.shared.embed_tokens, "lm_head.weight": drafter.shared.lm_head}
    rows = torch.linspace(0, drafter.vocab_size - 1, 16).long()
    present = checkpoint_shapes(folder)
    for key, module in modules.items():
        if key not in present:
            continue
        ours = module.weight.detach()[rows.to(module.weight.device)].float().cpu()
        theirs = read_rows(folder, key, rows.tolist()).float()
        if not torch.allclose(ours, theirs, rtol=1e-2, atol=1e-3):
            warnings.warn(f"{folder}: {key} differs from the target's ({SHARED_KEYS[key]}); dspark_lite uses the "
                          "target's. Is this the drafter of another checkpoint of the target?", stacklevel=3)


# ========================================================================== saving


def save_released(drafter: nn.Module, folder: str | Path, target_config: PretrainedConfig | None = None,
                  dtype: torch.dtype | None = None, architecture: str | None = None) -> Path:
    """Write any of our drafters in DeepSpec's released layout: `folder`/config.json
    (`released_config.released_config_dict`) and `folder`/model.safetensors with DeepSpec's key
    names, embed_tokens.weight and lm_head.weight included (the drafter's own, or copies of the
    target's it shares). `dtype` (default: the drafter's; releases are bf16). Returns the folder;
    `load_released(folder, target)` reads it back."""
    from safetensors.torch import save_file

    raw = released_config_dict(drafter, target_config, dtype, architecture)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype = dtype or drafter.dtype
    tensors = {released_key(k): v.detach().to("cpu", dtype).contiguous() for k, v in drafter.state_dict().items()}
    for key, module in (("embed_tokens.weight", drafter.shared.embed_tokens), ("lm_head.weight", drafter.shared.lm_head)):
        tensors.setdefault(key, module.weight.detach().to("cpu", dtype).clone())
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    (folder / CONFIG_FILE).write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    return folder


# --- checks (this module's door)


def _no_draft_vocabulary(found: Mapping[str, tuple[int, ...]], folder: Path) -> None:
    """CheckpointError when the file maps a reduced draft vocabulary (d2t / t2d)."""
    maps = [key for key in EAGLE3_DRAFT_VOCAB_KEYS if key in found]
    if maps:
        raise CheckpointError(f"{folder}: {maps} map a reduced draft vocabulary (a SpecForge-style Eagle3); "
                              "DeepSpec's Qwen3Eagle3Model has a full-vocabulary lm_head and dspark_lite's "
                              "EagleDrafter drafts over the target's whole vocabulary")


def _own_copies_present(own: bool, found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
                        folder: Path) -> None:
    """CheckpointError when own_embeddings asks for the file's embedding and LM head and one is absent."""
    absent = [key for key in SHARED_KEYS if key not in found]
    if own and absent:
        raise CheckpointError(f"{folder}: missing key {absent[0]!r} (expected shape {list(expected[absent[0]])}); "
                              "own_embeddings=True reads the checkpoint's own embedding and LM head")
