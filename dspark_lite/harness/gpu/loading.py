"""Chapter 07's models: Qwen3-4B and DeepSpec's released drafters through dspark_lite's engine.

Three worlds, one code path (`load_world`):

* "real": `Qwen/Qwen3-4B` through `AutoModelForCausalLM` (`runtime.pick_dtype`: bf16 from compute
  capability 8.0, float32 below; sdpa attention) and the released DFlash and DSpark drafters through
  `checkpoints.load_released` (hub ids or local folders).
* "random-weights": the same shapes from the committed configs in `data/qwen3_4b/`, random
  weights: a GPU without hub access still measures real cost tables and engine overheads
  (acceptance numbers are meaningless).
* "smoke": a tiny random Qwen3 target and tiny random DSpark and DFlash drafters, written to a
  folder in exactly the released layout (`checkpoints.save_released`, `save_pretrained`) and
  read back by the same loaders. CPU runs (CI, the book build) use it; its numbers are
  meaningless too.
"""
from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from ... import kvcache
from ...dflash import DFlashDrafter
from ...dspark import DSparkDrafter
from ...eagle import EagleDrafter
from ...hidden_drafter import DrafterConfig
from ...runtime import pick_dtype
from ..hub import quiet_hub_bars
from ..result_files import REPO
from ..toy import tokenizer as toy_tokenizer
from ..toy.profiles import GpuStudy
from ..toy.replies import encode_prompt
from . import checkpoints, evalsets

TARGET_ID = "Qwen/Qwen3-4B"
DRAFTER_IDS: dict[str, str] = {"eagle3": "deepseek-ai/eagle3_qwen3_4b_ttt7",
                               "dflash": "deepseek-ai/dflash_qwen3_4b_block7",
                               "dspark": "deepseek-ai/dspark_qwen3_4b_block7"}
QWEN3_4B = REPO / "data" / "qwen3_4b"
MODES = ("real", "random-weights", "smoke")

# Table 1 of the paper, Qwen3-4B, tau at gamma 7 and T = 1 (benchmark names as evalsets).
PAPER_TABLE1: dict[str, dict[str, float]] = {
    "eagle3": dict(zip(evalsets.TABLE1_ORDER, (5.14, 4.62, 3.92, 3.69, 4.16, 3.77, 2.39, 2.26, 2.55))),
    "dflash": dict(zip(evalsets.TABLE1_ORDER, (5.40, 4.85, 4.15, 4.40, 4.74, 4.18, 3.07, 2.96, 2.83))),
    "dspark": dict(zip(evalsets.TABLE1_ORDER, (6.11, 5.70, 4.89, 5.13, 5.38, 4.86, 3.64, 3.54, 3.29))),
}
# Figure 2 (Qwen3-4B): the conditional acceptance the paper states at positions 1 and 7.
PAPER_FIGURE2: dict[tuple[str, str], tuple[float | None, float | None]] = {
    ("dflash", "code"): (0.87, 0.78), ("dflash", "chat"): (0.72, 0.63), ("dspark", "math"): (0.93, None),
    ("eagle3", "chat"): (0.53, 0.74),
}


# ========================================================================== devices, dtypes, modes


def resolve_mode(mode: str, device: torch.device) -> str:
    """"auto" -> "real" on a GPU, else "smoke". "real" and "random-weights" need a GPU: a 4B model
    in float32 does not fit a laptop's memory, and its numbers would take days."""
    if mode == "auto":
        return "real" if device.type == "cuda" else "smoke"
    if mode not in MODES:
        raise ValueError(f"MODE must be 'auto' or one of {MODES}, got {mode!r}")
    if mode != "smoke" and device.type != "cuda":
        raise ValueError(f"MODE={mode!r} needs a CUDA GPU (Qwen3-4B-sized models); this run has {device}. "
                         "Use MODE='smoke' (or 'auto') on a CPU")
    return mode


def gpu_name(device: torch.device) -> str:
    """The GPU's marketing name, or 'cpu'."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3' (for file names)."""
    words = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    return re.sub(r"^nvidia_", "", words) or "unknown"


# ========================================================================== loading the models


def direct_to_device(device: torch.device) -> bool:
    """Whether `from_pretrained` can put the target's weights straight onto `device` (a GPU, with
    `device_map`, which transformers runs through accelerate), instead of reading all of them into
    host memory first (about 8 GB for Qwen3-4B in bf16: more than a free Colab's spare RAM). Prints
    how to get there when accelerate is missing."""
    if device.type != "cuda":
        return False
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        print("accelerate is not installed: the target is read into host memory, then moved to the GPU "
              "(pip install accelerate loads it straight onto the GPU)")
        return False
    return True


def load_target(source: str | Path, device: torch.device, dtype: torch.dtype | None = None
                ) -> tuple[PreTrainedModel, Any]:
    """The target and its tokenizer from a hub id or a folder, through AutoModelForCausalLM with
    sdpa attention, in `dtype` (default: `pick_dtype`) on `device`, loaded straight onto a GPU when
    it can be (`direct_to_device`). Offline and not
    in the local hub cache: an error that says to pass a local folder."""
    dtype = dtype or pick_dtype(device)
    local = Path(str(source)).expanduser().is_dir()
    placed = direct_to_device(device)
    try:
        with quiet_hub_bars():
            model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype, attn_implementation="sdpa",
                                                         **({"device_map": {"": str(device)}} if placed else {}))
        tok = AutoTokenizer.from_pretrained(str(source))
    except OSError as error:
        if local:
            raise
        raise FileNotFoundError(f"cannot load {source} ({error.__class__.__name__}); offline (HF_HUB_OFFLINE=1) or "
                                "not in the local hub cache? Pass a local folder holding the model instead") from None
    return model.to(device).eval(), tok


def random_target(config_path: str | Path, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Qwen3ForCausalLM:
    """A Qwen3 target of the committed config's shape with random weights, built directly on
    `device` in `dtype` (random-weights mode). The generation config committed beside
    it (Qwen3-4B's: both end ids, top-k 20, top-p 0.95) is attached, so the end ids and the
    baseline's sampling settings are exercised exactly as with the real model."""
    config = Qwen3Config(**json.loads(Path(config_path).read_text()))
    torch.manual_seed(seed)
    with checkpoints.default_dtype(dtype), torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    generation = Path(config_path).parent / "generation_config.json"
    if generation.is_file():
        model.generation_config = GenerationConfig(**json.loads(generation.read_text()))
    return model.eval()


def random_drafter(config_folder: str | Path, target: PreTrainedModel, seed: int = 0) -> torch.nn.Module:
    """A drafter shaped like a released one (its config.json: DSpark, DFlash or Eagle3) with random
    weights."""
    return checkpoints.build_from_config(config_folder, target, seed).eval()


def tiny_tokenizer(vocab_size: int):
    """A byte-level BPE trained on the fixture prompts, with a chat template (the smoke world's)."""
    texts = [p for prompts in evalsets.load_benchmarks().values() for p in prompts]
    return toy_tokenizer.train_tokenizer(texts * 4, vocab_size)


def build_smoke_world(folder: str | Path, study: GpuStudy, seed: int = 0) -> dict[str, Path]:
    """Write a tiny random Qwen3 target (save_pretrained, with its tokenizer) and tiny random
    DSpark, DFlash and Eagle3 drafters in the released layouts (`checkpoints.save_released`)
    into `folder`; returns their folders {"target", "dspark", "dflash", "eagle3"}. The
    DSpark drafter has the Markov head and the confidence head; DSpark and DFlash share one backbone
    shape; Eagle3 is one layer with a chain of gamma steps, as DeepSpec's."""
    folder = Path(folder)
    tok = tiny_tokenizer(study.tiny_vocab)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=study.tiny_hidden, num_hidden_layers=study.tiny_layers,
                         num_attention_heads=study.tiny_heads, num_key_value_heads=max(1, study.tiny_heads // 2),
                         head_dim=study.tiny_hidden // study.tiny_heads, intermediate_size=2 * study.tiny_hidden,
                         max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=tok.eos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    target = Qwen3ForCausalLM(config).eval()
    paths = {"target": folder / "target", "dspark": folder / "dspark_tiny_block7", "dflash": folder / "dflash_tiny_block7",
             "eagle3": folder / "eagle3_tiny_ttt7"}
    with quiet_hub_bars():
        target.save_pretrained(paths["target"])
    tok.save_pretrained(paths["target"])
    shape = dict(target_layer_ids=tuple(range(study.tiny_layers - 1)), mask_token_id=tok.mask_token_id,
                 gamma=study.gamma, num_layers=study.tiny_draft_layers)
    dspark = DSparkDrafter(target, DrafterConfig(**shape, head_type="markov", head_rank=study.tiny_head_rank,
                                                 confidence_head=True), seed=seed + 1)
    dflash = DFlashDrafter(target, DrafterConfig(**shape), seed=seed + 1)
    eagle3 = EagleDrafter(target, DrafterConfig(shape["target_layer_ids"], gamma=study.gamma), seed=seed + 1)
    checkpoints.save_released(dspark, paths["dspark"], target.config)
    checkpoints.save_released(dflash, paths["dflash"], target.config)
    checkpoints.save_released(eagle3, paths["eagle3"], target.config)
    return paths


def end_token_ids(target: PreTrainedModel, tok: Any) -> list[int]:
    """Every id that ends a reply: the target's generation config's `eos_token_id`
    (Qwen3: <|im_end|> 151645 and <|endoftext|> 151643), else the tokenizer's, in that order and
    without repeats, as DeepSpec's `resolve_stop_token_ids`."""
    ids = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
    if ids is None:
        ids = getattr(tok, "eos_token_id", None)
    if ids is None:
        return []
    ids = [ids] if isinstance(ids, int) else list(ids)
    return list(dict.fromkeys(int(i) for i in ids))


@dataclass
class World:
    """The models under measurement: the target, its tokenizer, the drafters by kind, and where they came from."""

    mode: str
    device: torch.device
    dtype: torch.dtype
    target: PreTrainedModel
    tokenizer: Any
    drafters: dict[str, torch.nn.Module]
    sources: dict[str, str] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)  # local folders the models were read from, by role

    @property
    def eos_token_ids(self) -> list[int]:
        """Every end id of the target (`end_token_ids`): the engine and the baseline stop on any."""
        return end_token_ids(self.target, self.tokenizer)


def load_world(mode: str, device: torch.device, study: GpuStudy, seed: int = 0, target_source: str | Path = TARGET_ID,
               drafter_sources: Mapping[str, str | Path] | None = None, workdir: str | Path | None = None,
               dtype: torch.dtype | None = None) -> World:
    """The target and released drafters in `mode` ("real", "random-weights" or "smoke"; see the module doc), in
    `dtype` (default: `pick_dtype(device)`; smoke: float32). Random weights on a CPU in bf16 is the
    full-size dry run (tests/test_full_size_dry_run.py)."""
    drafter_sources = dict(drafter_sources or DRAFTER_IDS)
    paths: dict[str, Path] = {}
    if mode == "real":
        target, tok = load_target(target_source, device, dtype)
        drafters = {kind: checkpoints.load_released(src, target) for kind, src in drafter_sources.items()}
        sources = {"target": str(target_source), **{k: str(v) for k, v in drafter_sources.items()}}
    elif mode == "random-weights":
        target = random_target(QWEN3_4B / "config.json", device, dtype or pick_dtype(device), seed)
        tok = _tokenizer_or_tiny(target_source, study)
        drafters = {kind: random_drafter(QWEN3_4B / Path(str(DRAFTER_IDS[kind])).name, target, seed + 1)
                    for kind in drafter_sources}
        sources = {"target": "random weights, data/qwen3_4b/config.json",
                   **{k: f"random weights, data/qwen3_4b/{Path(DRAFTER_IDS[k]).name}/config.json" for k in drafter_sources}}
    elif mode == "smoke":
        folder = Path(workdir or tempfile.mkdtemp(prefix="dspark_ch07_"))
        paths = dict(build_smoke_world(folder, study, seed))
        target, tok = load_target(paths["target"], device, dtype or torch.float32)
        drafters = {kind: checkpoints.load_released(paths[kind], target) for kind in DRAFTER_IDS if kind in paths}
        sources = {"target": "tiny random Qwen3, written with save_pretrained and read back",
                   **{k: "tiny random, written in the released layout and read back" for k in drafters}}
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return World(mode, device, next(target.parameters()).dtype, target, tok, drafters, sources, paths)


def _tokenizer_or_tiny(source: str | Path, study: GpuStudy):
    """Qwen3's tokenizer when it is at hand (local folder, hub cache, or online), else the tiny
    BPE: random weights make every prompt equally meaningless."""
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError):
        return tiny_tokenizer(study.tiny_vocab)


class NonFiniteLogits(FloatingPointError):
    """The target's logits hold inf or NaN: the dtype overflowed, not the KV cache."""


def check_finite_logits(target: PreTrainedModel, ids: torch.Tensor) -> None:
    """One uncached forward of `ids` ([T]); NonFiniteLogits naming the dtype when any logit is inf
    or NaN. In fp16 Qwen3's activations overflow (its largest exceed fp16's 65,504),
    and the NaN that follows would otherwise reach the KV-cache self-check, which would blame the
    cache."""
    dtype = next(target.parameters()).dtype
    with torch.no_grad():
        logits = target(input_ids=ids[None]).logits
    bad = int((~torch.isfinite(logits)).sum())
    if bad:
        name = str(dtype).replace("torch.", "")
        raise NonFiniteLogits(f"the target's logits hold {bad} inf/NaN values of {logits.numel()} on a short prompt, "
                              f"in {name}: the model overflows its dtype ({name}), which is not a KV-cache problem. "
                              "Run it in bfloat16 (DeepSpec's dtype) or float32: set DTYPE (--dtype)")


def check_cache(world: World) -> float:
    """The engine's KV-cache self-check (`kvcache.check_kv_cache`) on a short chat prompt:
    every GPU run starts with it, so a transformers whose cache keyword or crop semantics the
    engine does not handle stops the run with an error naming the version, instead of measuring
    a wrong tau. First the logits must be finite (`check_finite_logits`): an overflow
    of the dtype is reported as one, naming the dtype. Returns the largest total variation between
    cached and uncached next-token distributions."""
    ids = encode_prompt(world.tokenizer, "Say hello in five words.").to(world.device)
    check_finite_logits(world.target, ids)
    return kvcache.check_kv_cache(world.target, ids)
