"""Chapter 07 without Jupyter: `python -m dspark_lite.harness.gpu --help` runs the same measurement
(torch, transformers, safetensors, numpy and pandas only) and writes one results file; under
`torchrun` every rank measures its shard of the prompts (`shard`, `measure_part`) and rank 0
merges the parts (`merge_parts`) and runs the rest (`analyze`). `full_size_dry_run` runs the
path at Qwen3-4B's shapes on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ...record import Rounds
from ..result_files import describe_path
from ..serving import simulator
from ..toy.evaluation import summarize
from ..toy.profiles import GpuStudy, get_profile
from . import checkpoints, evalsets
from .loading import (
    DRAFTER_IDS,
    MODES,
    PAPER_TABLE1,
    QWEN3_4B,
    TARGET_ID,
    World,
    check_cache,
    gpu_name,
    load_world,
    random_drafter,
    random_target,
    tiny_tokenizer,
)
from .measure import (
    PAPER_NEW_TOKENS,
    PHASES,
    BenchmarkRun,
    block_records,
    calibrate,
    domain_acceptance,
    engine_overheads,
    protocol_differences,
    run_benchmark,
    run_clock,
    run_protocol,
    shard,
)
from .memory import peak_memory_gib, profile_costs, wall_clock
from .devices import launch_device
from .preflight import SetupError, check_setup, environment, result_path, save_results


def measure_part(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int, rank: int = 0,
                 world_size: int = 1) -> dict[str, Any]:
    """This rank's share of Table 1: prompts rank, rank + W, ... of every benchmark,
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
    """Pool the parts of all ranks into {drafter: {benchmark: BenchmarkRun}}: rounds
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
    """Everything the GPU measurement reports after Table 1's generations, as the results payload: tau per
    benchmark, under "table1" only for a run of DeepSpec's full protocol (`run_protocol`), under
    "subset" (with the run's sizes and how it differs from the protocol) for real weights on
    DeepSpec's prompts at other sizes, else under "tau_not_table1"; the paper's Table 1 beside the
    first two; Figure 2's curves, the threshold sweep and STS, engine overheads per round, the
    wall-clock race, SPS(B), the simulator (real weights only: with random weights it would replay
    meaningless acceptance), peak memory."""
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
        if cal is not None and world.mode == "real":  # random weights' acceptance would make them meaningless
            dense = {R: c.dense() for R, c in curves.items()}
            aggregate, _ = simulator.replayed_sweep(cal.test_records, ["dspark", "fixed", "mtp1", "threshold"], dense,
                                                  sorted(curves), max(1, study.sim_steps // study.sim_replays),
                                                  study.sim_replays, seed=seed)
            payload["simulator_throughput"] = aggregate[["scheduler", "R", "throughput", "per_user", "budget"]].to_dict("records")
            payload["sla_gain_over_mtp1"] = simulator.sla_gain(aggregate, "mtp1").to_dict("records")
    payload["peak_memory_gib"] = peak_memory_gib(world.device)
    return payload


# ========================================================================== the full-size dry run on a CPU


def full_size_dry_run(workdir: str | Path, new_tokens: int = 24, dtype: torch.dtype = torch.bfloat16,
                      seed: int = 0, kinds: Sequence[str] = ("dspark", "eagle3")) -> dict[str, Any]:
    """The GPU measurement's path at the real Qwen3-4B shapes on a CPU, in `dtype`: a random
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
        checkpoints.save_released(random_drafter(folder, target, seed + 1), workdir / folder.name, target.config, dtype)
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
# Per mode: prompts per benchmark (None: DeepSpec's counts), tokens per prompt, and the race's size.
# Random weights measure costs, not acceptance: two prompts a benchmark and a short race keep a
# run within a few minutes on one GPU.
HEADLESS_DEFAULTS: dict[str, dict[str, Any]] = {
    "random-weights": dict(prompts=2, new_tokens=256, race_prompts=2, race_repeats=2),
    "real": dict(prompts=None, new_tokens=PAPER_NEW_TOKENS),
    "smoke": dict(prompts=1, new_tokens=40),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line of `python -m dspark_lite.harness.gpu`."""
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
    """Run the GPU measurement headless; returns the results file on rank 0. Every
    setting is checked (`check_setup`) before anything is downloaded or loaded."""
    args = parse_args(argv)
    rank, world_size, _ = _launch()
    try:
        device = launch_device(args.device)  # "cuda" gets its index: torch.cuda.set_device refuses none
    except ValueError as error:
        raise SetupError(f"{error}. Set --device") from None
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
