"""Chapter 07's harness: Qwen3-4B and DeepSpec's released drafters through dspark_lite's engine.

Three worlds, one code path (`load_world`):

* "real": `Qwen/Qwen3-4B` through `AutoModelForCausalLM` (bf16 from compute capability 8.0,
  fp16 below, sdpa attention) and the released DFlash and DSpark drafters through
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

`python -m dspark_lite.harness.gpu --help`: the same measurement without Jupyter (torch, transformers,
safetensors, numpy and pandas only), one results file; under `torchrun` every rank measures its
shard of the prompts (`shard`, `measure_part`) and rank 0 merges the parts (`merge_parts`) and runs
the rest (`analyze`). `full_size_dry_run` runs the path at Qwen3-4B's shapes on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
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

from .. import calibration, speculative
from ..drafters import DFlashConfig, DFlashDrafter
from ..dspark import DSparkConfig, DSparkDrafter
from .evaluation import DomainAcceptance, summarize, summarize_rollouts
from .profiles import GpuStudy, get_profile
from .results import REPO, committed_results_dir, results_dir, write_result
from ..runtime import progress, quiet_hub_bars
from ..record import Rounds, sigmoid
from ..speculative import speculative_generate
from ..training import encode_prompt

TARGET_ID = "Qwen/Qwen3-4B"
DRAFTER_IDS: dict[str, str] = {"dflash": "deepseek-ai/dflash_qwen3_4b_block7",
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
}


# ========================================================================== devices, dtypes, modes


def pick_dtype(device: torch.device) -> torch.dtype:
    """bf16 on a GPU of compute capability 8.0 or newer (Ampere: A100, A10, L4, H100, ...), fp16 on
    an older one, float32 on the CPU (chapter 07). Not `torch.cuda.is_bf16_supported()`: it answers
    True on a T4 (sm 7.5), which has no bf16 tensor cores and only emulates bf16, several times slower."""
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16


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


def random_drafter(config_folder: str | Path, target: PreTrainedModel, seed: int = 0) -> DFlashDrafter:
    """A drafter shaped like a released one (its config.json) with random weights (chapter 07)."""
    return checkpoints.build_drafter(checkpoints.read_released_config(config_folder), target, seed).eval()


def tiny_tokenizer(vocab_size: int):
    """A byte-level BPE trained on the fixture prompts, with a chat template (chapter 07's smoke world)."""
    texts = [p for prompts in evalsets.load_benchmarks().values() for p in prompts]
    return toy_tokenizer.train_tokenizer(texts * 4, vocab_size)


def build_smoke_world(folder: str | Path, study: GpuStudy, seed: int = 0) -> dict[str, Path]:
    """Write a tiny random Qwen3 target (save_pretrained, with its tokenizer) and tiny random
    DSpark and DFlash drafters in the released layout (save_released) into `folder`; returns
    their folders {"target", "dspark", "dflash"} (chapter 07). The DSpark drafter has the
    Markov head and the confidence head; both drafters use the same backbone shape."""
    folder = Path(folder)
    tok = tiny_tokenizer(study.tiny_vocab)
    config = Qwen3Config(vocab_size=len(tok), hidden_size=study.tiny_hidden, num_hidden_layers=study.tiny_layers,
                         num_attention_heads=study.tiny_heads, num_key_value_heads=max(1, study.tiny_heads // 2),
                         head_dim=study.tiny_hidden // study.tiny_heads, intermediate_size=2 * study.tiny_hidden,
                         max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=tok.eos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    target = Qwen3ForCausalLM(config).eval()
    paths = {"target": folder / "target", "dspark": folder / "dspark_tiny_block7", "dflash": folder / "dflash_tiny_block7"}
    with quiet_hub_bars():
        target.save_pretrained(paths["target"])
    tok.save_pretrained(paths["target"])
    shape = dict(target_layer_ids=tuple(range(study.tiny_layers - 1)), mask_token_id=tok.mask_token_id,
                 block_size=study.gamma, num_layers=study.tiny_draft_layers)
    dspark = DSparkDrafter(target, DSparkConfig(**shape, head_type="markov", markov_rank=study.tiny_markov_rank,
                                                confidence_head=True), seed=seed + 1)
    dflash = DFlashDrafter(target, DFlashConfig(**shape), seed=seed + 1)
    checkpoints.save_released(dspark, paths["dspark"], target.config)
    checkpoints.save_released(dflash, paths["dflash"], target.config)
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
    drafters: dict[str, DFlashDrafter]
    sources: dict[str, str] = field(default_factory=dict)

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
        paths = build_smoke_world(folder, study, seed)
        target, tok = load_target(paths["target"], device, dtype or torch.float32)
        drafters = {kind: checkpoints.load_released(paths[kind], target) for kind in ("dflash", "dspark")}
        sources = {k: f"tiny random, {v}" for k, v in paths.items()}
    else:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return World(mode, device, next(target.parameters()).dtype, target, tok, drafters, sources)


def _tokenizer_or_tiny(source: str | Path, study: GpuStudy):
    """Qwen3's tokenizer when it is at hand (local folder, hub cache, or online), else the tiny
    BPE: random weights make every prompt equally meaningless."""
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError):
        return tiny_tokenizer(study.tiny_vocab)


def check_cache(world: World) -> float:
    """The engine's KV-cache self-check (`speculative.check_kv_cache`) on a short chat prompt:
    every GPU run starts with it, so a transformers whose cache keyword or crop semantics the
    engine does not handle stops the run with an error naming the version, instead of measuring
    a wrong tau (chapter 07). Returns the largest total variation between cached and uncached
    next-token distributions."""
    ids = encode_prompt(world.tokenizer, "Say hello in five words.").to(world.device)
    return speculative.check_kv_cache(world.target, ids)


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


PHASES = ("prefill", "draft", "verify", "overhead")


@dataclass
class BenchmarkRun:
    """One drafter on one benchmark: the acceptance summary (with every round's record) and the
    engine's seconds per phase (prefill, draft, verify, overhead)."""

    acceptance: DomainAcceptance
    seconds: dict[str, float]


def generate_one(world: World, kind: str, ids: torch.Tensor, study: GpuStudy, seed: int,
                 timed: bool = True) -> speculative.Rollout:
    """One speculative generation of prompt `ids` with drafter `kind`, its sampling seeded with
    `seed` (DeepSpec seeds each prompt with seed + its index, so a sharded run draws what a
    single run draws), stopping on any end id; phase seconds when `timed` (chapter 07)."""
    generator = torch.Generator(device=world.device).manual_seed(seed)
    return speculative_generate(world.target, world.drafters[kind], ids, study.new_tokens, study.gamma,
                                study.temperature, generator, world.eos_token_ids or None, timed=timed)


def run_benchmark(world: World, kind: str, prompts: Sequence[str], study: GpuStudy, seed: int = 0,
                  desc: str = "", indices: Sequence[int] | None = None) -> BenchmarkRun:
    """Speculative generation of every prompt with drafter `kind` at gamma and temperature of
    `study`, prompt i seeded with seed + indices[i] (default: its position); the rounds are kept
    for calibration and the simulator (chapter 07)."""
    indices = list(range(len(prompts))) if indices is None else list(indices)
    if len(indices) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(indices)} indices; expected one index per prompt")
    rollouts = [generate_one(world, kind, encode_prompt(world.tokenizer, prompt).to(world.device), study, seed + index)
                for index, prompt in progress(list(zip(indices, prompts)), desc=desc or kind, leave=False)]
    seconds = {phase: sum(float(getattr(out, f"{phase}_seconds") or 0.0) for out in rollouts) for phase in PHASES}
    return BenchmarkRun(summarize_rollouts(desc or kind, rollouts, study.gamma, keep_record=True), seconds)


def run_table1(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int = 0
               ) -> dict[str, dict[str, BenchmarkRun]]:
    """{drafter kind: {benchmark: BenchmarkRun}} for every drafter of the world (chapter 07)."""
    return {kind: {name: run_benchmark(world, kind, p, study, seed, f"{kind}: {name}") for name, p in prompts.items()}
            for kind in world.drafters}


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
    crops, bookkeeping), and each phase's share (prefill included) of the engine's time, from
    runs measured with the phase stopwatch on (chapter 07)."""
    rows = {}
    for kind, by_bench in runs.items():
        seconds = {phase: sum(r.seconds[phase] for r in by_bench.values()) for phase in PHASES}
        rounds = max(1, sum(r.acceptance.rounds for r in by_bench.values()))
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
        drafter = checkpoints.build_drafter(checkpoints.read_released_config(folder), target, dtype=dtype)
        shapes = checkpoints.expected_shapes(drafter)
        own = {k: v for k, v in shapes.items() if k not in checkpoints.SHARED_KEYS}
        rows.append({"part": f"{kind} drafter, own weights (file: {parameter_count(shapes) / 1e9:.2f}B with the copies)",
                     "parameters (B)": parameter_count(own) / 1e9})
    frame = pd.DataFrame(rows)
    frame["GiB"] = frame["parameters (B)"] * 1e9 * dtype_bytes / 2**30
    kv = kv_bytes_per_token(target_config, dtype_bytes)
    frame.loc[len(frame)] = {"part": f"KV cache of one request, {tokens} tokens ({kv / 2**10:.0f} KiB a token)",
                             "parameters (B)": np.nan, "GiB": kv * tokens / 2**30}
    return frame


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
    generator = torch.Generator(device=world.device).manual_seed(seed)
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


def result_path(world: World, prompt_source: str = "deepspec") -> Path:
    """data/results/qwen3_4b_<gpu>.json for a real GPU run on DeepSpec's prompts, with a suffix
    otherwise: ..._fixture.json (real weights on the fixture prompts: never Table 1),
    ..._random_weights.json; $DSPARK_RESULTS/qwen3_4b_<mode>.json on a CPU (a CPU run never writes
    into data/results)."""
    if world.device.type == "cuda" and world.mode in ("real", "random-weights"):
        suffix = "_random_weights" if world.mode == "random-weights" else "_fixture" if prompt_source == "fixture" else ""
        return committed_results_dir() / f"qwen3_4b_{slug(gpu_name(world.device))}{suffix}.json"
    return results_dir() / f"qwen3_4b_{world.mode.replace('-', '_')}.json"


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
    """Write the run's payload with its provenance and environment (chapter 07); returns the path."""
    return write_result(path or result_path(world, prompt_source), _jsonable(dict(payload)), profile, str(world.device))


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
    for kind in world.drafters:
        part["runs"][kind] = {}
        for name, texts in prompts.items():
            indices = shard(range(len(texts)), rank, world_size)
            run = run_benchmark(world, kind, [texts[i] for i in indices], study, seed, f"{kind}: {name}", indices)
            part["runs"][kind][name] = {"rounds": run.acceptance.record.to_json(), "tokens": run.acceptance.tokens,
                                        "seconds": run.seconds}
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
                slot = merged.setdefault(kind, {}).setdefault(name, {"rounds": [], "tokens": 0,
                                                                     "seconds": dict.fromkeys(PHASES, 0.0)})
                slot["rounds"].append(Rounds.from_json(run["rounds"]))
                slot["tokens"] += int(run["tokens"])
                for phase in PHASES:
                    slot["seconds"][phase] += float(run["seconds"][phase])
    return {kind: {name: BenchmarkRun(summarize(f"{kind}: {name}", Rounds.concat(s["rounds"]), gamma, s["tokens"],
                                                keep_record=True),
                                      s["seconds"]) for name, s in by_bench.items()} for kind, by_bench in merged.items()}


# ========================================================================== the whole measurement


def analyze(world: World, runs: Mapping[str, Mapping[str, BenchmarkRun]], study: GpuStudy, seed: int,
            prompt_source: str, prompts: Mapping[str, Sequence[str]], race: bool = True,
            profile: bool = True) -> dict[str, Any]:
    """Everything chapter 07 reports after Table 1's generations, as the results payload: tau per
    benchmark (beside the paper's only when `comparable_to_paper`), Figure 2's curves, the threshold
    sweep and STS, engine overheads per round, the wall-clock race, SPS(B) and the simulator, peak
    memory (chapter 07)."""
    compare = comparable_to_paper(world.mode, prompt_source)
    tau = {kind: {name: run.acceptance.tau for name, run in by_bench.items()} for kind, by_bench in runs.items()}
    by_domain = {kind: domain_acceptance(by_bench, study.gamma) for kind, by_bench in runs.items()}
    payload: dict[str, Any] = {
        "environment": environment(world, study, seed, {n: len(p) for n, p in prompts.items()}, prompt_source),
        ("table1" if compare else "tau_not_table1"): tau,
        "conditional_acceptance": {kind: {d: a.conditional for d, a in dom.items()} for kind, dom in by_domain.items()},
        "prefix_survival": {kind: {d: a.prefix_survival for d, a in dom.items()} for kind, dom in by_domain.items()},
        "engine_overheads": engine_overheads(runs).to_dict("index"),
    }
    if compare:
        payload["paper_table1"] = {k: PAPER_TABLE1[k] for k in runs if k in PAPER_TABLE1}
    if {"dflash", "dspark"} <= set(tau):
        gain = 100 * (np.mean(list(tau["dspark"].values())) / np.mean(list(tau["dflash"].values())) - 1)
        payload["macro_gain_over_dflash_pct" if compare else "macro_gain_not_table1_pct"] = gain
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
                      seed: int = 0) -> dict[str, Any]:
    """Chapter 07's path at the real Qwen3-4B shapes on a CPU, in `dtype` (chapter 07): a random
    Qwen3-4B-shaped target (vocabulary 151,936, 36 layers), a random 1.39B DSpark drafter (mask id
    151,669, target layers 1, 9, 17, 25, 33) written in the released layout and read back by
    `checkpoints.load_released`, one prompt through the engine for a few rounds, and the results
    writer. Returns seconds, peak resident memory (GiB, this process) and what ran. Slow (minutes)."""
    import resource

    start, workdir = time.perf_counter(), Path(workdir)
    study = dataclasses.replace(get_profile("smoke").gpu, new_tokens=new_tokens, prompts_per_benchmark=1)
    device = torch.device("cpu")
    target = random_target(QWEN3_4B / "config.json", device, dtype, seed)
    folder = QWEN3_4B / Path(DRAFTER_IDS["dspark"]).name
    checkpoints.save_released(random_drafter(folder, target, seed + 1), workdir / folder.name, target.config, dtype)
    built = time.perf_counter() - start
    drafter = checkpoints.load_released(workdir / folder.name, target)
    world = World("random-weights", device, dtype, target, tiny_tokenizer(study.tiny_vocab), {"dspark": drafter},
                  {"target": "random weights, data/qwen3_4b/config.json", "dspark": f"released layout, {workdir / folder.name}"})
    prompts = {"gsm8k": evalsets.load_benchmark("gsm8k", count=1)}
    runs = merge_parts([measure_part(world, prompts, study, seed)], study.gamma)
    payload = analyze(world, runs, study, seed, "fixture", prompts, race=False, profile=False)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux: KiB
    payload["dry_run"] = {"seconds": time.perf_counter() - start, "seconds_building": built, "peak_rss_gib": rss}
    path = save_results(world, payload, "full-size-dry-run", workdir / "qwen3_4b_full_size_dry_run.json", "fixture")
    run = runs["dspark"]["gsm8k"]
    return {"seconds": time.perf_counter() - start, "seconds_building": built, "peak_rss_gib": rss,
            "results_file": str(path), "rounds": run.acceptance.rounds, "tokens": run.acceptance.tokens,
            "tau": run.acceptance.tau, "vocab_size": target.config.vocab_size,
            "target_layers": target.config.num_hidden_layers, "mask_token_id": drafter.mask_token_id,
            "target_layer_ids": list(drafter.target_layer_ids), "dtype": str(dtype).replace("torch.", ""),
            "drafter_parameters_b": sum(p.numel() for p in drafter.parameters()) / 1e9,
            "rope_dtype": str(drafter.rotary_emb.inv_freq.dtype).replace("torch.", "")}


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
    parser.add_argument("--dspark", default=DRAFTER_IDS["dspark"], help="hub id or folder of the DSpark drafter")
    parser.add_argument("--dflash", default=DRAFTER_IDS["dflash"], help="hub id or folder of the DFlash drafter")
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
    """Run chapter 07's measurement headless; returns the results file on rank 0 (chapter 07)."""
    args = parse_args(argv)
    rank, world_size, local_rank = _launch()
    if args.device == "auto":
        device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    mode = resolve_mode(args.mode, device)
    defaults = HEADLESS_DEFAULTS[mode]
    count = defaults["prompts"] if args.prompts < 0 else (args.prompts or None)
    study = get_profile(args.profile).gpu if device.type == "cuda" else get_profile("smoke").gpu
    race = {k: v for k, v in defaults.items() if k.startswith("race_")}
    study = dataclasses.replace(study, new_tokens=args.new_tokens or defaults["new_tokens"],
                                prompts_per_benchmark=count, **race)
    start = time.perf_counter()
    prompts, source = load_prompts(evalsets.DEEPSPEC_COUNTS if count is None else count, args.eval_folder,
                                   args.download_prompts, args.allow_fixture or mode != "real")
    world = load_world(mode, device, study, args.seed, args.target, {"dflash": args.dflash, "dspark": args.dspark})
    check_cache(world)
    print(f"[rank {rank}/{world_size}] {world.mode} on {gpu_name(device)} ({world.dtype}); prompts: {source}, "
          f"{sum(len(shard(p, rank, world_size)) for p in prompts.values())} here; {study.new_tokens} new tokens",
          flush=True)
    part = measure_part(world, prompts, study, args.seed, rank, world_size)
    out = args.out or result_path(world, source)
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
    print(f"wrote {path} in {time.perf_counter() - start:.0f} s; peak GPU memory "
          f"{payload['peak_memory_gib'] if payload['peak_memory_gib'] is None else round(payload['peak_memory_gib'], 2)} GiB",
          flush=True)
    return path


if __name__ == "__main__":
    main()
