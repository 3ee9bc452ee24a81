"""Chapter 07's costs-first measurement (issue 54): what a borrowed GPU should measure before anything
else, from random weights of Qwen3-4B's shape, with torch and transformers only (no download, no
wheel):

1. `cost_table`: SPS(B), target forward steps per second at B verification tokens over R requests
   (R = 1..64), each B timed `repeats` times after `warmup` untimed calls, in a fresh random order
   each round, CUDA synchronised around every timed forward (median, min and max kept);
2. `target_only`: tokens per second of target-only decoding (our loop, Eq. 1's baseline), one
   untimed run, then `repeats` timed ones;
3. `drafters`: per drafter (DSpark, DFlash, Eagle3, each built just before it is measured), draft,
   verify and overhead milliseconds per round over `repeats` timed generations after an untimed one;
4. `memory`: peak GPU memory against the estimate from the configs (`memory.memory_table`);
5. `projection`: the end-to-end speed-up at T = 1 by Eq. 1, L = (T_draft + T_verify) / tau, from
   these costs and the paper's Table 1 tau (`projected_speedups`).

Each part is written into the results file as soon as it finishes (the whole file replaced
atomically), so a run stopped at a deadline keeps every finished part. On a CPU the same path runs
at Qwen3-4B's vocabulary, layer count, layer ids and block sizes with every width shrunk to 64 (a
dry run: its numbers are CPU numbers of a tiny model, and the file says so).

    python -m dspark_lite.harness.gpu.costs_first --device cuda --out qwen3_4b_h100_costs.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch
import transformers

from ...baselines import autoregressive_generate
from ...kvcache import cache_kwarg, new_cache, remove_tokens
from ...runtime import device_generator, pick_dtype
from ...speculative import speculative_generate
from ...stepcurve import StepCurve
from ..result_files import provenance
from ..serving import costs
from ..serving.timing import seconds
from . import evalsets
from .devices import launch_device
from .loading import DRAFTER_IDS, PAPER_TABLE1, QWEN3_4B, gpu_name, random_drafter, random_target
from .memory import affordable_concurrencies, free_memory_bytes, memory_table, peak_memory_gib, profile_step_bytes

KINDS = ("dspark", "dflash", "eagle3")  # the order they are measured in: the paper's method first
SHRINK = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
RESULTS_SUFFIX = "_costs.json"  # data/results/qwen3_4b_<gpu>_costs.json


@dataclass(frozen=True)
class CostsStudy:
    """The sizes of a costs-first run: concurrencies R, batch sizes per R (`points`), the cached
    context per request, timed repeats after warm-up calls, and the generations' prompt length,
    new tokens, gamma and temperature."""

    concurrencies: tuple[int, ...]
    points: int
    context: int
    repeats: int
    warmup: int
    prompt_tokens: int
    new_tokens: int
    gamma: int = 7
    temperature: float = 1.0


# Sized to end in about two minutes on one H100 (chapters/93_gpu_protocol.md, the budget table).
STUDIES: dict[str, CostsStudy] = {
    "cuda": CostsStudy(concurrencies=(1, 2, 4, 8, 16, 32, 64), points=8, context=256, repeats=5, warmup=2,
                       prompt_tokens=128, new_tokens=64),
    "cpu": CostsStudy(concurrencies=(1, 2, 4), points=3, context=16, repeats=3, warmup=1, prompt_tokens=16,
                      new_tokens=12),
}


class ResultsFile:
    """The run's results file, rewritten whole (write, then rename) after every part, so that a
    stop at any moment leaves a readable file with the parts finished so far."""

    def __init__(self, path: Path, device: torch.device, header: Mapping[str, Any]) -> None:
        self.path, self.device = Path(path), device
        self.results: dict[str, Any] = {**header, "parts_done": [], "skipped": {}}
        self.write()

    def part(self, name: str, value: Any) -> None:
        """Store (or replace) part `name` and write the file."""
        self.results[name] = value
        if name not in self.results["parts_done"]:
            self.results["parts_done"].append(name)
        self.write()

    def skip(self, name: str, why: str) -> None:
        """Record that part `name` was not measured, and why."""
        self.results["skipped"][name] = why
        self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"provenance": provenance("costs-first", str(self.device)),
                                   "results": self.results}, indent=1) + "\n")
        os.replace(tmp, self.path)


def spread(values: Sequence[float], scale: float = 1.0) -> dict[str, Any]:
    """Median, min, max and every value of repeated timings, times `scale`."""
    scaled = [scale * float(v) for v in values]
    return {"median": statistics.median(scaled), "min": min(scaled), "max": max(scaled), "all": scaled,
            "repeats": len(scaled)}


# ========================================================================== the models


def config_folder(device: torch.device, workdir: Path) -> Path:
    """Where the target's and the drafters' configs come from: data/qwen3_4b/ on a GPU; on a CPU,
    copies of them with every width shrunk (`SHRINK`) written into `workdir`."""
    if device.type == "cuda":
        return QWEN3_4B
    (workdir / "generation_config.json").write_text((QWEN3_4B / "generation_config.json").read_text())
    for name in ["."] + [Path(hub_id).name for hub_id in DRAFTER_IDS.values()]:
        config = {**json.loads((QWEN3_4B / name / "config.json").read_text()), **SHRINK}
        (workdir / name).mkdir(parents=True, exist_ok=True)
        (workdir / name / "config.json").write_text(json.dumps(config))
    return workdir


def random_prompt(length: int, vocab: int, seed: int, device: torch.device) -> torch.Tensor:
    """`length` random token ids (random weights read every prompt alike)."""
    return torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(seed)).to(device)


# ========================================================================== 1. the cost table SPS(B)


@torch.inference_mode()
def time_concurrency(target: Any, requests: int, study: CostsStudy, device: torch.device, seed: int) -> dict[str, Any]:
    """SPS(B) at concurrency R = `requests`: a cache of R random contexts, then for each B of
    `costs.concurrency_batch_sizes` one padded forward of the query blocks (`costs.spread_tokens`)
    timed `repeats` times after `warmup` rounds, B taking turns in a fresh random order each round;
    the cache is cropped back after every forward."""
    generator = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    context = torch.randint(0, vocab, (requests, study.context), generator=generator).to(device)
    cache = new_cache(target)
    target(input_ids=context, **cache_kwarg(cache), use_cache=True, logits_to_keep=1)
    sizes = costs.concurrency_batch_sizes(requests, study.gamma, study.points)
    times: list[list[float]] = [[] for _ in sizes]
    for round_ in range(study.warmup + study.repeats):
        for i in torch.randperm(len(sizes), generator=generator).tolist():
            counts = costs.spread_tokens(sizes[i], requests)
            rows, width = len(counts), max(counts)
            ids = torch.randint(0, vocab, (rows, width), generator=generator).to(device)
            real = (torch.arange(width)[None] < torch.tensor(counts)[:, None]).long()
            mask = torch.cat([torch.ones(rows, study.context, dtype=torch.long), real], dim=1).to(device)
            positions = (study.context + torch.arange(width, device=device)).expand(rows, width)
            elapsed = seconds(lambda: target(input_ids=ids, attention_mask=mask, position_ids=positions,
                                             **cache_kwarg(cache), use_cache=True), device)
            remove_tokens(cache, width)
            if round_ >= study.warmup:
                times[i].append(elapsed)
    medians = [statistics.median(t) for t in times]
    curve = StepCurve.from_latencies(sizes, medians, {"kind": "measured", "requests": requests,
                                                      "context_len": study.context, "repeats": study.repeats,
                                                      "warmup": study.warmup, "seconds_per_step": medians})
    return {"curve": curve.to_dict(), "ms_per_step": [spread(t, 1e3) for t in times]}


# ========================================================================== 2. and 3. decoding


def time_target_only(target: Any, prompt: torch.Tensor, study: CostsStudy, device: torch.device,
                     seed: int) -> dict[str, Any]:
    """Tokens per second of target-only decoding (`autoregressive_generate`, no end id, so every
    run makes `new_tokens`): one untimed run, then `repeats` timed ones."""
    rates = []
    for repeat in range(1 + study.repeats):
        generator = device_generator(seed + repeat, device)
        out: list[torch.Tensor] = []
        elapsed = seconds(lambda: out.append(autoregressive_generate(target, prompt, study.new_tokens,
                                                                     study.temperature, generator)), device)
        if repeat:
            rates.append(len(out[0]) / elapsed)
    per_token = spread([1.0 / r for r in rates], 1e3)
    return {"tokens_per_s": spread(rates), "ms_per_token": per_token, "new_tokens": study.new_tokens,
            "prompt_tokens": int(prompt.shape[0])}


def time_drafter(target: Any, drafter: Any, prompt: torch.Tensor, study: CostsStudy, device: torch.device,
                 seed: int) -> dict[str, Any]:
    """Milliseconds per round of drafting, verifying and the rest (`speculative_generate(timed=True)`,
    CUDA synchronised around every phase): one untimed generation, then `repeats` timed ones, no end
    id. Random weights accept almost nothing, so a round here verifies a full block and emits about
    one token: the per-round costs are real, the tokens per round are not."""
    per_round: dict[str, list[float]] = {"draft": [], "verify": [], "overhead": [], "prefill": []}
    rounds = []
    for repeat in range(1 + study.repeats):
        out = speculative_generate(target, drafter, prompt, study.new_tokens, study.gamma, study.temperature,
                                   device_generator(seed + repeat, device), None, timed=repeat > 0)
        if repeat:
            count = max(1, len(out.rounds))
            rounds.append(len(out.rounds))
            for phase in ("draft", "verify", "overhead"):
                per_round[phase].append(1e3 * float(getattr(out, f"{phase}_seconds")) / count)
            per_round["prefill"].append(1e3 * float(out.prefill_seconds))
    return {**{f"{phase}_ms_per_round": spread(v) for phase, v in per_round.items() if phase != "prefill"},
            "prefill_ms": spread(per_round["prefill"]), "rounds": rounds,
            "parameters_b": sum(p.numel() for p in drafter.parameters()) / 1e9}


# ========================================================================== 5. Eq. 1


def projected_speedups(target_ms_per_token: float, drafters: Mapping[str, Mapping[str, Any]],
                       table1: Mapping[str, Mapping[str, float]] = PAPER_TABLE1) -> list[dict[str, Any]]:
    """Eq. 1 with measured costs and the paper's tau: per drafter and domain (math, code, chat and
    the macro average over Table 1's nine benchmarks), tau = the mean of Table 1's tau there,
    L = (T_draft + T_verify) / tau per token, and the speed-up over target-only decoding,
    target_ms_per_token / L; also with the engine's overhead per round added to the round time."""
    rows = []
    for kind, measured in drafters.items():
        if kind not in table1:
            continue
        draft, verify = measured["draft_ms_per_round"]["median"], measured["verify_ms_per_round"]["median"]
        overhead = measured["overhead_ms_per_round"]["median"]
        groups = {domain: [tau for name, tau in table1[kind].items() if evalsets.domain_of(name) == domain]
                  for domain in evalsets.DOMAINS}
        groups["macro"] = list(table1[kind].values())
        for domain, taus in groups.items():
            tau = float(np.mean(taus))
            latency = (draft + verify) / tau
            rows.append({"drafter": kind, "domain": domain, "tau (the paper)": tau,
                         "draft + verify ms/round": draft + verify, "ms per token (Eq. 1)": latency,
                         "speed-up (Eq. 1)": target_ms_per_token / latency,
                         "speed-up with overhead": target_ms_per_token * tau / (draft + verify + overhead)})
    return rows


# ========================================================================== the run


def measure(device: torch.device, out: Path, study: CostsStudy | None = None, kinds: Sequence[str] = KINDS,
            seed: int = 0, budget: float = 170.0, echo: Callable[[str], None] = print) -> Path:
    """The costs-first run on `device` into the results file `out` (see the module doc); a part that
    cannot start with `budget` seconds nearly spent is recorded as skipped. Returns `out`."""
    start = time.perf_counter()
    study = study or STUDIES[device.type]
    unknown = [k for k in kinds if k not in DRAFTER_IDS]
    if unknown or not kinds:
        raise ValueError(f"drafter kinds {unknown or 'none'}; expected some of {', '.join(DRAFTER_IDS)}")
    dtype = pick_dtype(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    workdir = Path(tempfile.mkdtemp(prefix="dspark_costs_first_"))
    folder = config_folder(device, workdir)
    where = ("GPU, random weights of Qwen3-4B's shape" if device.type == "cuda" else
             "CPU dry run: Qwen3-4B's vocabulary, layers and layer ids, every width shrunk to 64 (CPU numbers of a "
             "tiny model, not a GPU's)")
    header = {"measured_where": where, "device": str(device), "gpu": gpu_name(device),
              "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__,
              "transformers": transformers.__version__, "cuda": torch.version.cuda, "seed": seed,
              "study": asdict(study), "kinds": list(kinds), "budget_s": budget,
              "tau_source": "the paper's Table 1 (random weights accept almost nothing: no tau is measured here)"}
    results = ResultsFile(out, device, header)
    left = lambda: budget - (time.perf_counter() - start)
    echo(f"costs-first: {where}; {dtype}; results into {out.name}")
    target = random_target(folder / "config.json", device, dtype, seed)
    results.part("target_built_s", time.perf_counter() - start)
    fits = affordable_concurrencies(target.config, study.concurrencies, study.gamma, study.context,
                                    torch.finfo(dtype).bits // 8, free_memory_bytes(device))
    table: dict[str, Any] = {}
    for R in fits:
        if left() < 10:
            results.skip(f"cost_table R={R}", f"{left():.0f} s of the budget left")
            continue
        table[str(R)] = time_concurrency(target, R, study, device, seed)
        results.part("cost_table", table)
        echo(f"  SPS(B) at R = {R}: " + ", ".join(f"B {b}: {1e3 * s:.1f} ms" for b, s in zip(
            table[str(R)]["curve"]["sizes"], table[str(R)]["curve"]["meta"]["seconds_per_step"])))
    results.part("cost_table_skipped_for_memory", [R for R in study.concurrencies if R not in fits])
    prompt = random_prompt(study.prompt_tokens, target.config.vocab_size, seed, device)
    baseline = time_target_only(target, prompt, study, device, seed)
    results.part("target_only", baseline)
    echo(f"  target only: {baseline['tokens_per_s']['median']:.1f} tokens/s "
         f"({baseline['tokens_per_s']['min']:.1f}-{baseline['tokens_per_s']['max']:.1f})")
    estimate = memory_estimate(target.config, folder, kinds, dtype, study)  # from the configs, once (seconds)
    results.part("memory", {"peak_gib": peak_memory_gib(device), **estimate})
    drafters: dict[str, Any] = {}
    for kind in kinds:
        if left() < 15:
            results.skip(f"drafter {kind}", f"{left():.0f} s of the budget left")
            continue
        built = time.perf_counter()
        drafter = random_drafter(folder / Path(DRAFTER_IDS[kind]).name, target, seed + 1)
        drafters[kind] = {"built_s": time.perf_counter() - built,
                          **time_drafter(target, drafter, prompt, study, device, seed)}
        del drafter
        results.part("drafters", drafters)
        results.part("projection", projected_speedups(baseline["ms_per_token"]["median"], drafters))
        d = drafters[kind]
        echo(f"  {kind}: draft {d['draft_ms_per_round']['median']:.2f}, verify {d['verify_ms_per_round']['median']:.2f}, "
             f"overhead {d['overhead_ms_per_round']['median']:.2f} ms/round (built in {d['built_s']:.0f} s)")
        results.part("memory", {"peak_gib": peak_memory_gib(device), **estimate})
    results.part("seconds", time.perf_counter() - start)
    echo(f"costs-first done in {time.perf_counter() - start:.0f} s")
    return out


def memory_estimate(config: Any, folder: Path, kinds: Sequence[str], dtype: torch.dtype,
                    study: CostsStudy) -> dict[str, Any]:
    """The GPU memory the run should need, from the configs (`memory.memory_table`), to set beside
    the measured peak: the weights of the target and the drafters, the KV cache of one generation,
    and the largest cost-table step (`memory.profile_step_bytes`), in GiB."""
    table = memory_table(config, {k: folder / Path(DRAFTER_IDS[k]).name for k in kinds}, dtype,
                         study.prompt_tokens + study.new_tokens)
    step = profile_step_bytes(config, max(study.concurrencies), study.gamma, study.context,
                              torch.finfo(dtype).bits // 8) / 2**30
    weights = float(table["GiB"].iloc[:-1].sum())
    return {"estimate_weights_gib": weights, "estimate_kv_one_generation_gib": float(table["GiB"].iloc[-1]),
            "estimate_largest_cost_step_gib": step, "estimate_total_gib": weights + step,
            "estimate_note": "all drafters counted at once; the run builds one drafter at a time"}


def results_name(device: torch.device) -> str:
    """qwen3_4b_<gpu>_costs.json on a GPU (data/results/ once committed), qwen3_4b_cpu_costs.json on a CPU."""
    from .loading import slug

    return f"qwen3_4b_{slug(gpu_name(device))}{RESULTS_SUFFIX}"


def main(argv: Sequence[str] | None = None) -> Path:
    """`python -m dspark_lite.harness.gpu.costs_first`: parse, then `measure`."""
    parser = argparse.ArgumentParser(prog="python -m dspark_lite.harness.gpu.costs_first",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda (cuda:LOCAL_RANK) or cuda:N")
    parser.add_argument("--out", type=Path, required=True, help="the results file (rewritten after every part)")
    parser.add_argument("--budget", type=float, default=170.0, help="seconds; a part that cannot start is skipped")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"drafters, in order (default {','.join(KINDS)})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        device = launch_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    if args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; expected a .json file name")
    return measure(device, args.out, kinds=[k.strip() for k in args.kinds.split(",") if k.strip()], seed=args.seed,
                   budget=args.budget, echo=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
    sys.exit(0)
