"""Chapter 07's harness: Qwen3-4B and DeepSpec's released drafters through dspark_lite's engine.

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

The measurement reuses the package: `speculative.speculative_generate` (the chapter-02 engine),
`evaluation.summarize` (tau, Figure 2's conditional acceptance, prefix survival),
`calibration` (STS, threshold sweep), `costs.profile_step_curve` (SPS(B)) and `serving`
(the simulator). Prompts follow the paper's protocol: DeepSpec's evaluation files (never the
book's fixture for a run set beside Table 1), the chat template with thinking off, the first turn
only, temperature 1.0, gamma 7, both end ids, each prompt seeded with seed + its index.

Before any weight is read, `check_setup` checks every input (mode and device, prompt source,
results folder, model sources, dtype, GPU memory) and names the parameter to set; the notebook and
the command line both call it. Tau is measured on untimed generations, a seeded sample of prompts
is timed (`timed_sample`), and a run prints an estimate of its wall time after its first
generations (`RunClock`). A run is filed as Table 1 only under DeepSpec's full protocol
(`run_protocol`); a smaller one is a named subset.

`python -m dspark_lite.harness.gpu --help`: the same measurement without Jupyter (torch, transformers,
safetensors, numpy and pandas only), one results file; under `torchrun` every rank measures its
shard of the prompts (`shard`, `measure_part`) and rank 0 merges the parts (`merge_parts`) and runs
the rest (`analyze`). `full_size_dry_run` runs the path at Qwen3-4B's shapes on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import random
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import transformers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel, Qwen3Config,
                          Qwen3ForCausalLM)

from . import benchmark, checkpoints, costs, evalsets, serving, tokenizer as toy_tokenizer

from .. import calibration, kvcache, speculative
from ..dflash import DFlashConfig, DFlashDrafter
from ..eagle import EagleConfig, EagleDrafter
from ..dspark import DSparkConfig, DSparkDrafter
from .evaluation import DomainAcceptance, summarize, summarize_rollouts
from .profiles import GpuStudy, get_profile
from .results import REPO, committed_results_dir, results_dir, write_result
from ..progress import progress
from ..runtime import device_generator, pick_dtype
from ..record import Rounds, sigmoid
from ..speculative import speculative_generate
from .hub import quiet_hub_bars
from .replies import encode_prompt

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
    in float32 does not fit a laptop's memory, and its numbers would take days (chapter 07)."""
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


def load_target(source: str | Path, device: torch.device, dtype: torch.dtype | None = None
                ) -> tuple[PreTrainedModel, Any]:
    """The target and its tokenizer from a hub id or a folder, through AutoModelForCausalLM with
    sdpa attention, in `dtype` (default: `pick_dtype`) on `device` (chapter 07). Offline and not
    in the local hub cache: an error that says to pass a local folder."""
    dtype = dtype or pick_dtype(device)
    local = Path(str(source)).expanduser().is_dir()
    try:
        with quiet_hub_bars():
            model = AutoModelForCausalLM.from_pretrained(str(source), dtype=dtype, attn_implementation="sdpa")
        tok = AutoTokenizer.from_pretrained(str(source))
    except OSError as error:
        if local:
            raise
        raise FileNotFoundError(f"cannot load {source} ({error.__class__.__name__}); offline (HF_HUB_OFFLINE=1) or "
                                "not in the local hub cache? Pass a local folder holding the model instead") from None
    return model.to(device).eval(), tok


def random_target(config_path: str | Path, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Qwen3ForCausalLM:
    """A Qwen3 target of the committed config's shape with random weights, built directly on
    `device` in `dtype` (chapter 07, random-weights mode). The generation config committed beside
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
    weights (chapter 07)."""
    return checkpoints.build_from_config(config_folder, target, seed).eval()


def tiny_tokenizer(vocab_size: int):
    """A byte-level BPE trained on the fixture prompts, with a chat template (chapter 07's smoke world)."""
    texts = [p for prompts in evalsets.load_benchmarks().values() for p in prompts]
    return toy_tokenizer.train_tokenizer(texts * 4, vocab_size)


def build_smoke_world(folder: str | Path, study: GpuStudy, seed: int = 0) -> dict[str, Path]:
    """Write a tiny random Qwen3 target (save_pretrained, with its tokenizer) and tiny random
    DSpark, DFlash and Eagle3 drafters in the released layouts (save_released, save_released_eagle3)
    into `folder`; returns their folders {"target", "dspark", "dflash", "eagle3"} (chapter 07). The
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
                 block_size=study.gamma, num_layers=study.tiny_draft_layers)
    dspark = DSparkDrafter(target, DSparkConfig(**shape, head_type="markov", markov_rank=study.tiny_markov_rank,
                                                confidence_head=True), seed=seed + 1)
    dflash = DFlashDrafter(target, DFlashConfig(**shape), seed=seed + 1)
    eagle3 = EagleDrafter(target, EagleConfig(shape["target_layer_ids"], ttt_length=study.gamma), seed=seed + 1)
    checkpoints.save_released(dspark, paths["dspark"], target.config)
    checkpoints.save_released(dflash, paths["dflash"], target.config)
    checkpoints.save_released_eagle3(eagle3, paths["eagle3"], target.config)
    return paths


def end_token_ids(target: PreTrainedModel, tok: Any) -> list[int]:
    """Every id that ends a reply (chapter 07): the target's generation config's `eos_token_id`
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
    """What chapter 07 measures: the target, its tokenizer, the drafters by kind, and where they came from."""

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
    """Chapter 07's models in `mode` ("real", "random-weights" or "smoke"; see the module doc), in
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
    """The target's logits hold inf or NaN: the dtype overflowed (chapter 07), not the KV cache."""


def check_finite_logits(target: PreTrainedModel, ids: torch.Tensor) -> None:
    """One uncached forward of `ids` ([T]); NonFiniteLogits naming the dtype when any logit is inf
    or NaN (chapter 07). In fp16 Qwen3's activations overflow (its largest exceed fp16's 65,504),
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
    a wrong tau (chapter 07). First the logits must be finite (`check_finite_logits`): an overflow
    of the dtype is reported as one, naming the dtype. Returns the largest total variation between
    cached and uncached next-token distributions."""
    ids = encode_prompt(world.tokenizer, "Say hello in five words.").to(world.device)
    check_finite_logits(world.target, ids)
    return kvcache.check_kv_cache(world.target, ids)


# ========================================================================== prompts and acceptance

PROMPT_SOURCES = ("deepspec", "hub", "fixture")


def load_prompts(counts: int | Mapping[str, int | None] | None, eval_folder: str | Path | None = None,
                 download: bool = False, allow_fixture: bool = False,
                 names: Sequence[str] = evalsets.TABLE1_ORDER) -> tuple[dict[str, list[str]], str]:
    """Table 1's prompts and where they came from (chapter 07): ("deepspec", a clone of
    deepseek-ai/DeepSpec or its eval_datasets/ at `eval_folder`), ("hub", rebuilt from the source
    datasets through `datasets`, only when `download` and online), or ("fixture", the book's 22
    stand-in prompts, only when `allow_fixture`). The fixture is not the benchmarks: its tau is
    never Table 1's, and a run on it is named and saved as a fixture run."""
    if eval_folder is not None:
        return evalsets.load_benchmarks(eval_folder, counts, names), "deepspec"
    if download:
        counted = evalsets.prompt_counts(counts, names)
        return {name: evalsets.load_from_hub(name, count) for name, count in counted.items()}, "hub"
    if allow_fixture:
        return evalsets.load_benchmarks(evalsets.FIXTURE, counts, names), "fixture"
    raise FileNotFoundError("no evaluation prompts: Table 1 needs DeepSpec's evaluation files. Set EVAL_FOLDER "
                            "(--eval-folder) to a clone of deepseek-ai/DeepSpec, or allow downloading them from the hub "
                            "(DOWNLOAD_PROMPTS = True, --download-prompts). The book's fixture prompts are not the "
                            "benchmarks; run on them only knowingly (ALLOW_FIXTURE = True, --allow-fixture): the run "
                            "is then saved as a fixture run and never compared with the paper")


def comparable_to_paper(mode: str, prompt_source: str) -> bool:
    """Whether a run's tau may stand beside Table 1's (chapter 07): real weights on DeepSpec's
    prompts only. Random weights, the smoke world and the fixture prompts never are."""
    if prompt_source not in PROMPT_SOURCES:
        raise ValueError(f"prompt_source must be one of {PROMPT_SOURCES}, got {prompt_source!r}")
    return mode == "real" and prompt_source != "fixture"


# DeepSpec's evaluation protocol (eval.py): its prompt counts, its generation length, T = 1, gamma 7.
PAPER_GAMMA, PAPER_TEMPERATURE = 7, 1.0


def protocol_differences(mode: str, prompt_source: str, counts: Mapping[str, int], new_tokens: int,
                         temperature: float, gamma: int) -> list[str]:
    """How a run differs from DeepSpec's protocol behind Table 1, one phrase each (empty: it is the
    protocol): real weights, DeepSpec's own prompt files, its full prompt counts per benchmark, 2048
    new tokens, T = 1 and gamma 7 (chapter 07)."""
    found = {evalsets.check_benchmark(k): int(v) for k, v in counts.items()}
    wrong = [n for n, c in evalsets.DEEPSPEC_COUNTS.items() if found.get(n) != c]
    out = []
    if mode != "real":
        out.append(f"{mode} models, not the released weights")
    if prompt_source != "deepspec":
        out.append(f"prompts from {prompt_source}, not DeepSpec's files")
    if wrong:
        sizes = sorted({found.get(n, 0) for n in wrong})
        out.append(f"{', '.join(map(str, sizes))} prompts a benchmark on {len(wrong)} of {len(evalsets.DEEPSPEC_COUNTS)} "
                   "benchmarks, not DeepSpec's counts")
    if new_tokens != PAPER_NEW_TOKENS:
        out.append(f"{new_tokens} new tokens a prompt, not {PAPER_NEW_TOKENS}")
    if temperature != PAPER_TEMPERATURE:
        out.append(f"temperature {temperature}, not {PAPER_TEMPERATURE:g}")
    if gamma != PAPER_GAMMA:
        out.append(f"gamma {gamma}, not {PAPER_GAMMA}")
    return out


def run_protocol(mode: str, prompt_source: str, counts: Mapping[str, int], new_tokens: int, temperature: float,
                 gamma: int) -> str | None:
    """What a run's tau may be called (chapter 07): "table1" only under DeepSpec's full protocol
    (`protocol_differences` empty); "subset" for real weights on DeepSpec's (or the hub's) prompts
    at other sizes, set beside the paper's numbers but named a subset with its sizes; None for
    anything else (fixture prompts, random weights, the smoke world), never set beside the paper."""
    if not comparable_to_paper(mode, prompt_source):
        return None
    return "subset" if protocol_differences(mode, prompt_source, counts, new_tokens, temperature, gamma) else "table1"


PHASES = ("prefill", "draft", "verify", "overhead")


@dataclass
class BenchmarkRun:
    """One drafter on one benchmark: the acceptance summary (with every round's record) and the
    engine's seconds per phase (prefill, draft, verify, overhead), summed over the prompts that were
    timed, whose rounds `timed_rounds` counts (None: every prompt was timed)."""

    acceptance: DomainAcceptance
    seconds: dict[str, float]
    timed_rounds: int | None = None

    @property
    def rounds_timed(self) -> int:
        """The rounds the phase seconds cover."""
        return self.acceptance.rounds if self.timed_rounds is None else self.timed_rounds


def timed_sample(size: int, count: int, seed: int) -> list[int]:
    """The indices of the prompts of a benchmark of `size` prompts that are generated with the
    phase stopwatch on (chapter 07): `count` of them, drawn with random.Random(seed), sorted. The
    stopwatch synchronises the GPU about six times a round, so tau is measured on untimed
    generations and only this sample is timed; a sharded run times the same prompts."""
    if count < 0:
        raise ValueError(f"timed_prompts must be >= 0, got {count}")
    return sorted(random.Random(seed).sample(range(size), min(count, size)))


def duration_words(seconds: float) -> str:
    """'40 min', '3.2 h', '1.5 days': a wall time as a reader plans with it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def wall_time_estimate(seconds: float, tokens: int, generations: int, total_generations: int, new_tokens: int,
                       drafters: int) -> str:
    """The sentence printed after the first generations of a run (chapter 07): from their pace
    (generated tokens per second), at most how long all `total_generations` of this run take, each
    up to `new_tokens` tokens, and how long DeepSpec's full protocol (its prompt counts, 2048 new
    tokens, `drafters` drafters) would take on this machine. An upper estimate: replies that end
    early take less."""
    if seconds <= 0 or tokens <= 0:
        return f"after {generations} generations no token was timed; no estimate"
    pace = tokens / seconds
    full = sum(evalsets.DEEPSPEC_COUNTS.values()) * drafters * PAPER_NEW_TOKENS / pace
    return (f"estimate after the first {generations} generations ({pace:.0f} tokens/s): this run's "
            f"{total_generations} generations of up to {new_tokens} tokens take at most about "
            f"{duration_words(total_generations * new_tokens / pace)}; DeepSpec's full protocol "
            f"({sum(evalsets.DEEPSPEC_COUNTS.values())} prompts x {drafters} drafters x {PAPER_NEW_TOKENS} tokens) "
            f"about {duration_words(full)} on this machine")


@dataclass
class RunClock:
    """Counts a run's generations and prints `wall_time_estimate` once, after the first `after`
    (chapter 07), so a reader knows early whether the run takes an hour or a day."""

    total_generations: int
    new_tokens: int
    drafters: int
    after: int = 3
    echo: Any = print
    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    tokens: int = 0
    message: str | None = None

    def step(self, tokens: int) -> None:
        """One generation of `tokens` tokens finished."""
        self.done, self.tokens = self.done + 1, self.tokens + int(tokens)
        if self.message is None and self.done >= min(self.after, self.total_generations):
            self.message = wall_time_estimate(time.perf_counter() - self.started, self.tokens, self.done,
                                              self.total_generations, self.new_tokens, self.drafters)
            if self.echo is not None:
                self.echo(self.message)


def generate_one(world: World, kind: str, ids: torch.Tensor, study: GpuStudy, seed: int,
                 timed: bool = False) -> speculative.Rollout:
    """One speculative generation of prompt `ids` with drafter `kind`, its sampling seeded with
    `seed` (DeepSpec seeds each prompt with seed + its index, so a sharded run draws what a
    single run draws), stopping on any end id; phase seconds when `timed` (chapter 07)."""
    generator = device_generator(seed, world.device)
    return speculative_generate(world.target, world.drafters[kind], ids, study.new_tokens, study.gamma,
                                study.temperature, generator, world.eos_token_ids or None, timed=timed)


def run_benchmark(world: World, kind: str, prompts: Sequence[str], study: GpuStudy, seed: int = 0,
                  desc: str = "", indices: Sequence[int] | None = None, size: int | None = None,
                  clock: RunClock | None = None) -> BenchmarkRun:
    """Speculative generation of every prompt with drafter `kind` at gamma and temperature of
    `study`, prompt i seeded with seed + indices[i] (default: its position) in a benchmark of
    `size` prompts (default: these); the rounds are kept for calibration and the simulator
    (chapter 07). Only the prompts of `timed_sample(size, study.timed_prompts, seed)` run with the
    phase stopwatch on; timing does not change what is drawn (same seed, same tokens), so tau pools
    every prompt. `clock` counts the generations (the wall-time estimate)."""
    indices = list(range(len(prompts))) if indices is None else list(indices)
    if len(indices) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(indices)} indices; expected one index per prompt")
    size = len(prompts) if size is None else size
    timed = set(timed_sample(size, study.timed_prompts, seed))
    rollouts, timed_rounds = [], 0
    for index, prompt in progress(list(zip(indices, prompts)), desc=desc or kind, leave=False):
        out = generate_one(world, kind, encode_prompt(world.tokenizer, prompt).to(world.device), study, seed + index,
                           timed=index in timed)
        rollouts.append(out)
        timed_rounds += len(out.rounds) if index in timed else 0
        if clock is not None:
            clock.step(len(out.tokens))
    seconds = {phase: sum(float(getattr(out, f"{phase}_seconds") or 0.0) for out in rollouts) for phase in PHASES}
    return BenchmarkRun(summarize_rollouts(desc or kind, rollouts, study.gamma, keep_record=True), seconds, timed_rounds)


def run_clock(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, rank: int = 0,
              world_size: int = 1, echo: Any = print) -> RunClock:
    """The clock of this rank's generations: every drafter on its shard of every benchmark."""
    total = len(world.drafters) * sum(len(shard(p, rank, world_size)) for p in prompts.values())
    return RunClock(total, study.new_tokens, len(world.drafters), echo=echo)


def run_table1(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int = 0,
               eta: bool = True) -> dict[str, dict[str, BenchmarkRun]]:
    """{drafter kind: {benchmark: BenchmarkRun}} for every drafter of the world (chapter 07); with
    `eta`, the wall-time estimate is printed after the first generations."""
    clock = run_clock(world, prompts, study, echo=print if eta else None)
    return {kind: {name: run_benchmark(world, kind, p, study, seed, f"{kind}: {name}", clock=clock)
                   for name, p in prompts.items()} for kind in world.drafters}


def table1_frame(runs: Mapping[str, Mapping[str, BenchmarkRun]], compare: bool = True) -> pd.DataFrame:
    """Ours, one row per (drafter, benchmark) with tau and its rounds (chapter 07); with `compare`
    (only for a run `comparable_to_paper`), beside Table 1's tau and the relative difference in %."""
    rows = []
    for kind, by_bench in runs.items():
        for name, run in by_bench.items():
            row = {"drafter": kind, "benchmark": evalsets.BENCHMARKS[name].column, "domain": evalsets.domain_of(name),
                   "tau (ours)": run.acceptance.tau, "rounds": run.acceptance.rounds}
            if compare:
                paper = PAPER_TABLE1.get(kind, {}).get(name, np.nan)
                row.update({"tau (paper)": paper, "difference %": 100 * (run.acceptance.tau / paper - 1)})
            rows.append(row)
    return pd.DataFrame(rows)


def rounds_by_domain(runs: Mapping[str, BenchmarkRun]) -> dict[str, Rounds]:
    """One drafter's rounds pooled by domain (math, code, chat), labelled with it."""
    pooled: dict[str, list[Rounds]] = {}
    for name, run in runs.items():
        domain = evalsets.domain_of(name)
        pooled.setdefault(domain, []).append(run.acceptance.record.labelled(domain))
    return {domain: Rounds.concat(parts) for domain, parts in pooled.items()}


def domain_acceptance(runs: Mapping[str, BenchmarkRun], gamma: int) -> dict[str, DomainAcceptance]:
    """Figure 2's input: conditional acceptance (and prefix survival) per domain, pooled over benchmarks."""
    tokens = {d: 0 for d in evalsets.DOMAINS}
    for name, run in runs.items():
        tokens[evalsets.domain_of(name)] += run.acceptance.tokens
    return {d: summarize(d, rounds, gamma, tokens[d]) for d, rounds in rounds_by_domain(runs).items()}


def block_records(runs: Mapping[str, BenchmarkRun], gamma: int) -> Rounds:
    """The DSpark drafter's full blocks with confidences, labelled by domain (chapters 05-06's input)."""
    return Rounds.concat(list(rounds_by_domain(runs).values())).full_blocks(gamma)


def engine_overheads(runs: Mapping[str, Mapping[str, BenchmarkRun]]) -> pd.DataFrame:
    """Per drafter: milliseconds per round of drafting, verifying and the rest (sampling, cache
    crops, bookkeeping), and each phase's share (prefill included) of the engine's time, over the
    prompts measured with the phase stopwatch on (`timed_sample`; chapter 07)."""
    rows = {}
    for kind, by_bench in runs.items():
        seconds = {phase: sum(r.seconds[phase] for r in by_bench.values()) for phase in PHASES}
        rounds = max(1, sum(r.rounds_timed for r in by_bench.values()))
        total = sum(seconds.values()) or float("nan")
        rows[kind] = {**{f"{phase} ms/round": 1e3 * seconds[phase] / rounds for phase in ("draft", "verify", "overhead")},
                      **{f"{phase} %": 100 * seconds[phase] / total for phase in PHASES}, "rounds": rounds}
    return pd.DataFrame(rows).T


# ========================================================================== calibration and the simulator


@dataclass
class Calibration:
    """Chapter 05's measurements on the DSpark drafter's recorded blocks: the static-threshold
    sweep per domain, STS fitted on one split and scored on the other (raw and calibrated
    confidences of the test split, per-position metrics, mean ECE of a_k)."""

    records: Rounds
    sweep: dict[str, pd.DataFrame]
    sts: calibration.SequentialTemperatureScaling
    cal_idx: np.ndarray
    test_idx: np.ndarray
    calibrated: dict[str, np.ndarray]
    metrics: dict[str, pd.DataFrame]
    ece: dict[str, float]

    @property
    def test_records(self) -> Rounds:
        """The test split with STS-calibrated logits (the simulator's input)."""
        test = self.records[self.test_idx]
        return test.with_logits(self.sts.transform(test.logits))


def calibrate(records: Rounds, study: GpuStudy, seed: int = 0) -> Calibration:
    """Threshold sweep (Figure 5) and STS (Figure 6) on real recorded full blocks (chapter 07)."""
    confidences = records.confidences()
    sweep = {d: calibration.threshold_sweep(confidences[records.domain == d], records.accepted[records.domain == d],
                                            study.thresholds)
             for d in records.domains}
    cal_idx, test_idx = calibration.split_calibration_test(len(records), study.calibration_fraction, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.CalibrationWarning)
        sts = calibration.SequentialTemperatureScaling().fit(records.logits[cal_idx], records.accepted[cal_idx])
        z_test, n_test = records.logits[test_idx], records.accepted[test_idx]
        calibrated = {"raw": sigmoid(z_test), "STS": sigmoid(sts.transform(z_test))}
        metrics = {name: calibration.per_position_metrics(c, n_test).set_index("position") for name, c in calibrated.items()}
    ece = {name: float(m["prefix_ece"].mean()) for name, m in metrics.items()}
    return Calibration(records, sweep, sts, cal_idx, test_idx, calibrated, metrics, ece)


# ========================================================================== memory


def peak_memory_gib(device: torch.device) -> float | None:
    """torch.cuda.max_memory_allocated in GiB since the last reset (None on a CPU) (chapter 07)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def free_memory_bytes(device: torch.device) -> int | None:
    """Free GPU memory in bytes as the driver reports it (None on a CPU)."""
    return int(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Keys and values of one token over all layers: 2 x layers x KV heads x head_dim x bytes."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * dtype_bytes


def profile_step_bytes(config: Any, requests: int, gamma: int, context_len: int, dtype_bytes: int) -> int:
    """An upper estimate of the memory one SPS(B) profile at concurrency R = `requests` needs on top
    of the weights (chapter 07): the cache of R contexts plus a block each, the largest verify step's
    full-vocabulary logits (B = R(gamma + 1) rows, in the model dtype and once more in float32) and
    the largest layer's transient activations (prefill of R x context tokens: attention output and
    the MLP's three intermediate tensors)."""
    batch = requests * (gamma + 1)
    kv = kv_bytes_per_token(config, dtype_bytes) * requests * (context_len + gamma + 1)
    logits = batch * config.vocab_size * (dtype_bytes + 4)
    tokens = requests * context_len
    activations = tokens * (4 * config.hidden_size + 3 * config.intermediate_size) * dtype_bytes
    return int(kv + logits + activations)


def affordable_concurrencies(config: Any, wanted: Sequence[int], gamma: int, context_len: int, dtype_bytes: int,
                             free_bytes: int | None, fraction: float = 0.6) -> list[int]:
    """The concurrencies R of `wanted` whose profile fits in `fraction` of the free memory
    (`profile_step_bytes`); all of them when the free memory is unknown (a CPU). Raises when not
    even the smallest fits (chapter 07)."""
    if free_bytes is None:
        return sorted(wanted)
    fits = [R for R in sorted(wanted) if profile_step_bytes(config, R, gamma, context_len, dtype_bytes) <= fraction * free_bytes]
    if not fits:
        need = profile_step_bytes(config, min(wanted), gamma, context_len, dtype_bytes)
        raise MemoryError(f"the cost profile at R = {min(wanted)} needs about {need / 2**30:.1f} GiB, more than "
                          f"{fraction:.0%} of the {free_bytes / 2**30:.1f} GiB free; lower profile_context")
    return fits


def profile_costs(world: World, study: GpuStudy, seed: int = 0) -> tuple[dict[int, Any], list[int]]:
    """Chapter 06b's SPS(B) tables on the target, one per concurrency R that fits in free memory
    (`affordable_concurrencies`); returns (curves, the R values skipped for memory) (chapter 07)."""
    dtype_bytes = torch.finfo(world.dtype).bits // 8
    fits = affordable_concurrencies(world.target.config, study.concurrencies, study.gamma, study.profile_context,
                                    dtype_bytes, free_memory_bytes(world.device))
    curves = costs.profile_step_curves(world.target, fits, study.gamma, study.profile_points, study.profile_context,
                                       study.profile_repeats, seed=seed)
    return curves, [R for R in study.concurrencies if R not in fits]


def parameter_count(shapes: Mapping[str, Sequence[int]]) -> int:
    """Total numel of a name -> shape table."""
    return int(sum(np.prod(s, dtype=np.int64) for s in shapes.values()))


def memory_table(target_config: Any, drafter_folders: Mapping[str, str | Path], dtype: torch.dtype,
                 tokens: int) -> pd.DataFrame:
    """GiB of each part of a chapter-07 run, computed from the configs, not measured (chapter 07):
    the target's weights and the drafters' own weights (parameters counted on the `meta` device;
    the embedding and LM-head copies a released drafter file holds are not loaded), and the KV cache
    of one request of `tokens` tokens (prompt plus generation)."""
    dtype_bytes = torch.finfo(dtype).bits // 8
    with torch.device("meta"):
        target = Qwen3ForCausalLM(target_config)
    rows = [{"part": "target weights", "parameters (B)": sum(p.numel() for p in target.parameters()) / 1e9}]
    for kind, folder in drafter_folders.items():
        drafter = checkpoints.build_from_config(folder, target, dtype=dtype)
        shapes = checkpoints.released_shapes(drafter)
        own = {k: v for k, v in shapes.items() if k not in checkpoints.SHARED_KEYS}
        rows.append({"part": f"{kind} drafter, own weights", "parameters (B)": parameter_count(own) / 1e9})
    frame = pd.DataFrame(rows)
    frame["GiB"] = frame["parameters (B)"] * 1e9 * dtype_bytes / 2**30
    kv = kv_bytes_per_token(target_config, dtype_bytes)
    frame.loc[len(frame)] = {"part": f"KV cache, one request of {tokens} tokens",
                             "parameters (B)": np.nan, "GiB": kv * tokens / 2**30}
    return frame


def memory_display(frame: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`memory_table` as the page prints it (chapter 07): numbers rounded to `digits`, and "n/a"
    where a part has no parameters (the KV cache), never NaN."""
    shown = frame.set_index("part")
    return pd.DataFrame({name: [("n/a" if not np.isfinite(v) else round(float(v), digits)) for v in column]
                         for name, column in shown.items()}, index=shown.index)


# ========================================================================== wall clock


def hf_generate(target: PreTrainedModel, max_new_tokens: int, temperature: float, eos: int | Sequence[int] | None,
                pad: int | None) -> benchmark.Decoder:
    """transformers' own `generate` (plain sampling at `temperature`: `benchmark.generation_config`),
    the target-only baseline (chapter 07)."""
    config = benchmark.generation_config(max_new_tokens, temperature, eos, pad)

    def decode(ids: torch.Tensor) -> torch.Tensor:
        out = target.generate(ids[None], attention_mask=torch.ones_like(ids)[None], generation_config=config)
        return out[0, ids.shape[0]:]

    return decode


def wall_clock(world: World, prompts: Sequence[str], study: GpuStudy, seed: int = 0) -> pd.DataFrame:
    """Tokens/s of target-only decoding (transformers `generate` and our loop) against our engine
    with each drafter, on the same prompts in the same run (chapter 07); median of repeats."""
    generator = device_generator(seed, world.device)
    eos, pad = world.eos_token_ids or None, world.tokenizer.pad_token_id
    decoders = {"target only: transformers generate": hf_generate(world.target, study.race_new_tokens,
                                                                   study.temperature, eos, pad),
                "target only: our loop": benchmark.target_only(world.target, study.race_new_tokens, study.temperature,
                                                               eos, generator)}
    for kind, drafter in world.drafters.items():
        decoders[f"speculative: {kind}"] = benchmark.ours(world.target, drafter, study.race_new_tokens, study.gamma,
                                                          study.temperature, eos, generator)
    ids = [encode_prompt(world.tokenizer, p).to(world.device) for p in prompts]
    speeds = benchmark.race(decoders, ids, study.race_repeats)
    frame = pd.DataFrame({name: {"tokens/s": s["tokens_per_s"], "tokens": s["tokens"]} for name, s in speeds.items()}).T
    frame["speed-up over generate"] = frame["tokens/s"] / frame.loc["target only: transformers generate", "tokens/s"]
    return frame


# ========================================================================== environment and results


def environment(world: World, study: GpuStudy, seed: int, counts: Mapping[str, int],
                prompt_source: str = "fixture") -> dict[str, Any]:
    """Where and how the run was measured: GPU, versions, dtype, mode, prompt source, sources,
    prompt counts, generation length, end ids, seed."""
    env = {"mode": world.mode, "device": str(world.device), "gpu": gpu_name(world.device),
           "dtype": str(world.dtype).replace("torch.", ""), "torch": torch.__version__,
           "transformers": transformers.__version__, "cuda": torch.version.cuda, "seed": seed,
           "prompt_source": prompt_source, "comparable_to_paper": comparable_to_paper(world.mode, prompt_source),
           "protocol": run_protocol(world.mode, prompt_source, counts, study.new_tokens, study.temperature,
                                    study.gamma) or "none",
           "prompt_counts": dict(counts), "gamma": study.gamma, "temperature": study.temperature,
           "new_tokens": study.new_tokens, "paper_new_tokens": PAPER_NEW_TOKENS, "eos_token_ids": world.eos_token_ids,
           "sources": dict(world.sources),
           "measured_where": ("GPU" if world.device.type == "cuda" else "CPU") + {
               "real": "", "random-weights": " (random weights: acceptance numbers meaningless)",
               "smoke": " (tiny random models: every number meaningless)"}[world.mode]}
    if world.device.type == "cuda":
        props = torch.cuda.get_device_properties(world.device)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["gpu_count"] = torch.cuda.device_count()
        env["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(world.device)))
    return env


def results_file(mode: str, device: torch.device, prompt_source: str = "deepspec", subset: bool = False) -> Path:
    """data/results/qwen3_4b_<gpu>.json for a real GPU run of DeepSpec's full protocol, with a
    suffix otherwise: ..._subset.json (real weights on DeepSpec's prompts at smaller sizes),
    ..._fixture.json (real weights on the fixture prompts: never Table 1), ..._random_weights.json;
    $DSPARK_RESULTS/qwen3_4b_<mode>.json on a CPU (a CPU run never writes into data/results)."""
    if device.type == "cuda" and mode in ("real", "random-weights"):
        suffix = ("_random_weights" if mode == "random-weights" else "_fixture" if prompt_source == "fixture"
                  else "_subset" if subset else "")
        return committed_results_dir() / f"qwen3_4b_{slug(gpu_name(device))}{suffix}.json"
    return results_dir() / f"qwen3_4b_{mode.replace('-', '_')}.json"


def result_path(world: World, prompt_source: str = "deepspec", subset: bool = False) -> Path:
    """`results_file` of a loaded world (chapter 07)."""
    return results_file(world.mode, world.device, prompt_source, subset)


def describe_path(path: str | Path) -> str:
    """A path as a page or a log may print it (chapter 07): under $DSPARK_RESULTS as
    "$DSPARK_RESULTS/<name>", inside the repository relative to it, in the Hugging Face cache as
    "the hub cache (<repo folder>)", in a temporary folder as "a temporary folder (<name>)", under
    the home folder as "~/...". Never the build machine's temporary or cache paths."""
    path = Path(path).expanduser().absolute()

    def under(root: str | Path | None) -> Path | None:
        if not root:
            return None
        root = Path(root).expanduser().absolute()
        try:
            return path.relative_to(root)
        except ValueError:
            try:
                return path.resolve().relative_to(root.resolve())
            except (ValueError, OSError):
                return None

    if (inside := under(os.environ.get("DSPARK_RESULTS"))) is not None:
        return f"$DSPARK_RESULTS/{inside.as_posix()}".rstrip("/.")
    if (inside := under(REPO)) is not None:
        return inside.as_posix() or "."
    from huggingface_hub import constants

    if (inside := under(constants.HF_HUB_CACHE)) is not None:
        return f"the hub cache ({inside.parts[0] if inside.parts else 'its root'})"
    if under(tempfile.gettempdir()) is not None or under("/tmp") is not None:
        return f"a temporary folder ({path.name})"
    if (inside := under(Path.home())) is not None:
        return f"~/{inside.as_posix()}"
    return str(path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return None if not np.isfinite(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def save_results(world: World, payload: Mapping[str, Any], profile: str, path: Path | None = None,
                 prompt_source: str = "deepspec") -> Path:
    """Write the run's payload with its provenance and environment (chapter 07) to `path` (default:
    `result_path`, a subset run's name when the payload says "subset"); returns the path."""
    path = path or result_path(world, prompt_source, "subset" in payload)
    return write_result(path, _jsonable(dict(payload)), profile, str(world.device))


# ========================================================================== the setup, checked before any weight is read

DTYPES: dict[str, torch.dtype | None] = {"auto": None, "bfloat16": torch.bfloat16, "float32": torch.float32}
REFUSED_DTYPES = ("float16", "fp16", "half")
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")  # owner/name
PROMPT_TOKENS_ESTIMATE = 1024  # a long benchmark prompt (LiveCodeBench's reach about a thousand tokens)
MEMORY_SLACK_GIB = 1.0  # activations, the verify step's logits, the allocator's slack
# Where each setting comes from: (the notebook's parameter, the command line's flag).
SETTINGS: dict[str, tuple[str, str]] = {
    "mode": ("MODE", "--mode"),
    "device": ("DEVICE", "--device"),
    "prompts": ("EVAL_FOLDER, DOWNLOAD_PROMPTS or ALLOW_FIXTURE", "--eval-folder, --download-prompts or --allow-fixture"),
    "eval_folder": ("EVAL_FOLDER", "--eval-folder"),
    "out": ("OUT", "--out"),
    "target": ("TARGET", "--target"),
    "drafter": ('DRAFTERS["{kind}"]', "--{kind}"),
    "drafters": ("DRAFTERS", "one of the drafter flags"),
    "dtype": ("DTYPE", "--dtype"),
    "count": ("PROMPTS_PER_BENCHMARK", "--prompts"),
    "new_tokens": ("NEW_TOKENS", "--new-tokens"),
}


class SetupError(ValueError):
    """A chapter-07 setting that cannot work, found before any weight is read (chapter 07); the
    message says what is wrong and which parameter to set (the notebook's and the command line's)."""


def _refuse(setting: str, problem: str, kind: str = "") -> SetupError:
    name, flag = (text.format(kind=kind) for text in SETTINGS[setting])
    return SetupError(f"{problem}. Set {name} (command line: {flag})")


@dataclass(frozen=True)
class Setup:
    """Chapter 07's settings once `check_setup` accepted them: the mode, device and dtype, the
    study with its prompt count and generation length, the prompts per benchmark and their source,
    where the results go, the model sources, the protocol the run will be filed under ("table1",
    "subset" or None: `run_protocol`), the memory estimate and notes for the reader."""

    mode: str
    device: torch.device
    dtype: torch.dtype
    study: GpuStudy
    counts: Mapping[str, int]
    prompt_source: str
    eval_folder: Path | None
    out: Path | None
    results_folder: Path
    target: str
    drafters: Mapping[str, str]
    protocol: str | None
    need_gib: float | None = None
    free_gib: float | None = None
    notes: tuple[str, ...] = ()

    def load_prompts(self) -> tuple[dict[str, list[str]], str]:
        """The prompts from the checked source (`load_prompts`) and its name."""
        return load_prompts(dict(self.counts), self.eval_folder, self.prompt_source == "hub",
                            self.prompt_source == "fixture")

    def describe(self) -> list[str]:
        """The setup in a few printable lines, without machine paths."""
        filed = {"table1": "Table 1 (DeepSpec's full protocol)", "subset": "a subset of Table 1's protocol",
                 None: "not comparable with the paper"}[self.protocol]
        sizes = sorted(set(self.counts.values()))
        lines = [f"mode {self.mode}, {str(self.dtype).replace('torch.', '')}, prompts from {self.prompt_source} "
                 f"({'-'.join(map(str, sizes[::max(1, len(sizes) - 1)]))} a benchmark), {self.study.new_tokens} new "
                 f"tokens a prompt: filed as {filed}",
                 f"results go to {describe_path(self.out) if self.out else describe_path(self.results_folder)}"]
        if self.need_gib is not None:
            lines.append(f"GPU memory: about {self.need_gib:.1f} GiB needed, {self.free_gib:.1f} GiB free")
        return lines + list(self.notes)


def _count(value: Any, study: GpuStudy) -> int | None:
    if value == "profile":
        return study.prompts_per_benchmark
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _refuse("count", f"prompts per benchmark must be a whole number >= 1, None for DeepSpec's counts or "
                               f"'profile', got {value!r}")
    return int(value)


def _new_tokens(value: Any, study: GpuStudy) -> int:
    if value == "profile":
        return study.new_tokens
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise _refuse("new_tokens", f"new tokens per prompt must be a whole number >= 1 (DeepSpec: {PAPER_NEW_TOKENS}) "
                                    f"or 'profile', got {value!r}")
    return int(value)


def _check_prompt_source(mode: str, eval_folder: Any, download: bool, allow_fixture: bool) -> tuple[str, Path | None]:
    if eval_folder is not None:
        given = Path(eval_folder).expanduser()
        if not given.is_dir():
            raise _refuse("eval_folder", f"the evaluation folder {describe_path(given)} does not exist; expected a clone "
                                         "of deepseek-ai/DeepSpec or its eval_datasets/")
        folder = evalsets.eval_folder(given)
        missing = [n for n in evalsets.TABLE1_ORDER if not (folder / f"{n}.jsonl").is_file()]
        if missing:
            raise _refuse("eval_folder", f"the evaluation folder {describe_path(folder)} lacks {len(missing)} of the nine "
                                         f"benchmark files ({', '.join(f'{n}.jsonl' for n in missing)}); expected a clone "
                                         "of deepseek-ai/DeepSpec, whose eval_datasets/ holds them")
        return "deepspec", folder
    if download:
        if checkpoints.hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
            raise _refuse("eval_folder", "downloading the prompts was asked for, but the hub is offline (HF_HUB_OFFLINE "
                                         "or HF_DATASETS_OFFLINE): nothing can be downloaded; pass a clone of "
                                         "deepseek-ai/DeepSpec instead")
        import importlib.util

        if importlib.util.find_spec("datasets") is None:
            raise _refuse("eval_folder", "downloading the prompts needs the `datasets` package (pip install datasets), "
                                         "which is not installed; or pass a clone of deepseek-ai/DeepSpec")
        return "hub", None
    if allow_fixture or mode != "real":
        return "fixture", None
    raise _refuse("prompts", "no evaluation prompts: Table 1 needs DeepSpec's evaluation files (a clone of "
                             "deepseek-ai/DeepSpec) or the hub to rebuild them; the book's fixture prompts are not the "
                             "benchmarks, and a run on them is saved as a fixture run, never compared with the paper")


def _check_dtype(value: Any, device: torch.device, mode: str) -> tuple[torch.dtype, tuple[str, ...]]:
    name = str(value).replace("torch.", "").lower()
    if name in REFUSED_DTYPES:
        raise _refuse("dtype", f"dtype {name} is refused: DeepSpec evaluates in bf16 only, and Qwen3's activations "
                               "overflow fp16 (inf, then NaN logits). Use 'bfloat16' (emulated and slow below compute "
                               "capability 8.0) or 'float32' (twice the memory: it may not fit), or 'auto'")
    if name not in DTYPES:
        raise _refuse("dtype", f"unknown dtype {value!r}; expected one of {', '.join(DTYPES)}")
    chosen = DTYPES[name] or (torch.float32 if mode == "smoke" else pick_dtype(device))
    notes: list[str] = []
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        where = f"compute capability {capability[0]}.{capability[1]}"
        if capability < (8, 0) and chosen == torch.bfloat16:
            notes.append(f"bfloat16 on {where}: emulated (no bf16 tensor cores), so every step is several times "
                         "slower than on an Ampere or newer GPU; DeepSpec's dtype, half of float32's memory")
        elif capability < (8, 0) and chosen == torch.float32:
            notes.append(f"float32 on {where} (no fast bf16 there): twice bf16's memory and not DeepSpec's dtype "
                         "(bf16), so tau may differ slightly from the paper's")
    return chosen, tuple(notes)


def _check_model(setting: str, source: str, kind: str = "") -> Path | None:
    """A model source that will load: a folder with config.json and safetensors weights (and, for the
    target, a tokenizer), or a hub id that, offline, is in the local hub cache (nothing downloads).
    Returns the local folder when there is one (None: online hub id, fetched when loaded)."""
    path = Path(source).expanduser()
    if not path.is_dir():
        if not HUB_ID.match(str(source)):
            raise _refuse(setting, f"{source!r} is neither a folder nor a hub id (owner/name)", kind)
        if not checkpoints.hub_offline():
            return None
        try:
            path = checkpoints.resolve_source(str(source), download=False)
        except FileNotFoundError as error:
            raise _refuse(setting, str(error), kind) from None
    wants = ["config.json"] + (["tokenizer_config.json"] if setting == "target" else [])
    missing = [name for name in wants if not (path / name).is_file()]
    if not any(path.glob("*.safetensors")):
        missing.append("*.safetensors weights")
    if missing:
        raise _refuse(setting, f"{describe_path(path)} ({source}) lacks {', '.join(missing)}; expected a model folder "
                               "as `hf download` writes it", kind)
    return path


def _check_out(path: Path) -> Path:
    if path.is_dir():
        raise _refuse("out", f"the results file {describe_path(path)} is a folder; expected a file name ending in .json")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise _refuse("out", f"cannot write the results file into {describe_path(folder)} "
                             f"({error.strerror or type(error).__name__})") from None
    return folder


def _memory_folders(mode: str, target: str, drafters: Mapping[str, str], local: Mapping[str, Path | None]
                    ) -> tuple[Path | None, dict[str, Path] | None]:
    """The target config and drafter folders whose config.json size the run (committed copies of the
    released ones for their hub ids); None when one is not at hand without downloading."""
    def committed(kind: str) -> Path:
        return QWEN3_4B / Path(DRAFTER_IDS[kind]).name

    if mode == "random-weights" or str(target) == TARGET_ID:
        config = QWEN3_4B / "config.json"
    else:
        config = local["target"] / "config.json" if local.get("target") is not None else None
    folders: dict[str, Path] = {}
    for kind, source in drafters.items():
        if mode == "random-weights" or source == DRAFTER_IDS.get(kind):
            folders[kind] = committed(kind)
        elif local.get(kind) is not None:
            folders[kind] = local[kind]
        else:
            return config, None
    return config, folders


def _check_memory(mode: str, device: torch.device, dtype: torch.dtype, config_file: Path | None,
                  folders: Mapping[str, Path] | None, study: GpuStudy, profile: bool
                  ) -> tuple[float | None, float | None, tuple[str, ...]]:
    free = free_memory_bytes(device)
    if free is None or mode == "smoke":
        return None, None, ()
    if config_file is None or folders is None:
        return None, free / 2**30, ("GPU memory not checked: a model's config is not at hand before it downloads",)
    config = Qwen3Config(**json.loads(Path(config_file).read_text()))
    tokens = PROMPT_TOKENS_ESTIMATE + study.new_tokens
    table = memory_table(config, folders, dtype, tokens)
    dtype_bytes = torch.finfo(dtype).bits // 8
    weights, kv = float(table["GiB"].iloc[:-1].sum()), float(table["GiB"].iloc[-1])
    fraction = inspect.signature(affordable_concurrencies).parameters["fraction"].default
    smallest = min(study.concurrencies)
    costs_gib = profile_step_bytes(config, smallest, study.gamma, study.profile_context, dtype_bytes) / fraction / 2**30
    need = weights + kv + MEMORY_SLACK_GIB + (costs_gib if profile else 0.0)
    have = free / 2**30
    if need <= have:
        return need, have, ()
    name = str(dtype).replace("torch.", "")
    parts = (f"weights {weights:.1f}, the KV cache of a {tokens}-token request {kv:.2f}"
             + (f", the cost profile at R = {smallest} {costs_gib:.1f}" if profile else "") + f", slack {MEMORY_SLACK_GIB:g}")
    problem = f"the run needs about {need:.1f} GiB of GPU memory in {name} ({parts}), but {have:.1f} GiB are free"
    if dtype == torch.float32 and weights / 2 + kv / 2 + MEMORY_SLACK_GIB <= have:
        raise _refuse("dtype", problem + "; 'bfloat16' halves it (DeepSpec's dtype; emulated and slower below compute "
                                         "capability 8.0)")
    if weights + MEMORY_SLACK_GIB <= have:
        raise _refuse("new_tokens", problem + "; fewer new tokens shrink the KV cache (the command line's --no-profile "
                                              "skips the cost profile)")
    raise _refuse("device", problem + "; the weights alone do not fit: use a GPU with more free memory")


def check_setup(mode: str = "auto", device: torch.device | str = "cpu", profile: str = "full", *,
                study: GpuStudy | None = None, target: str | Path = TARGET_ID,
                drafters: Mapping[str, str | Path] | None = None, eval_folder: str | Path | None = None,
                download_prompts: bool = False, allow_fixture: bool = False,
                prompts_per_benchmark: int | str | None = "profile", new_tokens: int | str = "profile",
                dtype: str | torch.dtype = "auto", out: str | Path | None = None, profile_costs: bool = True) -> Setup:
    """Every input of a chapter-07 run, checked before any weight is read (the notebook's first cell
    after its parameters and `python -m dspark_lite.harness.gpu` both call it): the mode against the
    device; the prompt source (an evaluation folder holding the nine files, a download the hub can
    serve, or the fixture knowingly); the results folder is writable; the target and drafter sources
    (local folders with config.json and weights; hub ids, offline, in the local hub cache); the dtype
    (fp16 refused); GPU memory for the chosen sizes against the free memory. SetupError names the
    parameter to set. `study` defaults to the profile's on a GPU and the smoke one on a CPU; its
    prompt count and generation length are replaced by `prompts_per_benchmark` ("profile", None for
    DeepSpec's counts, or a count) and `new_tokens` ("profile" or a count) (chapter 07)."""
    device = torch.device(device)
    try:
        mode = resolve_mode(mode, device)
    except ValueError as error:
        raise _refuse("mode", str(error)) from None
    if study is None:
        study = get_profile(profile).gpu if device.type == "cuda" else get_profile("smoke").gpu
    count = _count(prompts_per_benchmark, study)
    study = dataclasses.replace(study, prompts_per_benchmark=count, new_tokens=_new_tokens(new_tokens, study))
    counts = dict(evalsets.DEEPSPEC_COUNTS) if count is None else dict.fromkeys(evalsets.TABLE1_ORDER, count)
    source, folder = _check_prompt_source(mode, eval_folder, download_prompts, allow_fixture)
    chosen, notes = _check_dtype(dtype, device, mode)
    drafters = {str(k): str(v) for k, v in dict(DRAFTER_IDS if drafters is None else drafters).items()}
    unknown = sorted(set(drafters) - set(DRAFTER_IDS))
    if unknown or not drafters:
        raise _refuse("drafters", f"drafter kinds {unknown or 'none'}; expected some of {', '.join(DRAFTER_IDS)}")
    local: dict[str, Path | None] = {}
    if mode == "real":
        local["target"] = _check_model("target", str(target))
        for kind, src in drafters.items():
            local[kind] = _check_model("drafter", src, kind)
    protocol = run_protocol(mode, source, counts, study.new_tokens, study.temperature, study.gamma)
    out_path = Path(out).expanduser() if out is not None else None
    results_folder = _check_out(out_path or results_file(mode, device, source, protocol == "subset"))
    config_file, folders = _memory_folders(mode, str(target), drafters, local)
    need, free, more = _check_memory(mode, device, chosen, config_file, folders, study, profile_costs)
    return Setup(mode, device, chosen, study, counts, source, folder, out_path, results_folder, str(target), drafters,
                 protocol, need, free, notes + more)


# ========================================================================== several GPUs: shards and parts


def shard(items: Sequence[Any], rank: int, world_size: int) -> list[Any]:
    """Every world_size-th item from `rank` (DeepSpec's split of prompts over GPUs), for torchrun /
    accelerate launches: each process measures its shard, the records are pooled afterwards."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size = {world_size}), got {rank}")
    return list(items)[rank::world_size]


def measure_part(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int, rank: int = 0,
                 world_size: int = 1) -> dict[str, Any]:
    """This rank's share of Table 1 (chapter 07): prompts rank, rank + W, ... of every benchmark,
    each seeded with seed + its index in the benchmark (so the pooled rounds do not depend on W),
    as a JSON-able part: per drafter and benchmark the record of rounds (`Rounds.to_json`),
    tokens and phase seconds."""
    part: dict[str, Any] = {"rank": rank, "world_size": world_size, "runs": {}}
    clock = run_clock(world, prompts, study, rank, world_size, echo=(lambda text: print(f"[rank {rank}] {text}",
                                                                                          flush=True)))
    for kind in world.drafters:
        part["runs"][kind] = {}
        for name, texts in prompts.items():
            indices = shard(range(len(texts)), rank, world_size)
            run = run_benchmark(world, kind, [texts[i] for i in indices], study, seed, f"{kind}: {name}", indices,
                                len(texts), clock)
            part["runs"][kind][name] = {"rounds": run.acceptance.record.to_json(), "tokens": run.acceptance.tokens,
                                        "seconds": run.seconds, "timed_rounds": run.rounds_timed}
    return part


def merge_parts(parts: Sequence[Mapping[str, Any]], gamma: int) -> dict[str, dict[str, BenchmarkRun]]:
    """Pool the parts of all ranks into {drafter: {benchmark: BenchmarkRun}} (chapter 07): rounds
    concatenated in rank order, tokens and seconds summed. Raises when a rank is missing or twice."""
    ranks = sorted(int(p["rank"]) for p in parts)
    sizes = {int(p["world_size"]) for p in parts}
    if len(sizes) != 1 or ranks != list(range(sizes.pop())):
        raise ValueError(f"parts of ranks {ranks} with world sizes {sorted({int(p['world_size']) for p in parts})}; "
                         "expected exactly one part per rank 0..W-1 of one launch")
    merged: dict[str, dict[str, BenchmarkRun]] = {}
    for part in sorted(parts, key=lambda p: int(p["rank"])):
        for kind, by_bench in part["runs"].items():
            for name, run in by_bench.items():
                slot = merged.setdefault(kind, {}).setdefault(name, {"rounds": [], "tokens": 0, "timed_rounds": 0,
                                                                     "seconds": dict.fromkeys(PHASES, 0.0)})
                rounds = Rounds.from_json(run["rounds"])
                slot["rounds"].append(rounds)
                slot["tokens"] += int(run["tokens"])
                slot["timed_rounds"] += int(run.get("timed_rounds", len(rounds)))  # older parts: every prompt timed
                for phase in PHASES:
                    slot["seconds"][phase] += float(run["seconds"][phase])
    return {kind: {name: BenchmarkRun(summarize(f"{kind}: {name}", Rounds.concat(s["rounds"]), gamma, s["tokens"],
                                                keep_record=True),
                                      s["seconds"], s["timed_rounds"]) for name, s in by_bench.items()}
            for kind, by_bench in merged.items()}


# ========================================================================== the whole measurement


def analyze(world: World, runs: Mapping[str, Mapping[str, BenchmarkRun]], study: GpuStudy, seed: int,
            prompt_source: str, prompts: Mapping[str, Sequence[str]], race: bool = True,
            profile: bool = True) -> dict[str, Any]:
    """Everything chapter 07 reports after Table 1's generations, as the results payload: tau per
    benchmark, under "table1" only for a run of DeepSpec's full protocol (`run_protocol`), under
    "subset" (with the run's sizes and how it differs from the protocol) for real weights on
    DeepSpec's prompts at other sizes, else under "tau_not_table1"; the paper's Table 1 beside the
    first two; Figure 2's curves, the threshold sweep and STS, engine overheads per round, the
    wall-clock race, SPS(B) and the simulator, peak memory (chapter 07)."""
    counts = {n: len(p) for n, p in prompts.items()}
    protocol = run_protocol(world.mode, prompt_source, counts, study.new_tokens, study.temperature, study.gamma)
    tau = {kind: {name: run.acceptance.tau for name, run in by_bench.items()} for kind, by_bench in runs.items()}
    by_domain = {kind: domain_acceptance(by_bench, study.gamma) for kind, by_bench in runs.items()}
    payload: dict[str, Any] = {"environment": environment(world, study, seed, counts, prompt_source)}
    if protocol == "subset":
        payload["subset"] = {"tau": tau, "prompts_per_benchmark": counts, "new_tokens": study.new_tokens,
                             "temperature": study.temperature, "gamma": study.gamma, "prompt_source": prompt_source,
                             "differs_from_protocol": protocol_differences(world.mode, prompt_source, counts,
                                                                           study.new_tokens, study.temperature,
                                                                           study.gamma)}
    else:
        payload["table1" if protocol == "table1" else "tau_not_table1"] = tau
    payload.update({
        "conditional_acceptance": {kind: {d: a.conditional for d, a in dom.items()} for kind, dom in by_domain.items()},
        "prefix_survival": {kind: {d: a.prefix_survival for d, a in dom.items()} for kind, dom in by_domain.items()},
        "engine_overheads": engine_overheads(runs).to_dict("index"),
    })
    if protocol is not None:
        payload["paper_table1"] = {k: PAPER_TABLE1[k] for k in runs if k in PAPER_TABLE1}
    if {"dflash", "dspark"} <= set(tau):
        gain = 100 * (np.mean(list(tau["dspark"].values())) / np.mean(list(tau["dflash"].values())) - 1)
        payload[{"table1": "macro_gain_over_dflash_pct", "subset": "macro_gain_subset_pct"}.get(
            protocol, "macro_gain_not_table1_pct")] = gain
    cal = None
    if "dspark" in runs:
        cal = calibrate(block_records(runs["dspark"], study.gamma), study, seed)
        payload.update({"threshold_acceptance_rate": {d: s["acceptance_rate"].to_dict() for d, s in cal.sweep.items()},
                        "ece_raw": cal.ece["raw"], "ece_sts": cal.ece["STS"],
                        "sts_temperatures": list(cal.sts.temperatures_)})
    if race:
        race_prompts = [p for name in prompts for p in prompts[name][:1]][: max(1, study.race_prompts)]
        payload["wall_clock_tokens_per_s"] = wall_clock(world, race_prompts, study, seed)["tokens/s"].to_dict()
    if profile:
        curves, skipped = profile_costs(world, study, seed)
        payload["step_curves"] = {str(R): c.to_dict() for R, c in curves.items()}
        payload["step_curves_skipped_for_memory"] = skipped
        if cal is not None:
            dense = {R: c.dense() for R, c in curves.items()}
            aggregate, _ = serving.replayed_sweep(cal.test_records, ["dspark", "fixed", "mtp1", "threshold"], dense,
                                                  sorted(curves), max(1, study.sim_steps // study.sim_replays),
                                                  study.sim_replays, seed=seed)
            payload["simulator_throughput"] = aggregate[["scheduler", "R", "throughput", "per_user", "budget"]].to_dict("records")
            payload["sla_gain_over_mtp1"] = serving.sla_gain(aggregate, "mtp1").to_dict("records")
    payload["peak_memory_gib"] = peak_memory_gib(world.device)
    return payload


# ========================================================================== the full-size dry run on a CPU


def full_size_dry_run(workdir: str | Path, new_tokens: int = 24, dtype: torch.dtype = torch.bfloat16,
                      seed: int = 0, kinds: Sequence[str] = ("dspark", "eagle3")) -> dict[str, Any]:
    """Chapter 07's path at the real Qwen3-4B shapes on a CPU, in `dtype` (chapter 07): a random
    Qwen3-4B-shaped target (vocabulary 151,936, 36 layers) and random drafters of the released
    shapes (`kinds`: the 1.39B DSpark drafter, mask id 151,669, and the one-layer Eagle3 chain; both
    fuse target layers 1, 9, 17, 25, 33), each written in its released layout and read back by
    `checkpoints.load_released`, one prompt through the engine per drafter for a few rounds, and the
    results writer. Returns seconds, peak resident memory (GiB, this process) and what ran. Slow
    (minutes)."""
    import resource

    start, workdir = time.perf_counter(), Path(workdir)
    study = dataclasses.replace(get_profile("smoke").gpu, new_tokens=new_tokens, prompts_per_benchmark=1)
    device = torch.device("cpu")
    target = random_target(QWEN3_4B / "config.json", device, dtype, seed)
    folders = {kind: QWEN3_4B / Path(DRAFTER_IDS[kind]).name for kind in kinds}
    for kind, folder in folders.items():
        checkpoints.save_any_released(random_drafter(folder, target, seed + 1), workdir / folder.name, target.config, dtype)
    built = time.perf_counter() - start
    drafters = {kind: checkpoints.load_released(workdir / folder.name, target) for kind, folder in folders.items()}
    world = World("random-weights", device, dtype, target, tiny_tokenizer(study.tiny_vocab), drafters,
                  {"target": "random weights, data/qwen3_4b/config.json",
                   **{kind: f"released layout, {folder.name}" for kind, folder in folders.items()}})
    prompts = {"gsm8k": evalsets.load_benchmark("gsm8k", count=1)}
    runs = merge_parts([measure_part(world, prompts, study, seed)], study.gamma)
    payload = analyze(world, runs, study, seed, "fixture", prompts, race=False, profile=False)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux: KiB
    payload["dry_run"] = {"seconds": time.perf_counter() - start, "seconds_building": built, "peak_rss_gib": rss}
    path = save_results(world, payload, "full-size-dry-run", workdir / "qwen3_4b_full_size_dry_run.json", "fixture")
    per_kind = {kind: {"rounds": runs[kind]["gsm8k"].acceptance.rounds, "tokens": runs[kind]["gsm8k"].acceptance.tokens,
                       "tau": runs[kind]["gsm8k"].acceptance.tau,
                       "drafter_parameters_b": sum(p.numel() for p in drafters[kind].parameters()) / 1e9,
                       "target_layer_ids": list(drafters[kind].target_layer_ids),
                       "drafter_class": type(drafters[kind]).__name__} for kind in kinds}
    dspark = drafters.get("dspark")
    return {"seconds": time.perf_counter() - start, "seconds_building": built, "peak_rss_gib": rss,
            "results_file": str(path), "kinds": per_kind, "vocab_size": target.config.vocab_size,
            "target_layers": target.config.num_hidden_layers, "dtype": str(dtype).replace("torch.", ""),
            "mask_token_id": None if dspark is None else dspark.mask_token_id,
            "rope_dtype": {kind: str(d.rotary_emb.inv_freq.dtype).replace("torch.", "") for kind, d in drafters.items()}}


# ========================================================================== the headless entry point

PAPER_NEW_TOKENS = 2048  # DeepSpec's eval.py --max-new-tokens
# Per mode: prompts per benchmark (None: DeepSpec's counts), tokens per prompt, and the race's size.
# Random weights measure costs, not acceptance: two prompts a benchmark and a short race keep a
# run within a few minutes on one GPU.
HEADLESS_DEFAULTS: dict[str, dict[str, Any]] = {
    "random-weights": dict(prompts=2, new_tokens=256, race_prompts=2, race_repeats=2),
    "real": dict(prompts=None, new_tokens=PAPER_NEW_TOKENS),
    "smoke": dict(prompts=1, new_tokens=40),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of `python -m dspark_lite.harness.gpu` (chapter 07)."""
    parser = argparse.ArgumentParser(
        prog="python -m dspark_lite.harness.gpu",
        description="Chapter 07's measurement without Jupyter: Table 1's tau, Figure 2's acceptance, the confidence "
                    "head's threshold sweep and STS, engine overheads, the wall-clock race, the GPU cost table SPS(B) "
                    "and the serving simulator, written as one JSON results file. Under torchrun each rank measures "
                    "its shard of the prompts and rank 0 merges the parts.",
        epilog="examples:\n  python -m dspark_lite.harness.gpu --mode random-weights --out data/results/h100_rw.json\n"
               "  torchrun --nproc_per_node 8 -m dspark_lite.harness.gpu --mode real --eval-folder ~/DeepSpec --out run.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, required=True,
                        help="real: Qwen3-4B and the released drafters; random-weights: the same shapes with random "
                             "weights (costs and overheads only); smoke: tiny random models (CPU, tests)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the results file (default: data/results/qwen3_4b_<gpu>[_suffix].json on a GPU, "
                             "$DSPARK_RESULTS on a CPU)")
    parser.add_argument("--profile", default="full", help="the profile whose GpuStudy sizes the run (full or smoke)")
    parser.add_argument("--prompts", type=int, default=-1,
                        help="prompts per benchmark; 0 means DeepSpec's counts (3,030 prompts); default by mode "
                             f"({ {m: d['prompts'] for m, d in HEADLESS_DEFAULTS.items()} })")
    parser.add_argument("--new-tokens", type=int, default=None,
                        help=f"tokens generated per prompt (DeepSpec: {PAPER_NEW_TOKENS}); default by mode "
                             f"({ {m: d['new_tokens'] for m, d in HEADLESS_DEFAULTS.items()} })")
    parser.add_argument("--eval-folder", type=Path, default=None, help="a clone of deepseek-ai/DeepSpec (or its eval_datasets/)")
    parser.add_argument("--download-prompts", action="store_true", help="rebuild the prompts from the hub through `datasets`")
    parser.add_argument("--allow-fixture", action="store_true",
                        help="run on the book's fixture prompts (never Table 1; the results file says fixture)")
    parser.add_argument("--target", default=TARGET_ID, help="hub id or folder of Qwen3-4B")
    for kind, hub_id in DRAFTER_IDS.items():
        parser.add_argument(f"--{kind}", default=hub_id, help=f"hub id or folder of the {kind} drafter")
    parser.add_argument("--dtype", default="auto",
                        help="auto (bfloat16 from compute capability 8.0, float32 below), bfloat16 or float32; "
                             "float16 is refused (Qwen3 overflows it; DeepSpec evaluates in bf16)")
    parser.add_argument("--device", default="auto", help="auto (cuda:LOCAL_RANK when there is a GPU), cpu, cuda:N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-race", action="store_true", help="skip the wall-clock race")
    parser.add_argument("--no-profile", action="store_true", help="skip the SPS(B) cost table and the simulator")
    parser.add_argument("--parts", type=Path, default=None,
                        help="folder for the ranks' parts under torchrun (default: beside --out)")
    return parser.parse_args(argv)


def _launch() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) otherwise."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def _barrier(world_size: int, device: torch.device) -> None:
    """Wait for every rank (torch.distributed, initialised on first use) when launched by torchrun."""
    if world_size <= 1:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    dist.barrier(device_ids=[device.index]) if device.type == "cuda" else dist.barrier()


def _finish(world_size: int) -> None:
    """Leave the process group torchrun's ranks joined (nothing without one)."""
    if world_size > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> Path | None:
    """Run chapter 07's measurement headless; returns the results file on rank 0 (chapter 07). Every
    setting is checked (`check_setup`) before anything is downloaded or loaded."""
    args = parse_args(argv)
    rank, world_size, local_rank = _launch()
    if args.device == "auto":
        device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    else:
        device = torch.device(args.device)
    defaults = HEADLESS_DEFAULTS[args.mode]
    count = defaults["prompts"] if args.prompts < 0 else (args.prompts or None)
    study = get_profile(args.profile).gpu if device.type == "cuda" else get_profile("smoke").gpu
    study = dataclasses.replace(study, **{k: v for k, v in defaults.items() if k.startswith("race_")})
    setup = check_setup(args.mode, device, study=study, target=args.target,
                        drafters={kind: getattr(args, kind.replace("-", "_")) for kind in DRAFTER_IDS},
                        eval_folder=args.eval_folder, download_prompts=args.download_prompts,
                        allow_fixture=args.allow_fixture, prompts_per_benchmark=count,
                        new_tokens=args.new_tokens or defaults["new_tokens"], dtype=args.dtype, out=args.out,
                        profile_costs=not args.no_profile)
    mode, study = setup.mode, setup.study
    if rank == 0:
        print("\n".join(setup.describe()), flush=True)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    prompts, source = setup.load_prompts()
    world = load_world(mode, device, study, args.seed, setup.target, setup.drafters, dtype=setup.dtype)
    check_cache(world)
    print(f"[rank {rank}/{world_size}] {world.mode} on {gpu_name(device)} ({world.dtype}); prompts: {source}, "
          f"{sum(len(shard(p, rank, world_size)) for p in prompts.values())} here; {study.new_tokens} new tokens",
          flush=True)
    part = measure_part(world, prompts, study, args.seed, rank, world_size)
    subset = run_protocol(world.mode, source, {n: len(p) for n, p in prompts.items()}, study.new_tokens,
                          study.temperature, study.gamma) == "subset"
    out = args.out or result_path(world, source, subset)
    folder = args.parts or out.parent / f"{out.stem}_parts"
    if world_size > 1:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank{rank}.json").write_text(json.dumps(part))
    _barrier(world_size, device)
    if rank != 0:
        _finish(world_size)
        return None
    parts = [json.loads((folder / f"rank{r}.json").read_text()) for r in range(world_size)] if world_size > 1 else [part]
    runs = merge_parts(parts, study.gamma)
    payload = analyze(world, runs, study, args.seed, source, prompts, race=not args.no_race, profile=not args.no_profile)
    payload["headless"] = {"argv": list(sys.argv[1:] if argv is None else argv), "world_size": world_size,
                           "seconds": time.perf_counter() - start}
    path = save_results(world, payload, args.profile, out, source)
    _finish(world_size)
    print(f"wrote {describe_path(path)} in {time.perf_counter() - start:.0f} s; peak GPU memory "
          f"{payload['peak_memory_gib'] if payload['peak_memory_gib'] is None else round(payload['peak_memory_gib'], 2)} GiB",
          flush=True)
    return path


if __name__ == "__main__":
    try:
        main()
    except SetupError as error:
        sys.exit(f"python -m dspark_lite.harness.gpu: {error}")
