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

The tensors carry DeepSpec's module names, which `dflash.py`, `eagle.py` and `dspark.py` reuse, so the
name table `KEY_MAP` is the identity on every drafter weight. Two released keys are copies of
the target's own weights, which our drafters share instead of holding: `embed_tokens.weight`
and `lm_head.weight` ([vocab, hidden] each). The loader checks their shapes against the target
(that is how a drafter of another target is caught) and leaves them out of the drafter.

`load_released(source, target)` reads a local folder, or a hub id when the hub is reachable
(never when HF_HUB_OFFLINE=1, then only the local hub cache), checks every key and shape, and
returns a `DSparkDrafter` or `DFlashDrafter`. `save_released(drafter, folder)` writes our
drafter in exactly that layout, so a tiny drafter can round-trip through the real loader.

DeepSpec's Eagle3 drafters (deepseek-ai/eagle3_qwen3_{4b,8b,14b}_ttt7; architectures
Qwen3Eagle3Model or Eagle3DraftModel) load into `eagle.EagleDrafter` through
`load_released_eagle3`, which `load_released` calls for them; `save_released_eagle3` writes an
EagleDrafter in their layout. The facts they rest on head the Eagle3 section at the end.
"""
from __future__ import annotations

import contextlib
import copy
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

from ..dflash import DFlashConfig, DFlashDrafter
from ..eagle import EagleConfig, EagleDrafter
from ..hidden_drafter import SharedTargetWeights
from ..dspark import DSparkConfig, DSparkDrafter
from ..checks import end_ids as checked_end_ids

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
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
ARCHITECTURE = "Qwen3DSparkModel"
NUM_ANCHORS = 512  # DeepSpec's training setting (anchors per sequence); unused at inference

# Released key prefix -> our state_dict prefix (DeepSpec's names are ours: the identity).
KEY_MAP: tuple[tuple[str, str], ...] = (
    ("fc.", "fc."),
    ("hidden_norm.", "hidden_norm."),
    ("layers.", "layers."),
    ("norm.", "norm."),
    ("markov_head.", "markov_head."),
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


class CheckpointError(ValueError):
    """A released checkpoint that does not fit: a missing, unexpected or mis-shaped key, a drafter
    of another target, or a config field dspark_lite cannot represent (chapter 07)."""


# ========================================================================== the released config


@dataclass(frozen=True)
class ReleasedConfig:
    """The fields of a released drafter's config.json that decide its shape (chapter 07).

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
    unsupported field (chapter 07)."""
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
        **_layer_shape(raw, _field, where),
    )


def _config_json(folder: str | Path, what: str = "released drafter") -> tuple[dict[str, Any], str]:
    """`folder`/config.json as a dict, and its path for messages; clear errors when absent or not JSON."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {CONFIG_FILE} in {folder}; expected a {what} folder ({CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None


def _layer_shape(raw: Mapping[str, Any], field: Any, where: str) -> dict[str, Any]:
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
    """parse_released_config of `folder`/config.json (chapter 07)."""
    return parse_released_config(*_config_json(folder))


def _target_dict(target_config: PretrainedConfig) -> dict[str, Any]:
    text = getattr(target_config, "text_config", None) or target_config
    return text.to_dict()


def check_target(released: ReleasedConfig, target_config: PretrainedConfig, name: str = "the drafter") -> None:
    """Raise CheckpointError unless `released` was built for a target shaped like this one
    (vocabulary, hidden size, layer count, RMSNorm eps, RoPE base) (chapter 07)."""
    target = _target_dict(target_config)
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


def _override(value: int, target_value: int) -> int | None:
    """None (take the target's) when the draft layers keep the target's value."""
    return None if value == target_value else value


def our_config(released: ReleasedConfig, target_config: PretrainedConfig) -> DFlashConfig | DSparkConfig:
    """The dspark_lite config of a released drafter on this target (chapter 07): DSparkConfig
    for a Markov/RNN head (head_type, markov_rank, confidence_head), DFlashConfig otherwise."""
    check_target(released, target_config)
    target = _target_dict(target_config)
    shape = dict(
        target_layer_ids=released.target_layer_ids, mask_token_id=released.mask_token_id,
        block_size=released.block_size, num_layers=released.num_draft_layers,
        intermediate_size=_override(released.intermediate_size, int(target["intermediate_size"])),
        num_heads=_override(released.num_attention_heads, int(target["num_attention_heads"])),
        num_kv_heads=_override(released.num_key_value_heads, int(target.get("num_key_value_heads") or 0)),
        head_dim=_override(released.head_dim, int(target.get("head_dim") or 0)),
    )
    if released.kind == "dflash":
        if released.confidence_head:
            raise CheckpointError("a confidence head without a Markov head (markov_rank 0) has no dspark_lite "
                                  "class; DSpark's confidence head reads the Markov embedding (Eq. 7)")
        return DFlashConfig(**shape)
    if released.markov_head_type not in HEAD_TYPES:
        raise CheckpointError(f"markov_head_type {released.markov_head_type!r} has no dspark_lite class; "
                              f"supported: {sorted(HEAD_TYPES)}")
    if released.confidence_head and released.confidence_head_with_markov is False:
        raise CheckpointError("confidence_head_with_markov = false (a head on h_k alone) has no dspark_lite class; "
                              "dspark_lite's ConfidenceHead reads [h_k; W1[x_{k-1}]] (Eq. 7)")
    return DSparkConfig(**shape, head_type=HEAD_TYPES[released.markov_head_type], markov_rank=released.markov_rank,
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


def _model_place(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    weight = model.get_input_embeddings().weight
    return weight.device, weight.dtype


def build_drafter(released: ReleasedConfig, target: PreTrainedModel, seed: int = 0,
                  dtype: torch.dtype | None = None) -> DFlashDrafter:
    """A drafter of the released shape on `target`, with random weights (chapter 07): a
    DSparkDrafter or a DFlashDrafter in `dtype` (default: the target's), on the target's device
    (a target on the `meta` device gives a drafter on `meta`, allocating nothing). Its RoPE
    frequencies stay float32 whatever `dtype` is, as in DeepSpec's evaluator."""
    cfg = our_config(released, target.config)
    device, target_dtype = _model_place(target)
    dtype = target_dtype if dtype is None else dtype
    factory = DSparkDrafter if isinstance(cfg, DSparkConfig) else DFlashDrafter
    place = torch.device("meta") if device.type == "meta" else contextlib.nullcontext()
    with default_dtype(dtype if dtype.is_floating_point else None), place:
        drafter = factory(target, cfg, seed)
    return rope_in_float32(drafter.to(dtype))


def rope_in_float32(drafter: nn.Module) -> nn.Module:
    """Recompute every rotary embedding's `inv_freq` in float32 on the drafter's device (chapter 07).

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
    """Our state_dict key -> the released key, by KEY_MAP (chapter 07)."""
    for theirs, ours in KEY_MAP:
        if our_key.startswith(ours):
            return theirs + our_key[len(ours):]
    raise CheckpointError(f"our key {our_key!r} has no entry in checkpoints.KEY_MAP")


def our_key(released: str) -> str | None:
    """The released key -> our state_dict key; None for the target's shared weights (chapter 07)."""
    if released in SHARED_KEYS:
        return None
    for theirs, ours in KEY_MAP:
        if released.startswith(theirs):
            return ours + released[len(theirs):]
    return released  # no rule: reported as unexpected by check_keys


def expected_shapes(drafter: DFlashDrafter) -> dict[str, tuple[int, ...]]:
    """Every key a released checkpoint of this drafter holds, with its shape (chapter 07)."""
    shapes = {released_key(k): tuple(v.shape) for k, v in drafter.state_dict().items()}
    embed = (drafter.vocab_size, drafter.hidden_size)
    shapes.update({key: embed for key in SHARED_KEYS})
    return shapes


def check_keys(found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]],
               where: str = "the checkpoint") -> None:
    """CheckpointError naming the first problem: a shared weight of another target's shape, a
    missing key, an unexpected key or a mis-shaped key, each with both shapes (chapter 07). The
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


# ========================================================================== files


def _weight_files(folder: Path) -> list[Path]:
    index = folder / INDEX_FILE
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    single = folder / WEIGHTS_FILE
    if single.is_file():
        return [single]
    raise FileNotFoundError(f"no {WEIGHTS_FILE} (or {INDEX_FILE}) in {folder}; expected a released drafter folder")


def checkpoint_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape of every tensor in a released folder, read from the safetensors headers only."""
    from safetensors import safe_open

    shapes = {}
    for path in _weight_files(Path(folder)):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    return shapes


def _read_tensors(folder: Path, keys: set[str], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors named in `keys`, read straight onto `device` (nothing else is read)."""
    from safetensors import safe_open

    tensors = {}
    for path in _weight_files(folder):
        with safe_open(str(path), framework="pt", device=str(device)) as handle:
            tensors.update({key: handle.get_tensor(key) for key in handle.keys() if key in keys})
    return tensors


def _read_rows(folder: Path, key: str, rows: list[int]) -> torch.Tensor:
    """Rows `rows` of the [vocab, hidden] tensor `key`, read one slice at a time: the 0.78 GB
    embedding of a Qwen3-4B drafter is never loaded to compare 16 rows (chapter 07)."""
    from safetensors import safe_open

    for path in _weight_files(folder):
        with safe_open(str(path), framework="pt") as handle:
            if key in handle.keys():
                table = handle.get_slice(key)
                return torch.cat([table[row:row + 1] for row in rows])
    raise CheckpointError(f"{folder}: no tensor {key!r}")


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks for no network (chapter 07)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def resolve_source(source: str | Path, download: bool = True) -> Path:
    """A local folder as is; a hub id (owner/name) through the hub cache, downloading only when
    `download` and the hub is not offline (chapter 07). Never downloads silently: it says so."""
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
                  download: bool = True, check_shared: bool = True) -> DFlashDrafter:
    """A released drafter (folder or hub id) as a dspark_lite DSparkDrafter / DFlashDrafter on
    `target` (chapter 07), in `dtype` (default: the target's), on the target's device.

    Checks, in order: the config fits this target (CheckpointError saying "another target"),
    every key and shape (missing, unexpected, mis-shaped: named, with both shapes), then loads
    strictly. With `check_shared`, warns when the checkpoint's copies of the embedding and LM
    head differ from the target's (the drafter was trained against other weights): 16 rows of
    each are compared, and only those rows are read. The drafter is built on the `meta` device
    (no random initialisation, no memory) and its weights are read straight onto the target's
    device; RoPE frequencies are float32 (`rope_in_float32`).
    """
    folder = resolve_source(source, download)
    if released_architecture(folder) in EAGLE3_ARCHITECTURES:  # an Eagle3 drafter: its own loader
        return load_released_eagle3(folder, target, dtype, download=False, check_shared=check_shared)
    released = read_released_config(folder)
    device, target_dtype = _model_place(target)
    dtype = target_dtype if dtype is None else dtype
    drafter = _meta_drafter(released, target, dtype)
    expected = expected_shapes(drafter)
    check_keys(checkpoint_shapes(folder), expected, str(folder))
    if check_shared:
        _warn_if_shared_differ(drafter, folder)
    tensors = _read_tensors(folder, set(expected) - set(SHARED_KEYS), device)
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


def _warn_if_shared_differ(drafter: DFlashDrafter, folder: Path) -> None:
    """Warn when a copy of the target's embedding or LM head in the file differs from the target's;
    a file without the copies (they are never read) has nothing to compare."""
    modules = {"embed_tokens.weight": drafter.shared.embed_tokens, "lm_head.weight": drafter.shared.lm_head}
    rows = torch.linspace(0, drafter.vocab_size - 1, 16).long()
    present = checkpoint_shapes(folder)
    for key, module in modules.items():
        if key not in present:
            continue
        ours = module.weight.detach()[rows.to(module.weight.device)].float().cpu()
        theirs = _read_rows(folder, key, rows.tolist()).float()
        if not torch.allclose(ours, theirs, rtol=1e-2, atol=1e-3):
            warnings.warn(f"{folder}: {key} differs from the target's ({SHARED_KEYS[key]}); dspark_lite uses the "
                          "target's. Is this the drafter of another checkpoint of the target?", stacklevel=3)


# ========================================================================== writing our drafter


def released_config_dict(drafter: DFlashDrafter, target_config: PretrainedConfig | None = None,
                         dtype: torch.dtype | None = None) -> dict[str, Any]:
    """The config.json DeepSpec's save_pretrained writes for this drafter (chapter 07): the
    draft layers' Qwen3 config (transformers' diff form) plus DeepSpec's fields. Without
    `target_config`, num_target_layers is left out (the loader then does not check it)."""
    config = copy.deepcopy(drafter.layer_config)
    config.architectures = [ARCHITECTURE]
    config.tie_word_embeddings = False
    config.dtype = dtype or drafter.dtype
    extra: dict[str, Any] = {"block_size": drafter.block_size, "mask_token_id": drafter.mask_token_id,
                             "target_layer_ids": list(drafter.target_layer_ids), "num_anchors": NUM_ANCHORS}
    if target_config is not None:
        extra["num_target_layers"] = int(_target_dict(target_config)["num_hidden_layers"])
    head = getattr(drafter, "markov_head", None)
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
    """Write `drafter` in DeepSpec's released layout (chapter 07): `folder`/config.json and
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
    """The fields of a released Eagle3 drafter's config.json that decide its shape (chapter 07).

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
    """architectures[0] of `folder`/config.json, or None when it cannot be read (chapter 07).
    DeepSpec's eval.py picks its evaluator by this name."""
    try:
        arch = json.loads((Path(folder) / CONFIG_FILE).read_text()).get("architectures") or [None]
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    return arch[0] if isinstance(arch, list) and arch else None


def parse_eagle3_config(raw: Mapping[str, Any], where: str = "config.json") -> ReleasedEagle3Config:
    """Read a released Eagle3 config dict (chapter 07); CheckpointError names a wrong
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
        **_layer_shape(raw, _eagle3_field, where),
    )


def read_eagle3_config(folder: str | Path) -> ReleasedEagle3Config:
    """parse_eagle3_config of `folder`/config.json (chapter 07)."""
    return parse_eagle3_config(*_config_json(folder, "released Eagle3 drafter"))


def eagle3_drafter_config(released: ReleasedEagle3Config, target_config: PretrainedConfig,
                          own_embeddings: bool = False) -> EagleConfig:
    """The EagleConfig of a released Eagle3 on this target (chapter 07), after checking that it
    was built for a target of this shape and reads no final layer (DeepSpec's evaluator refuses
    one: `output_hidden_states` holds the final-normed state there)."""
    check_target(released, target_config, "the Eagle3 drafter")
    target = _target_dict(target_config)
    last = int(target["num_hidden_layers"]) - 1
    if last in released.target_layer_ids:
        raise CheckpointError(f"the Eagle3 drafter reads target layer {last}, the target's last; DeepSpec's evaluator "
                              "refuses that (assert_no_final_target_layer): hidden_states there is final-normed")
    return EagleConfig(
        target_layer_ids=released.target_layer_ids, ttt_length=released.ttt_length,
        num_layers=released.num_draft_layers,
        intermediate_size=_override(released.intermediate_size, int(target["intermediate_size"])),
        num_heads=_override(released.num_attention_heads, int(target["num_attention_heads"])),
        num_kv_heads=_override(released.num_key_value_heads, int(target.get("num_key_value_heads") or 0)),
        head_dim=_override(released.head_dim, int(target.get("head_dim") or 0)),
        own_embeddings=own_embeddings,
    )


def target_end_ids(target: PreTrainedModel) -> tuple[int, ...]:
    """The ids that end a reply for `target` (chapter 07): its generation config's eos_token_id,
    else its config's, as DeepSpec's `resolve_stop_token_ids` reads them; () when neither has one."""
    for config in (getattr(target, "generation_config", None), target.config):
        ids = getattr(config, "eos_token_id", None)
        if ids is not None:
            return checked_end_ids(ids)
    return ()


def build_eagle3(released: ReleasedEagle3Config, target: PreTrainedModel, seed: int = 0,
                 dtype: torch.dtype | None = None, own_embeddings: bool = False,
                 end_ids: int | list[int] | tuple[int, ...] | None = None) -> EagleDrafter:
    """An EagleDrafter of the released shape on `target`, with random weights (chapter 07), in
    `dtype` (default: the target's) on the target's device (`meta` gives `meta`). `end_ids` stop
    its chain (None: `target_end_ids(target)`; () never stops early). RoPE stays float32."""
    cfg = eagle3_drafter_config(released, target.config, own_embeddings)
    device, target_dtype = _model_place(target)
    dtype = target_dtype if dtype is None else dtype
    place = torch.device("meta") if device.type == "meta" else contextlib.nullcontext()
    with default_dtype(dtype if dtype.is_floating_point else None), place:
        drafter = EagleDrafter(target, cfg, seed, end_ids=target_end_ids(target) if end_ids is None else end_ids)
    return rope_in_float32(drafter.to(dtype))


def eagle3_expected_shapes(drafter: EagleDrafter) -> dict[str, tuple[int, ...]]:
    """Every key a released Eagle3 checkpoint of this drafter holds, with its shape (chapter 07):
    DeepSpec's names are ours (the identity), plus embed_tokens / lm_head [vocab, hidden] (the
    drafter's own with `own_embeddings`, else copies of the target's that it shares)."""
    shapes = {key: tuple(value.shape) for key, value in drafter.state_dict().items()}
    shapes.update({key: (drafter.vocab_size, drafter.hidden_size) for key in SHARED_KEYS})
    return shapes


def load_released_eagle3(source: str | Path, target: PreTrainedModel, dtype: torch.dtype | None = None,
                         download: bool = True, check_shared: bool = True, own_embeddings: bool = False,
                         end_ids: int | list[int] | tuple[int, ...] | None = None) -> EagleDrafter:
    """A released DeepSpec Eagle3 drafter (folder or hub id, e.g. deepseek-ai/eagle3_qwen3_4b_ttt7)
    as an `EagleDrafter` on `target` (chapter 07), in `dtype` (default: the target's), on the
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
    device, target_dtype = _model_place(target)
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
        _warn_if_shared_differ(drafter, folder)
    keys = set(expected) if own_embeddings else set(expected) - set(SHARED_KEYS)
    tensors = _read_tensors(folder, keys, device)
    drafter.load_state_dict({key: value.to(dtype) for key, value in tensors.items()}, strict=True, assign=True)
    if own_embeddings:
        drafter.embed_tokens.requires_grad_(False)
        drafter.lm_head.requires_grad_(False)
    drafter.end_ids = target_end_ids(target) if end_ids is None else end_ids
    return rope_in_float32(drafter).eval()


def eagle3_config_dict(drafter: EagleDrafter, target_config: PretrainedConfig | None = None,
                       dtype: torch.dtype | None = None, architecture: str = EAGLE3_ARCHITECTURE) -> dict[str, Any]:
    """The config.json DeepSpec's trainer writes for this Eagle3 drafter (chapter 07): the draft
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
    raw.update({"target_layer_ids": list(drafter.target_layer_ids), "ttt_length": drafter.block_size,
                "step_loss_decay": EAGLE3_STEP_LOSS_DECAY, "draft_num_hidden_layers": layers,
                "num_hidden_layers": layers, "layer_types": ["full_attention"] * layers})
    if target_config is not None:
        raw["num_target_layers"] = int(_target_dict(target_config)["num_hidden_layers"])
        name = getattr(target_config, "_name_or_path", "")
        if name:
            raw["target_model_name_or_path"] = str(name)
    return raw


def save_released_eagle3(drafter: EagleDrafter, folder: str | Path, target_config: PretrainedConfig | None = None,
                         dtype: torch.dtype | None = None, architecture: str = EAGLE3_ARCHITECTURE) -> Path:
    """Write an EagleDrafter in DeepSpec's released Eagle3 layout (chapter 07): `folder`/config.json
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


# ========================================================================== any released drafter


def build_from_config(folder: str | Path, target: PreTrainedModel, seed: int = 0,
                      dtype: torch.dtype | None = None) -> nn.Module:
    """A drafter shaped like the released one whose config.json is in `folder` (DSpark, DFlash or
    Eagle3, by its architecture name), with random weights, on the target's device (chapter 07:
    random-weights mode, the memory table, the full-size dry run)."""
    if released_architecture(folder) in EAGLE3_ARCHITECTURES:
        return build_eagle3(read_eagle3_config(folder), target, seed, dtype)
    return build_drafter(read_released_config(folder), target, seed, dtype=dtype)


def released_shapes(drafter: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every key (and shape) a released file of this drafter holds, whatever its kind."""
    return eagle3_expected_shapes(drafter) if isinstance(drafter, EagleDrafter) else expected_shapes(drafter)


def save_any_released(drafter: nn.Module, folder: str | Path, target_config: PretrainedConfig | None = None,
                      dtype: torch.dtype | None = None) -> Path:
    """`save_released_eagle3` for an EagleDrafter, else `save_released` (chapter 07)."""
    if isinstance(drafter, EagleDrafter):
        return save_released_eagle3(drafter, folder, target_config, dtype)
    return save_released(drafter, folder, target_config, dtype)

