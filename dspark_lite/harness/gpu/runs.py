"""Chapter 07's GPU runs as the results page and the preface read them (chapters 00 and 90): the
committed files `data/results/qwen3_4b_<gpu>*.json`, what kind of run each is, under which
protocol its tau stands beside the paper's Table 1, the leading run, and its Table 1 rows.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..result_files import committed_results_dir


# Chapter 07's GPU runs: data/results/qwen3_4b_<gpu>.json (real weights, DeepSpec's full protocol),
# ..._subset.json (real weights on DeepSpec's prompts at smaller sizes), ..._fixture.json (real
# weights on the book's fixture prompts) and ..._random_weights.json.
GPU_RESULT_GLOB = "qwen3_4b_*.json"
# What a chapter-07 run is, best first: the results page shows the best kind there is.
GPU_RUN_KINDS: tuple[str, ...] = ("real weights, DeepSpec's prompts", "real weights, fixture prompts (not Table 1)",
                                  "random weights (costs and overheads only)", "tiny random models (code path only)")


def gpu_run_kind(record: dict[str, Any]) -> str:
    """Which of GPU_RUN_KINDS a GPU result is, from its environment. A file
    without `comparable_to_paper` (written before it existed) counts as comparable when real."""
    env = record.get("results", {}).get("environment", {})
    mode = env.get("mode")
    if mode == "real":
        comparable = env.get("comparable_to_paper", env.get("prompt_source", "deepspec") != "fixture")
        return GPU_RUN_KINDS[0] if comparable else GPU_RUN_KINDS[1]
    return GPU_RUN_KINDS[2] if mode == "random-weights" else GPU_RUN_KINDS[3]


def gpu_protocol(record: dict[str, Any]) -> str | None:
    """Under which protocol a GPU result's tau stands beside the paper's:
    "table1" only for a run of DeepSpec's full protocol (its prompt counts per benchmark, 2048 new
    tokens, T = 1, gamma 7, real weights, DeepSpec's files), "subset" for real weights on DeepSpec's
    prompts at other sizes, None for any other run. Files written before the "subset" key existed
    kept every comparable run under "table1": their environment decides."""
    from ..gpu.evalsets import DEEPSPEC_COUNTS

    results = record.get("results", {})
    if gpu_run_kind(record) != GPU_RUN_KINDS[0]:
        return None
    if "subset" in results:
        return "subset"
    env = results.get("environment", {})
    if env.get("protocol") in ("table1", "subset"):
        return env["protocol"]
    full = (env.get("prompt_counts") == DEEPSPEC_COUNTS and env.get("new_tokens") == 2048
            and env.get("prompt_source", "deepspec") == "deepspec" and env.get("temperature", 1.0) == 1.0
            and env.get("gamma", 7) == 7)
    return "table1" if full else "subset"


def gpu_protocol_label(record: dict[str, Any]) -> str:
    """How the results page names a run's comparison with the paper: "Table 1", "subset (20 prompts
    a benchmark, 256 new tokens)", or "not compared"."""
    protocol = gpu_protocol(record)
    if protocol is None:
        return "not compared"
    if protocol == "table1":
        return "Table 1"
    env = record.get("results", {}).get("environment", {})
    sizes = sorted({int(v) for v in (env.get("prompt_counts") or {}).values()})
    prompts = "-".join(map(str, sizes[::max(1, len(sizes) - 1)])) or "?"
    return f"subset ({prompts} prompts a benchmark, {env.get('new_tokens', '?')} new tokens)"


def gpu_results(folder: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every GPU result in `folder` (default data/results/) as (file stem, record), best
    first: real runs on DeepSpec's prompts (those of the full protocol before subsets), then real
    runs on the fixture, then random weights; the newest first within a kind. A later
    random-weights run never hides a real one, nor a later subset a full Table 1 run."""
    folder = Path(folder) if folder is not None else committed_results_dir()
    found = [(p.stem, json.loads(p.read_text())) for p in sorted(folder.glob(GPU_RESULT_GLOB))] if folder.exists() else []
    newest_first = sorted(found, key=lambda item: (item[1].get("provenance", {}).get("date", ""), item[0]), reverse=True)
    return sorted(newest_first, key=lambda item: (GPU_RUN_KINDS.index(gpu_run_kind(item[1])),
                                                  gpu_protocol(item[1]) == "subset"))


def best_gpu_result(folder: Path | None = None) -> tuple[str, dict[str, Any]] | None:
    """The GPU result the results page leads with (`gpu_results`' first), or None."""
    found = gpu_results(folder)
    return found[0] if found else None


def gpu_status(folder: Path | None = None, has_gpu: bool = False) -> str:
    """A sentence on what the book has measured on Qwen3-4B: the committed GPU run it sets
    beside Table 1 (`best_gpu_result` of `folder`, default data/results/), or that there is none
    yet, why, and what this build's GPU page ran (`has_gpu`: whether this build had a GPU)."""
    folder = Path(folder) if folder is not None else committed_results_dir()
    best = best_gpu_result(folder)
    kind = None if best is None else gpu_run_kind(best[1])
    if kind == GPU_RUN_KINDS[0]:
        env = best[1].get("results", {}).get("environment", {})
        date = best[1].get("provenance", {}).get("date", "an unrecorded date")
        return (f"Chapter 07 sets a committed GPU run of Qwen3-4B with the released checkpoints on DeepSpec's "
                f"evaluation prompts (`data/results/{best[0]}.json`, {env.get('gpu') or 'GPU not recorded'}, {date}) "
                f"beside the paper's Table 1, compared as: {gpu_protocol_label(best[1])}. Every other number in the "
                "book is measured on the toy world, on the build machine's CPU (or GPU, where it had one).")
    if not folder.exists():
        held = "the folder `data/results/` does not exist yet"
    elif best is None:
        held = "`data/results/` holds no such run"
    else:
        held = f"`data/results/` holds only runs of another kind, the best being {kind}"
    this_build = ("This build had a GPU: chapter 07 as rendered here measured this machine's run, which is not "
                  "committed to `data/results/`." if has_gpu else
                  "This build ran without a GPU, so chapter 07 as rendered here runs the same code path with tiny "
                  "random models, whose numbers mean nothing.")
    return ("**No number in this book has been measured on Qwen3-4B yet.** No GPU run of chapter 07 with "
            f"Qwen3-4B and the released checkpoints has been committed ({held}). Qwen3-4B's numbers "
            "(Table 1's accepted lengths, Figure 2, the confidence head's calibration, the wall-clock "
            "speed-up) will appear in chapter 07 when such a run is committed. Everything else in the book "
            f"is measured on the toy world, on a CPU. {this_build}")


def gpu_table1_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (drafter, benchmark) of a GPU result: our tau, and the paper's with the
    relative difference in % only for a run of real weights on DeepSpec's prompts (None otherwise),
    with the kind of run, what the comparison is ("Table 1", or "subset (...)" with its sizes: see
    `gpu_protocol_label`), the GPU and the prompt count. Reads files written before and
    after the "subset" key."""
    results = record.get("results", {})
    env = results.get("environment", {})
    kind = gpu_run_kind(record)
    comparable = kind == GPU_RUN_KINDS[0]
    if "subset" in results:
        taus = results["subset"].get("tau", {})
    else:
        taus = results.get("table1") if comparable else results.get("tau_not_table1", results.get("table1", {}))
    compared_as = gpu_protocol_label(record)
    rows = []
    for drafter, by_bench in (taus or {}).items():
        paper = results.get("paper_table1", {}).get(drafter, {}) if comparable else {}
        for bench, tau in by_bench.items():
            ref = paper.get(bench)
            rows.append({"drafter": drafter, "benchmark": bench, "tau (ours)": tau, "tau (paper)": ref,
                         "difference %": None if tau is None or not ref else 100 * (tau / ref - 1),
                         "compared as": compared_as, "kind": kind, "gpu": env.get("gpu", ""), "new tokens": env.get("new_tokens"),
                         "prompts": env.get("prompt_counts", {}).get(bench)})
    return rows
