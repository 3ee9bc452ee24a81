"""DeepSpec's released drafters in dspark_lite's classes, and ours in DeepSpec's layout (chapter 07).

DeepSpec (deepseek-ai/DeepSpec) releases its Table 1 drafters on the hub:
deepseek-ai/{dspark,dflash}_qwen3_{4b,8b,14b}_block7. Each is what `save_pretrained` of its
`Qwen3DSparkModel` writes: a `config.json` and a `model.safetensors` (a `model.safetensors.index.json`
with shards, should one ever be split), bf16 tensors. The config is a copy of the target's
Qwen3 config with `num_hidden_layers` set to the draft layers and these fields added:

    architectures ["Qwen3DSparkModel"], num_target_layers, block_size, mask_token_id,
    target_layer_ids, num_anchors (a training setting), enable_confidence_head,
    confidence_head_with_markov (with the head), markov_rank (0 for DFlash),
    markov_head_type ("vanilla" or "rnn", with a head), tie_word_embeddings false

The tensors carry DeepSpec's module names, which `hidden_drafter`, `dflash` and `dspark`
reuse, so the name table `KEY_MAP` is the identity on every drafter weight. Two released keys
are copies of the target's own weights, which our drafters share instead of holding:
`embed_tokens.weight` and `lm_head.weight` ([vocab, hidden] each). The loader checks their
shapes against the target (that is how a drafter of another target is caught) and leaves them
out of the drafter.

`load_released_dspark(source, target)` reads a local folder, or a hub id when the hub is reachable
(never when HF_HUB_OFFLINE=1, then only the local hub cache), checks every key and shape, and
returns a `DSparkDrafter` or `DFlashDrafter`; `layouts.load_released` takes any released drafter
and hands each kind to its own loader. `save_released(drafter, folder)` writes our
drafter in exactly that layout, so a tiny drafter can round-trip through the real loader.

DeepSpec's Eagle3 drafters have their own layout: see `eagle3`.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ...dflash import DFlashDrafter
from ...dspark import DSparkDrafter
from ...hidden_drafter import DrafterConfig, SharedTargetWeights
from .weights import INDEX_FILE, WEIGHTS_FILE, CheckpointError, checkpoint_shapes, read_rows, read_tensors

# The released drafters and the target each was trained against (DeepSpec's README, Table 1).
RELEASED_DRAFTERS: dict[str, str] = {
    "deepseek-ai/dspark_qwen3_4b_block7": "Qwen/Qwen3-4B",
    "deepseek-ai/dflash_qwen3_4b_block7": "Qwen/Qwen3-4B",
    "deepseek-ai/dspark_qwen3_8b_block7": "Qwen/Qwen3-8B",
    "deepseek-ai/dflash_qwen3_8b_block7": "Qwen/Qwen3-8B",
    "deepseek-ai/dspark_qwen3_14b_block7": "Qwen/Qwen3-14B",
    "deepseek-ai/dflash_qwen3_14b_block7": "Qwen/Qwen3-14B",
    # Eagle3 (DeepSpec's README, "Released checkpoints"): read by `load_released_eagle3` (below).
    "deepseek-ai/eagle3_qwen3_4b_ttt7": "Qwen/Qwen3-4B",
    "deepseek-ai/eagle3_qwen3_8b_ttt7": "Qwen/Qwen3-8B",
    "deepseek-ai/eagle3_qwen3_14b_ttt7": "Qwen/Qwen3-14B",
}

CONFIG_FILE = "config.json"
ARCHITECTURE = "Qwen3DSparkModel"
NUM_ANCHORS = 512  # DeepSpec's training setting (anchors per sequence); unused at inference

# Released key prefix -> our state_dict prefix: DeepSpec's names are ours, except the head's
# (DeepSpec calls the Markov and the RNN head `markov_head`, and its tables `markov_w1` / `markov_w2`).
KEY_MAP: tuple[tuple[str, str], ...] = (
    ("fc.", "fc."),
    ("hidden_norm.", "hidden_norm."),
    ("layers.", "layers."),
    ("norm.", "norm."),
    ("markov_head.markov_w1.", "head.w1."),
    ("markov_head.markov_w2.", "head.w2."),
    ("markov_head.", "head."),
    ("confidence_head.", "confidence_head."),
)
# Released keys that are copies of the target's weights: checked, never loaded into the drafter.
SHARED_KEYS: dict[str, str] = {
    "embed_tokens.weight": "the target's input embedding",
    "lm_head.weight": "the target's LM head",
}
# DeepSpec's markov_head_type -> ours ("gated" has no dspark_lite class).
HEAD_TYPES: dict[str, str] = {"vanilla": "markov", "rnn": "rnn"}
OURS_TO_RELEASED_HEAD: dict[str, str] = {ours: theirs for theirs, ours in HEAD_TYPES.items()}

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

Drafter = DFlashDrafter  # DSparkDrafter is a DFlashDrafter


# ========================================================================== the released config


@dataclass(frozen=True)
class ReleasedConfig:
    """The fields of a released drafter's config.json that decide its shape.

    kind: "dspark" (a Markov or RNN head) or "dflash" (markov_rank 0, no head).
    target_*: the target it was built for (vocab_size, hidden_size, num_target_layers may be
    None when the file lacks it, rms_norm_eps, rope_theta). Layer dims are the draft layers'.
    """

    block_size: int
    num_draft_layers: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    markov_rank: int
    markov_head_type: str | None
    confidence_head: bool
    confidence_head_with_markov: bool | None
    vocab_size: int
    hidden_size: int
    num_target_layers: int | None
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float | None

    @property
    def kind(self) -> str:
        return "dspark" if self.markov_rank > 0 else "dflash"


def _rope_theta(config: Mapping[str, Any]) -> float | None:
    """rope_theta of a config dict, written flat (transformers 4.x) or in rope_parameters (5.x)."""
    if config.get("rope_theta") is not None:
        return float(config["rope_theta"])
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    return float(params["rope_theta"]) if isinstance(params, Mapping) and "rope_theta" in params else None


def _field(raw: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in raw:
        raise CheckpointError(f"{where}: config.json lacks the field {name!r}; expected a DeepSpec "
                              f"Qwen3DSparkModel config (block_size, target_layer_ids, mask_token_id, markov_rank, ...)")
    return raw[name]


def parse_released_config(raw: Mapping[str, Any], where: str = "config.json") -> ReleasedConfig:
    """Read a released config dict into a ReleasedConfig; CheckpointError names a missing or
    unsupported field."""
    arch = raw.get("architectures") or []
    if arch and arch[0] != ARCHITECTURE:
        raise CheckpointError(f"{where}: architectures {arch} is not DeepSpec's {ARCHITECTURE} "
                              "(an Eagle3 drafter, or a target model?); expected a DSpark or DFlash drafter")
    rank = int(raw.get("markov_rank", 0))
    head_type = raw.get("markov_head_type") if rank > 0 else None
    if rank > 0 and head_type is None:
        raise CheckpointError(f"{where}: markov_rank {rank} but no markov_head_type")
    enabled = bool(raw.get("enable_confidence_head", False))
    return ReleasedConfig(
        block_size=int(_field(raw, "block_size", where)),
        num_draft_layers=int(_field(raw, "num_hidden_layers", where)),
        target_layer_ids=tuple(int(i) for i in _field(raw, "target_layer_ids", where)),
        mask_token_id=int(_field(raw, "mask_token_id", where)),
        markov_rank=rank, markov_head_type=None if head_type is None else str(head_type).lower(),
        confidence_head=enabled,
        confidence_head_with_markov=bool(raw["confidence_head_with_markov"]) if enabled and
        "confidence_head_with_markov" in raw else None,
        **layer_shape(raw, _field, where),
    )


def config_json(folder: str | Path, what: str = "released drafter") -> tuple[dict[str, Any], str]:
    """`folder`/config.json as a dict, and its path for messages; clear errors when absent or not JSON."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {folder}; expected a {what} folder ({CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None


def layer_shape(raw: Mapping[str, Any], field: Any, where: str) -> dict[str, Any]:
    """The draft layers' shape and the target's, as both released configs spell them (`field`
    reads a required one with that config kind's error)."""
    hidden = int(field(raw, "hidden_size", where))
    heads = int(field(raw, "num_attention_heads", where))
    return dict(
        vocab_size=int(field(raw, "vocab_size", where)), hidden_size=hidden,
        num_target_layers=int(raw["num_target_layers"]) if raw.get("num_target_layers") is not None else None,
        intermediate_size=int(field(raw, "intermediate_size", where)), num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), rope_theta=_rope_theta(raw))


def read_released_config(folder: str | Path) -> ReleasedConfig:
    """parse_released_config of `folder`/config.json."""
    return parse_released_config(*config_json(folder))


def target_dict(target_config: PretrainedConfig) -> dict[str, Any]:
    text = getattr(target_config, "text_config", None) or target_config
    return text.to_dict()


def check_target(released: ReleasedConfig, target_config: PretrainedConfig, name: str = "the drafter") -> None:
    """Raise CheckpointError unless `released` was built for a target shaped like this one
    (vocabulary, hidden size, layer count, RMSNorm eps, RoPE base)."""
    target = target_dict(target_config)
    theirs = {"vocab_size": released.vocab_size, "hidden_size": released.hidden_size}
    ours = {"vocab_size": int(target["vocab_size"]), "hidden_size": int(target["hidden_size"])}
    if released.num_target_layers is not None:
        theirs["num_hidden_layers"] = released.num_target_layers
        ours["num_hidden_layers"] = int(target["num_hidden_layers"])
    if theirs != ours:
        raise CheckpointError(f"{name} was built for another target: it expects {theirs}, but this target has "
                              f"{ours}; load the target the drafter was trained against")
    rope = _rope_theta(target)
    if abs(released.rms_norm_eps - float(target.get("rms_norm_eps", 1e-6))) > 1e-12 or (
            released.rope_theta is not None and rope is not None and abs(released.rope_theta - rope) > 1e-6):
        raise CheckpointError(f"{name} was built for another target: rms_norm_eps {released.rms_norm_eps} and "
                              f"rope_theta {released.rope_theta}, but this target has {target.get('rms_norm_eps')} "
                              f"and {rope}; dspark_lite's drafters take both from the target")
    bad = [i for i in released.target_layer_ids if not 0 <= i < int(target["num_hidden_layers"])]
    if bad:
        raise CheckpointError(f"{name} was built for another target: target_layer_ids {released.target_layer_ids} "
                              f"name layers {bad}, beyond this target's decoder layers 0..{int(target['num_hidden_layers']) - 1}")


def differs_from_target(value: int, target_value: int) -> int | None:
    """None (take the target's) when the draft layers keep the target's value."""
    return None if value == target_value else value


def our_config(released: ReleasedConfig, target_config: PretrainedConfig) -> DrafterConfig:
    """The dspark_lite config of a released drafter on this target: DSparkConfig
    for a Markov/RNN head (head_type, markov_rank, confidence_head), DFlashConfig otherwise."""
    check_target(released, target_config)
    target = target_dict(target_config)
    shape = dict(
        target_layer_ids=released.target_layer_ids, mask_token_id=released.mask_token_id,
        gamma=released.block_size, num_layers=released.num_draft_layers,
        intermediate_size=differs_from_target(released.intermediate_size, int(target["intermediate_size"])),
        num_heads=differs_from_target(released.num_attention_heads, int(target["num_attention_heads"])),
        num_kv_heads=differs_from_target(released.num_key_value_heads, int(target.get("num_key_value_heads") or 0)),
        head_dim=differs_from_target(released.head_dim, int(target.get("head_dim") or 0)),
    )
    if released.kind == "dflash":
        if released.confidence_head:
            raise CheckpointError("a confidence head without a Markov head (markov_rank 0) has no dspark_lite "
                                  "class; DSpark's confidence head reads the Markov embedding (Eq. 7)")
        return DrafterConfig(**shape)
    if released.markov_head_type not in HEAD_TYPES:
        raise CheckpointError(f"markov_head_type {released.markov_head_type!r} has no dspark_lite class; "
                              f"supported: {sorted(HEAD_TYPES)}")
    if released.confidence_head and released.confidence_head_with_markov is False:
        raise CheckpointError("confidence_head_with_markov = false (a head on h_k alone) has no dspark_lite class; "
                              "dspark_lite's ConfidenceHead reads [h_k; W1[x_{k-1}]] (Eq. 7)")
    return DrafterConfig(**shape, head_type=HEAD_TYPES[released.markov_head_type], head_rank=released.markov_rank,
                        confidence_head=released.confidence_head)


# ========================================================================== building, shapes


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


def build_drafter(released: ReleasedConfig, target: PreTrainedModel, seed: int = 0,
                  dtype: torch.dtype | None = None) -> DFlashDrafter:
    """A drafter of the released shape on `target`, with random weights: a
    DSparkDrafter or a DFlashDrafter in `dtype` (default: the target's), on the target's device
    (a target on the `meta` device gives a drafter on `meta`, allocating nothing). Its RoPE
    frequencies stay float32 whatever `dtype` is, as in DeepSpec's evaluator."""
    cfg = our_config(released, target.config)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    factory = DSparkDrafter if released.kind == "dspark" else DFlashDrafter
    place = torch.device("meta") if device.type == "meta" else contextlib.nullcontext()
    with default_dtype(dtype if dtype.is_floating_point else None), place:
        drafter = factory(target, cfg, seed)
    return rope_in_float32(drafter.to(dtype))


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


def released_key(our_key: str) -> str:
    """Our state_dict key -> the released key, by KEY_MAP."""
    for theirs, ours in KEY_MAP:
        if our_key.startswith(ours):
            return theirs + our_key[len(ours):]
    raise CheckpointError(f"our key {our_key!r} has no entry in checkpoints.KEY_MAP")


def our_key(released: str) -> str | None:
    """The released key -> our state_dict key; None for the target's shared weights."""
    if released in SHARED_KEYS:
        return None
    for theirs, ours in KEY_MAP:
        if released.startswith(theirs):
            return ours + released[len(theirs):]
    return released  # no rule: reported as unexpected by check_keys


def expected_shapes(drafter: DFlashDrafter) -> dict[str, tuple[int, ...]]:
    """Every key a released checkpoint of this drafter holds, with its shape."""
    shapes = {released_key(k): tuple(v.shape) for k, v in drafter.state_dict().items()}
    embed = (drafter.vocab_size, drafter.hidden_size)
    shapes.update({key: embed for key in SHARED_KEYS})
    return shapes


def check_keys(found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
               where: str = "the checkpoint") -> None:
    """CheckpointError naming the first problem: a shared weight of another target's shape, a
    missing key, an unexpected key or a mis-shaped key, each with both shapes. The
    shared weights (SHARED_KEYS) may be absent, since the loader never reads them (the drafter uses
    the target's); when present they are shape-checked."""
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


def load_released_dspark(source: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None,
                         download: bool = True, check_shared: bool = True) -> DFlashDrafter:
    """A released DSpark or DFlash drafter (folder or hub id) as a dspark_lite DSparkDrafter / DFlashDrafter on
    `target`, in `dtype` (default: the target's), on the target's device.

    Checks, in order: the config fits this target (CheckpointError saying "another target"),
    every key and shape (missing, unexpected, mis-shaped: named, with both shapes), then loads
    strictly. With `check_shared`, warns when the checkpoint's copies of the embedding and LM
    head differ from the target's (the drafter was trained against other weights): 16 rows of
    each are compared, and only those rows are read. The drafter is built on the `meta` device
    (no random initialisation, no memory) and its weights are read straight onto the target's
    device; RoPE frequencies are float32 (`rope_in_float32`).
    """
    folder = resolve_source(source, download)
    released = read_released_config(folder)
    device, target_dtype = model_place(target)
    dtype = target_dtype if dtype is None else dtype
    drafter = _meta_drafter(released, target, dtype)
    expected = expected_shapes(drafter)
    check_keys(checkpoint_shapes(folder), expected, str(folder))
    if check_shared:
        warn_if_shared_differ(drafter, folder)
    tensors = read_tensors(folder, set(expected) - set(SHARED_KEYS), device)
    state = {our_key(k): v.to(dtype) for k, v in tensors.items()}
    drafter.load_state_dict(state, strict=True, assign=True)
    return rope_in_float32(drafter).eval()


def _meta_drafter(released: ReleasedConfig, target: PreTrainedModel, dtype: torch.dtype) -> DFlashDrafter:
    """A drafter whose own weights live on the `meta` device, sharing the real target's embedding
    and LM head: built against a meta shell of the target (same class and config, no memory)."""
    with torch.device("meta"):
        shell = type(target)(target.config)
    drafter = build_drafter(released, shell, dtype=dtype)
    drafter.shared = SharedTargetWeights.of(target)
    return drafter


def warn_if_shared_differ(drafter: DFlashDrafter, folder: Path) -> None:
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
