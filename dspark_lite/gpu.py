"""Chapter 07's harness: Qwen3-4B and DeepSpec's released drafters through dspark_lite's engine.

Three worlds, one code path (`load_world`):

* "real": `Qwen/Qwen3-4B` through `AutoModelForCausalLM` (bf16 where the GPU supports it,
  fp16 otherwise, sdpa attention) and the released DFlash and DSpark drafters through
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
(the simulator). Prompts follow the paper's protocol: the chat template with thinking off,
the first turn only, temperature 1.0, gamma 7.
"""
from __future__ import annotations

import contextlib
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import transformers
from tqdm.auto import tqdm
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel, Qwen3Config,
                          Qwen3ForCausalLM)

from . import benchmark, checkpoints, evalsets, serving, tokenizer as toy_tokenizer
from .drafters import DFlashConfig, DFlashDrafter
from .dspark import DSparkConfig, DSparkDrafter
from .evaluation import DomainAcceptance, summarize
from .profiles import GpuStudy
from .results import REPO, committed_results_dir, provenance, results_dir
from .speculative import RoundRecord, speculative_generate

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
    """bf16 on a GPU that supports it, fp16 on an older one (e.g. a T4), float32 on the CPU (chapter 07)."""
    if device.type != "cuda":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


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


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Parameters created inside are `dtype` (a 4B model is never materialised in float32)."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(saved)


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
    `device` in `dtype` (chapter 07, random-weights mode)."""
    config = Qwen3Config(**json.loads(Path(config_path).read_text()))
    torch.manual_seed(seed)
    with default_dtype(dtype), torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
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
    def eos_token_id(self) -> int | None:
        """The end-of-turn token (Qwen3: <|im_end|>); our engine stops on one id."""
        return self.tokenizer.eos_token_id


def load_world(mode: str, device: torch.device, study: GpuStudy, seed: int = 0, target_source: str | Path = TARGET_ID,
               drafter_sources: Mapping[str, str | Path] | None = None, workdir: str | Path | None = None) -> World:
    """Chapter 07's models in `mode` ("real", "random-weights" or "smoke"; see the module doc)."""
    drafter_sources = dict(drafter_sources or DRAFTER_IDS)
    if mode == "real":
        target, tok = load_target(target_source, device)
        drafters = {kind: checkpoints.load_released(src, target) for kind, src in drafter_sources.items()}
        sources = {"target": str(target_source), **{k: str(v) for k, v in drafter_sources.items()}}
    elif mode == "random-weights":
        dtype = pick_dtype(device)
        target = random_target(QWEN3_4B / "config.json", device, dtype, seed)
        tok = _tokenizer_or_tiny(target_source, study)
        drafters = {kind: random_drafter(QWEN3_4B / Path(str(DRAFTER_IDS[kind])).name, target, seed + 1)
                    for kind in drafter_sources}
        sources = {"target": "random weights, data/qwen3_4b/config.json",
                   **{k: f"random weights, data/qwen3_4b/{Path(DRAFTER_IDS[k]).name}/config.json" for k in drafter_sources}}
    elif mode == "smoke":
        folder = Path(workdir or tempfile.mkdtemp(prefix="dspark_ch07_"))
        paths = build_smoke_world(folder, study, seed)
        target, tok = load_target(paths["target"], device, torch.float32)
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


# ========================================================================== prompts and acceptance


def encode_first_turn(tok: Any, prompt: str) -> torch.Tensor:
    """The first user turn through the chat template with thinking off, as token ids [T] (chapter 07)."""
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True,
                                   enable_thinking=False)
    return torch.tensor(tok(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


@dataclass
class BenchmarkRun:
    """One drafter on one benchmark: the acceptance summary (with every round's record) and the
    engine's seconds per phase (prefill, draft, verify, overhead)."""

    acceptance: DomainAcceptance
    seconds: dict[str, float]


def run_benchmark(world: World, kind: str, prompts: Sequence[str], study: GpuStudy, seed: int = 0,
                  desc: str = "") -> BenchmarkRun:
    """Speculative generation of every prompt with drafter `kind` at gamma and temperature of
    `study`; the rounds are kept for calibration and the simulator (chapter 07)."""
    drafter = world.drafters[kind]
    generator = torch.Generator(device=world.device).manual_seed(seed)
    rounds: list[RoundRecord] = []
    tokens, seconds = 0, dict.fromkeys(("prefill", "draft", "verify", "overhead"), 0.0)
    for prompt in tqdm(prompts, desc=desc or kind, leave=False):
        ids = encode_first_turn(world.tokenizer, prompt).to(world.device)
        out = speculative_generate(world.target, drafter, ids, study.new_tokens, study.gamma, study.temperature,
                                   generator, world.eos_token_id)
        rounds += out.rounds
        tokens += len(out.tokens)
        for phase in seconds:
            seconds[phase] += getattr(out, f"{phase}_seconds")
    return BenchmarkRun(summarize(desc or kind, rounds, study.gamma, tokens, keep_records=True), seconds)


def run_table1(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int = 0
               ) -> dict[str, dict[str, BenchmarkRun]]:
    """{drafter kind: {benchmark: BenchmarkRun}} for every drafter of the world (chapter 07)."""
    return {kind: {name: run_benchmark(world, kind, p, study, seed, f"{kind}: {name}") for name, p in prompts.items()}
            for kind in world.drafters}


def table1_frame(runs: Mapping[str, Mapping[str, BenchmarkRun]]) -> pd.DataFrame:
    """Ours beside Table 1: one row per (drafter, benchmark) with tau, the paper's and the
    relative difference in % (chapter 07)."""
    rows = []
    for kind, by_bench in runs.items():
        for name, run in by_bench.items():
            paper = PAPER_TABLE1.get(kind, {}).get(name, np.nan)
            rows.append({"drafter": kind, "benchmark": evalsets.BENCHMARKS[name].column, "domain": evalsets.domain_of(name),
                         "tau (ours)": run.acceptance.tau, "tau (paper)": paper,
                         "difference %": 100 * (run.acceptance.tau / paper - 1), "rounds": run.acceptance.rounds})
    return pd.DataFrame(rows)


def rounds_by_domain(runs: Mapping[str, BenchmarkRun]) -> dict[str, list[RoundRecord]]:
    """One drafter's round records pooled by domain (math, code, chat)."""
    pooled: dict[str, list[RoundRecord]] = {}
    for name, run in runs.items():
        pooled.setdefault(evalsets.domain_of(name), []).extend(run.acceptance.records or [])
    return pooled


def domain_acceptance(runs: Mapping[str, BenchmarkRun], gamma: int) -> dict[str, DomainAcceptance]:
    """Figure 2's input: conditional acceptance (and prefix survival) per domain, pooled over benchmarks."""
    tokens = {d: 0 for d in evalsets.DOMAINS}
    for name, run in runs.items():
        tokens[evalsets.domain_of(name)] += run.acceptance.tokens
    return {d: summarize(d, rounds, gamma, tokens[d]) for d, rounds in rounds_by_domain(runs).items()}


def block_records(runs: Mapping[str, BenchmarkRun], gamma: int) -> serving.BlockRecords:
    """The DSpark drafter's full blocks with confidences, labelled by domain (chapters 05-06's input)."""
    return serving.BlockRecords.from_rounds(rounds_by_domain(runs), gamma)


# ========================================================================== wall clock


def hf_generate(target: PreTrainedModel, max_new_tokens: int, temperature: float, eos: int | None,
                pad: int | None) -> benchmark.Decoder:
    """transformers' own `generate` (sampling at `temperature`, no top-k/top-p), the target-only baseline."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=temperature > 0, temperature=temperature or None,
                              top_k=None, top_p=None, eos_token_id=eos, pad_token_id=pad if pad is not None else eos)

    def decode(ids: torch.Tensor) -> torch.Tensor:
        out = target.generate(ids[None], attention_mask=torch.ones_like(ids)[None], generation_config=config)
        return out[0, ids.shape[0]:]

    return decode


def wall_clock(world: World, prompts: Sequence[str], study: GpuStudy, seed: int = 0) -> pd.DataFrame:
    """Tokens/s of target-only decoding (transformers `generate` and our loop) against our engine
    with each drafter, on the same prompts in the same run (chapter 07); median of repeats."""
    generator = torch.Generator(device=world.device).manual_seed(seed)
    eos, pad = world.eos_token_id, world.tokenizer.pad_token_id
    decoders = {"target only: transformers generate": hf_generate(world.target, study.race_new_tokens,
                                                                   study.temperature, eos, pad),
                "target only: our loop": benchmark.target_only(world.target, study.race_new_tokens, study.temperature,
                                                               eos, generator)}
    for kind, drafter in world.drafters.items():
        decoders[f"speculative: {kind}"] = benchmark.ours(world.target, drafter, study.race_new_tokens, study.gamma,
                                                          study.temperature, eos, generator)
    ids = [encode_first_turn(world.tokenizer, p).to(world.device) for p in prompts]
    speeds = benchmark.race(decoders, ids, study.race_repeats)
    frame = pd.DataFrame({name: {"tokens/s": s["tokens_per_s"], "tokens": s["tokens"]} for name, s in speeds.items()}).T
    frame["speed-up over generate"] = frame["tokens/s"] / frame.loc["target only: transformers generate", "tokens/s"]
    return frame


# ========================================================================== environment and results


def environment(world: World, study: GpuStudy, seed: int, counts: Mapping[str, int]) -> dict[str, Any]:
    """Where and how the run was measured: GPU, versions, dtype, mode, sources, prompt counts, seed."""
    env = {"mode": world.mode, "device": str(world.device), "gpu": gpu_name(world.device),
           "dtype": str(world.dtype).replace("torch.", ""), "torch": torch.__version__,
           "transformers": transformers.__version__, "cuda": torch.version.cuda, "seed": seed,
           "prompt_counts": dict(counts), "gamma": study.gamma, "temperature": study.temperature,
           "new_tokens": study.new_tokens, "sources": dict(world.sources),
           "measured_where": "GPU" if world.device.type == "cuda" else "CPU (tiny random models: meaningless numbers)"}
    if world.device.type == "cuda":
        props = torch.cuda.get_device_properties(world.device)
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        env["gpu_count"] = torch.cuda.device_count()
    return env


def result_path(world: World) -> Path:
    """data/results/qwen3_4b_<gpu>.json for a real GPU run (…_random_weights.json for random weights);
    $DSPARK_RESULTS/qwen3_4b_<mode>.json otherwise (a smoke run never writes into data/results)."""
    if world.device.type == "cuda" and world.mode in ("real", "random-weights"):
        suffix = "" if world.mode == "real" else "_random_weights"
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


def save_results(world: World, payload: Mapping[str, Any], profile: str, path: Path | None = None) -> Path:
    """Write the run's payload with its provenance and environment (chapter 07); returns the path."""
    path = path or result_path(world)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"provenance": provenance(profile, str(world.device)), "results": _jsonable(dict(payload))}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def shard(items: Sequence[Any], rank: int, world_size: int) -> list[Any]:
    """Every world_size-th item from `rank` (DeepSpec's split of prompts over GPUs), for torchrun /
    accelerate launches: each process measures its shard, the records are pooled afterwards."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size = {world_size}), got {rank}")
    return list(items)[rank::world_size]
