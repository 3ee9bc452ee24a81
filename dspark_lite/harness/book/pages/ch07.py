"""Chapter 07's bookkeeping (Qwen3-4B on a GPU with the released drafters): the requirements note,
the run's description, the tables and figures of each section, the sentences each measuring cell says
about this run (`say`), and the rows of the verdict box. The chapter's visible code loads the models
and measures; everything here only shows, words or checks what that code computed.
"""
from __future__ import annotations

import inspect
import json
import time
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from transformers import Qwen3Config, Qwen3ForCausalLM

from .... import calibration
from ....scheduler import survival
from ...gpu import checkpoints, evalsets, loading, measure, memory, released_config
from ...gpu.preflight import PROMPT_TOKENS_ESTIMATE
from .. import plots
from ..results import plain, run_shows, say, titled

COLORS = {"eagle3": "#d95f02", "dflash": "#7570b3", "dspark": "#1b9e77"}


def start() -> float:
    """The chapter's clock and the book's plot theme."""
    plots.set_theme()
    return time.perf_counter()


def _config() -> Qwen3Config:
    return Qwen3Config(**json.loads((loading.QWEN3_4B / "config.json").read_text()))


def _folders(kinds: Sequence[str]) -> dict[str, Any]:
    return {kind: loading.QWEN3_4B / loading.DRAFTER_IDS[kind].split("/")[1] for kind in kinds}


def say_requirements(drafters: Mapping[str, str], new_tokens: int = measure.PAPER_NEW_TOKENS) -> None:
    """The note a reader needs before running on a GPU, computed from the committed configs in
    data/qwen3_4b/ (nothing is loaded): GPU memory of the weights in bf16 and float32 plus one long
    request's KV cache, the download size of each model (bf16 safetensors, the drafters' files
    with their copies of the target's embedding and LM head), and the time per benchmark."""
    kinds = [k for k in loading.DRAFTER_IDS if k in drafters]
    config = _config()
    tokens = PROMPT_TOKENS_ESTIMATE + new_tokens
    table = memory.memory_table(config, _folders(kinds), torch.bfloat16, tokens)
    weights, kv = float(table["GiB"].iloc[:-1].sum()), float(table["GiB"].iloc[-1])
    copies = len(released_config.SHARED_KEYS) * config.vocab_size * config.hidden_size / 1e9  # in each drafter file
    billions = table.set_index("part")["parameters (B)"]
    sizes = {"Qwen3-4B": 2 * billions["target weights"]}  # bf16 safetensors: 2 bytes a parameter
    sizes.update({kind: 2 * (billions[f"{kind} drafter, own weights"] + copies) for kind in kinds})
    downloads = ", ".join(f"{name} {gb:.1f} GB" for name, gb in sizes.items())
    say(f"**Before you run, on a GPU.** GPU memory: the weights of Qwen3-4B and the {len(kinds)} drafters take "
        f"{weights:.1f} GiB in bf16 ({2 * weights:.1f} GiB in float32), and one request of {tokens} tokens adds "
        f"{kv:.2f} GiB of KV cache; `DTYPE = \"auto\"` picks bf16 from compute capability 8.0 and falls back to bf16 "
        "where float32 does not fit (a T4). Downloads from the hub, once, into its cache, in bf16 (a drafter's "
        f"file counted with its copies of the target's embedding and LM head, which some files leave out): "
        f"{downloads} (up to {sum(sizes.values()):.1f} GB in all).",
        "Time per benchmark: not measured yet (no run of the released weights is committed). After its first "
        "generations a run prints how long the rest will take on your GPU; the cost of a round on a GPU is measured "
        "without weights by `python -m dspark_lite.harness.gpu.costs_first`.",
        "The one setting to change for Table 1's prompts: `EVAL_FOLDER` (a clone of deepseek-ai/DeepSpec), or "
        "`DOWNLOAD_PROMPTS = True` where the hub is reachable. Left as they are, a GPU run stops in the setup "
        "cell, before loading anything, and says so; a CPU runs tiny random stand-ins at once.")


def describe_world(world: loading.World, study: Any, device: torch.device, measured: bool,
                   costs_measured: bool) -> float:
    """Print the loaded world (mode, GPU, dtype, sizes, sources), run the KV-cache self-check
    (`loading.check_cache`: it stops the run, naming the transformers version, if the cache
    misbehaves) and say what this world can measure; returns the check's total variation."""
    print(f"mode {world.mode} on {loading.gpu_name(device)} ({world.dtype}); gamma = {study.gamma}, T = {study.temperature}, "
          f"{study.new_tokens} new tokens per prompt (DeepSpec: {measure.PAPER_NEW_TOKENS}); end ids {world.eos_token_ids}")
    for role, source in world.sources.items():
        print(f"  {role}: {source}")
    drift = loading.check_cache(world)
    print(f"KV-cache self-check passed: cached and uncached next-token distributions differ by {drift:.2g} "
          "in total variation distance")
    if not costs_measured:
        print("\nNO GPU: tiny random models stand in for Qwen3-4B and the released drafters. What follows is the code "
              "path and the shapes it computes; no acceptance, calibration, speed or cost number is shown.")
    elif not measured:
        print("\nRANDOM WEIGHTS of Qwen3-4B's shape: the cost table, time per round and memory below are measurements; "
              "acceptance, calibration and speed-ups are not, and are not shown.")
    return drift


def show_released_configs() -> dict[str, dict[str, Any]]:
    """The loader's name table and the released drafters' configs as our loader reads them (built on
    the `meta` device: nothing is allocated); returns the config table's rows by drafter."""
    display(titled(pd.DataFrame(released_config.KEY_MAP, columns=["released prefix", "our prefix"]),
                   "the loader's name table: released weight prefixes and ours"))
    print("every other key keeps DeepSpec's name; shared with the target, checked when present, never loaded:",
          plain(list(released_config.SHARED_KEYS)))
    with torch.device("meta"):
        meta_target = Qwen3ForCausalLM(_config())
    rows = {}
    for kind, folder in _folders(loading.DRAFTER_IDS).items():
        drafter = checkpoints.build_from_config(folder, meta_target)  # Eagle3 or DSpark/DFlash, by its architecture
        shapes = checkpoints.expected_shapes(drafter)
        released = released_config.read_released_config(folder)  # one reader for every kind
        if released.kind == "eagle3":
            block, mask, head, confidence = f"chain of {released.gamma}", "-", "-", False
        else:
            block, mask, confidence = released.gamma, released.mask_token_id, released.confidence_head
            head = f"{released.head_type} r={released.head_rank}" if released.head_rank else "-"
        rows[kind] = {"ours": type(drafter).__name__, "gamma (block_size / ttt_length)": block,
                      "draft layers": released.num_draft_layers, "target_layer_ids": released.target_layer_ids,
                      "mask_token_id": mask, "head": head, "confidence head": confidence, "keys": len(shapes),
                      "parameters (B)": round(sum(torch.Size(s).numel() for s in shapes.values()) / 1e9, 3)}
    display(titled(pd.DataFrame(rows).rename_axis("released config"),  # one column a drafter: fits the page
                   "the released drafters' configs, as our loader reads them"))
    return rows


def describe_prompts(world: loading.World, prompts: Mapping[str, Sequence[str]], prompt_source: str, study: Any,
                     device: torch.device, measured: bool, costs_measured: bool) -> tuple[bool, str | None, list[str]]:
    """The prompts table, what the run is filed as, and the sentence saying what this run is;
    returns (comparable to the paper, the protocol it is filed under, its differences from DeepSpec's)."""
    counts = {name: len(p) for name, p in prompts.items()}
    comparable = measure.comparable_to_paper(world.mode, prompt_source)  # real weights on DeepSpec's prompts only
    protocol = measure.run_protocol(world.mode, prompt_source, counts, study.new_tokens, study.temperature, study.gamma)
    differences = measure.protocol_differences(world.mode, prompt_source, counts, study.new_tokens, study.temperature,
                                               study.gamma)
    display(titled(pd.DataFrame({"domain": {n: evalsets.domain_of(n) for n in prompts}, "prompts": counts,
                                 "DeepSpec's count": evalsets.DEEPSPEC_COUNTS}).rename_axis("benchmark"),
                   f"prompts per benchmark in this run ({prompt_source}), against DeepSpec's count"))
    gpu = loading.gpu_name(device)
    if not costs_measured:
        this_run = ("no GPU, so nothing on this page was measured. The chapter ran its whole code path on tiny random "
                    "stand-ins for the target and the drafters (written in the released on-disk format and read back by "
                    "the real loader); the page shows that path and the shapes of what it computes, and no acceptance, "
                    "calibration, speed or cost number, since random weights on a CPU make them meaningless.")
    elif not measured:
        this_run = (f"Qwen3-4B-shaped models with random weights on {gpu}: the cost table SPS(B), the engine's time per "
                    "round and peak memory below are measurements; acceptance, tau, calibration and speed-ups are not, "
                    "and are not shown.")
    elif not comparable:
        this_run = (f"Qwen3-4B and the released drafters on {gpu}, on {prompt_source} prompts, not DeepSpec's "
                    "benchmarks: the numbers below measure the real models, but none is set beside the paper's.")
    elif protocol == "subset":
        this_run = (f"Qwen3-4B and the released drafters on {gpu} ({world.dtype}), on a subset of DeepSpec's "
                    f"evaluation protocol ({'; '.join(differences)}): the measurements below stand beside the paper's "
                    "as a subset, not as Table 1.")
    else:
        this_run = (f"Qwen3-4B and the released drafters on {gpu} ({world.dtype}), under DeepSpec's full protocol "
                    f"({sum(counts.values())} prompts, {study.new_tokens} new tokens a prompt): the measurements below "
                    "stand beside the paper's Table 1.")
    say(f"**This run:** {this_run}")
    return comparable, protocol, differences


def show_table1(runs: Mapping[str, Any], prompts: Mapping[str, Any], prompt_source: str, study: Any, measured: bool,
                comparable: bool, protocol: str | None, differences: Sequence[str]) -> tuple[pd.DataFrame, float, Any]:
    """Table 1's tau per benchmark and drafter (beside the paper's for a comparable run) and its
    bar chart, or the table's shape for random weights; returns (tau, DSpark's macro gain over
    DFlash in %, the paper's table or None)."""
    table = measure.table1_frame(runs, compare=comparable)
    order = [evalsets.BENCHMARKS[n].column for n in prompts]
    tau = table.pivot(index="benchmark", columns="drafter", values="tau (ours)").loc[order]
    macro_gain = 100 * (tau["dspark"].mean() / tau["dflash"].mean() - 1) if {"dspark", "dflash"} <= set(tau) else np.nan
    paper = None
    if comparable:
        paper = pd.DataFrame({k: {evalsets.BENCHMARKS[n].column: v for n, v in loading.PAPER_TABLE1[k].items()}
                              for k in tau.columns if k in loading.PAPER_TABLE1}).loc[tau.index]
    if not measured:
        rounds = {kind: sum(run.acceptance.rounds for run in by_bench.values()) for kind, by_bench in runs.items()}
        print(f"ran {len(tau)} benchmarks x {len(tau.columns)} drafters ({', '.join(tau.columns)}) for {plain(rounds)} "
              f"rounds of gamma = {study.gamma} drafts; tau is a {tau.shape[0]} x {tau.shape[1]} table, not shown "
              "(random weights)")
        return tau, macro_gain, paper
    title = f"tau per benchmark at gamma = {study.gamma}, T = {study.temperature}, {study.new_tokens} new tokens"
    if comparable:
        ours = tau[paper.columns]
        label = "ours" if protocol == "table1" else "ours (subset)"
        display(titled(pd.concat({label: ours, "paper (Table 1)": paper, "difference %": 100 * (ours / paper - 1)},
                                 axis=1), title + ": ours against the paper's Table 1", 2))
    else:
        display(titled(tau.rename_axis(f"tau ({prompt_source} prompts: not Table 1)"), title, 2))
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    x, width = np.arange(len(tau)), 0.76 / len(tau.columns)
    for i, kind in enumerate(tau.columns):
        at = x + (i - (len(tau.columns) - 1) / 2) * width
        ax.bar(at, tau[kind], width * 0.95, label=f"{kind} (ours{'' if protocol == 'table1' else ', subset'})",
               color=COLORS.get(kind, "grey"))
        if comparable and kind in paper:
            ax.plot(at, paper[kind], "k_", ms=14, mew=2, label="paper's Table 1" if i == 0 else None)
    ax.set_xticks(x, tau.index)
    ax.set(xlabel="benchmark", ylabel="tau (tokens per round)", title=f"tau per benchmark ({study.new_tokens} new tokens a prompt)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    scope = f"; a subset: {'; '.join(differences)}" if protocol == "subset" else ""
    paper_gain = (f" (the paper: {100 * (paper['dspark'].mean() / paper['dflash'].mean() - 1):+.1f}%)"
                  if comparable and {"dspark", "dflash"} <= set(paper) else "")
    say(f"Measured at gamma = {study.gamma}, T = {study.temperature}, {study.new_tokens} new tokens a prompt (the paper's "
        f"Table 1: {measure.PAPER_NEW_TOKENS}), prompts from {prompt_source}{scope}. DSpark over DFlash, macro average "
        f"of tau: {macro_gain:+.1f}%{paper_gain}.")
    return tau, macro_gain, paper


def show_figure2(by_domain: Mapping[str, Any], study: Any, measured: bool, comparable: bool, prompt_source: str) -> None:
    """Figure 2: conditional acceptance by position per domain and drafter, with the paper's stated
    ends for a comparable run; the rounds it rests on for random weights."""
    if not measured:
        per_domain = {kind: {d: a.rounds for d, a in dom.items()} for kind, dom in by_domain.items()}
        print(f"conditional acceptance and prefix survival: {len(evalsets.DOMAINS)} domains x {study.gamma} positions "
              f"per drafter, from these rounds per domain: {plain(per_domain)}; values not shown (random weights)")
        return
    style = lambda kind: {"dflash": "--", "dspark": "-"}.get(kind, ":")
    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True, layout="constrained")
    for ax, domain in zip(axes, evalsets.DOMAINS):
        for kind in by_domain:
            curve = by_domain[kind][domain].conditional
            ax.plot(range(1, len(curve) + 1), [np.nan if c is None else c for c in curve], style(kind), marker="o", ms=3,
                    color=plots.DOMAIN_COLORS[domain])
            first, last = loading.PAPER_FIGURE2.get((kind, domain), (None, None))
            for k, value in ((1, first), (study.gamma, last)):
                if comparable and value is not None:
                    ax.plot(k, value, "kx", ms=7)
        ax.set(title=domain, xlabel="position k", ylim=(0, 1.02), ylabel="conditional acceptance")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = [Line2D([], [], color="grey", ls=style(kind), marker="o", ms=3, label=kind) for kind in by_domain]
    if comparable:
        handles.append(Line2D([], [], color="k", ls="", marker="x", ms=7, label="paper (Qwen3-4B)"))
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    plt.show()
    if not comparable:
        print(f"not set beside the paper's Figure 2: {prompt_source} prompts")


def show_calibration(cal: measure.Calibration, study: Any, measured: bool, comparable: bool) -> dict[str, float]:
    """Figure 5's threshold sweep and Figure 6's reliability at one position, raw and after STS;
    returns the mean ECE of a_k, raw and STS."""
    records, sweep, ece = cal.records, cal.sweep, cal.ece
    rates = pd.DataFrame({d: s["acceptance_rate"] for d, s in sweep.items()})
    print(f"{len(records)} full blocks ({plain(records.counts())}); {len(cal.cal_idx)} fit STS, {len(cal.test_idx)} test it")
    if not measured:
        print(f"threshold sweep: {rates.shape[1]} domains x {rates.shape[0]} thresholds; STS: "
              f"{len(cal.sts.temperatures_)} temperatures, one per position; values not shown (random weights)")
        return ece
    display(titled(rates.T, "share of verified drafts accepted, per domain and static threshold (Figure 5)", 3))
    fig, axes = plt.subplots(2, 1, figsize=(6, 6.4), layout="constrained")
    for domain, s in sweep.items():
        axes[0].plot(s.index, s["acceptance_rate"], "o-", ms=3, color=plots.DOMAIN_COLORS.get(domain), label=domain)
    axes[0].set(xlabel="static threshold on c_k", ylabel="acceptance rate", title="Figure 5: threshold sweep", ylim=(0, 1.02))
    axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    survived = calibration.survival_targets(records.accepted[cal.test_idx], study.gamma)
    k = min(3, study.gamma)
    for name, color in (("raw", "#de2d26"), ("STS", "#31a354")):
        a_k = survival(cal.calibrated[name])[:, k - 1]
        rel = calibration.reliability_curve(a_k, survived[:, k - 1], bins=10)
        axes[1].plot(rel.mean_predicted, rel.observed_frequency, "o-", color=color, ms=3, label=f"{name}: ECE {ece[name]:.3f}")
    axes[1].plot([0, 1], [0, 1], ":", color="grey")
    axes[1].set(xlabel=f"predicted survival a_{k}", ylabel="observed survival", title=f"Figure 6: reliability at position {k}")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    say(f"The mean ECE of a_k falls from {ece['raw']:.3f} (raw) to {ece['STS']:.3f} after STS"
        + (" (the paper: 3-8% raw, about 1% after STS)." if comparable else "."))
    return ece


def show_race(speed: pd.DataFrame, overheads: pd.DataFrame, race_prompts: Sequence[str], study: Any, measured: bool,
              costs_measured: bool) -> None:
    """The wall-clock race (every decoder for real weights, target-only for random ones) and where a
    round's time goes, per drafter."""
    if measured:
        display(titled(speed, "wall clock on the same prompts: tokens per second of each decoder", 3))
    elif costs_measured:
        display(titled(speed.loc[[n for n in speed.index if n.startswith("target only")], ["tokens/s", "tokens"]],
                       "wall clock of the target-only decoders (random weights)", 1))
        print("the speculative rows are not shown: with random weights their speed rests on meaningless acceptance")
    else:
        print(f"raced {len(speed)} decoders ({', '.join(speed.index)}) on {len(race_prompts)} prompt(s), up to "
              f"{study.race_new_tokens} new tokens each; speeds not shown (tiny random models on a CPU)")
    if costs_measured:
        display(titled(overheads.rename_axis("engine time per round (ms) and share (%), Table 1 runs"),
                       "where a round's time goes in our engine, per drafter", 2))
    else:
        print(f"engine time per round, split into {', '.join(measure.PHASES)}: a {overheads.shape[0]} x "
              f"{overheads.shape[1]} table (drafters x columns), not shown")


def show_costs(curves: Mapping[int, Any], aggregate: pd.DataFrame, gain: pd.DataFrame, schedulers: Sequence[str],
               cal: measure.Calibration, device: torch.device, measured: bool, costs_measured: bool) -> None:
    """The measured SPS(B) per R (a GPU's), and the simulated serving of each scheduler (real
    weights only: random weights' acceptance would make it meaningless)."""
    if measured:
        display(titled(aggregate.pivot(index="R", columns="scheduler", values="throughput"),
                       "simulated throughput (tokens/s) of each scheduler at each R, GPU cost table", 1))
        display(titled(gain, "best throughput at per-user speed >= SLA, against MTP-1, GPU cost table", 2))
    panels = ["costs"] * costs_measured + ["serving"] * measured
    if panels:
        fig, axes = plt.subplots(len(panels), 1, figsize=(6, 3.4 * len(panels)), layout="constrained", squeeze=False)
        axes = dict(zip(panels, axes[:, 0]))
        if "costs" in axes:
            for R, c in curves.items():
                axes["costs"].plot(c.sizes, 1e3 * np.array(c.meta["seconds_per_step"]), "o-", ms=3, label=f"R = {R}")
            axes["costs"].set(xlabel="batch tokens B", ylabel="ms per forward step",
                              title=f"SPS(B) measured on {loading.gpu_name(device)}")
            axes["costs"].xaxis.set_major_locator(MaxNLocator(integer=True))
            axes["costs"].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        if "serving" in axes:
            for name, group in aggregate.groupby("scheduler"):
                axes["serving"].plot(group["per_user"], group["throughput"], "o-", ms=3, label=name)
            axes["serving"].set(xlabel="tokens/s per user", ylabel="tokens/s (all users)",
                                title="simulated serving (Figure 7's axes)")
            axes["serving"].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
        plt.show()
    if not costs_measured:
        print(f"profiled SPS(B) at R = {sorted(curves)} over {[len(c.sizes) for c in curves.values()]} batch sizes B; "
              f"simulated {len(schedulers)} schedulers ({', '.join(schedulers)}) at each R on {len(cal.test_idx)} "
              "replayed blocks; values not shown (a tiny random model on a CPU)")
    elif not measured:
        print("the simulator's throughput is not shown: it replays the random drafter's acceptance")


def show_memory(rows: Mapping[str, Mapping[str, Any]], prompt_tokens: int = 256) -> pd.DataFrame:
    """GPU memory of the target and the drafters in bf16, from the configs, and what the section's
    prose refers to: the released files' parameters, their copies of the target's embedding and LM
    head, a 64-prompt prefill's full logits, the profiler's share of free memory; returns the table."""
    config = _config()
    gib = memory.memory_table(config, _folders(loading.DRAFTER_IDS), torch.bfloat16,
                              prompt_tokens + measure.PAPER_NEW_TOKENS)
    display(titled(memory.memory_display(gib).rename_axis("GPU memory in bf16, from the configs"),  # "n/a": not a weight
                   "memory of the target and the drafters, computed from the configs (a request of "
                   f"{prompt_tokens + measure.PAPER_NEW_TOKENS} tokens)"))
    weights_gib = gib["GiB"].iloc[:-1].sum()  # every row but the KV cache
    profile_64 = memory.profile_step_bytes(config, 64, 7, 256, 2) / 2**30
    with torch.device("meta"):
        shapes = checkpoints.expected_shapes(checkpoints.build_from_config(_folders(["dspark"])["dspark"],
                                                                          Qwen3ForCausalLM(config)))
    shared = sum(torch.Size(s).numel() for k, s in shapes.items() if k in released_config.SHARED_KEYS) / 1e9
    fraction = inspect.signature(memory.affordable_concurrencies).parameters["fraction"].default
    say(f"The weights of the target and the three drafters take {weights_gib:.1f} GiB in bf16 (float32: "
        f"{2 * weights_gib:.1f} GiB); the cost profile at R = 64 needs about {profile_64:.1f} GiB more. A released "
        f"drafter file holds {rows['dspark']['parameters (B)']:.3f}B (DSpark) or {rows['dflash']['parameters (B)']:.3f}B "
        f"(DFlash) parameters, of which {shared:.2f}B are copies of the target's embedding and LM head. A prefill of 64 "
        f"prompts of 256 tokens would materialise {64 * 256 * config.vocab_size * 2 / 2**30:.1f} GiB of full-vocabulary "
        f"logits in bf16; the profiler keeps the concurrencies whose footprint fits in {fraction:.0%} of free memory.")
    return gib


def verdict_rows(world: loading.World, prompt_source: str, comparable: bool, protocol: str | None, study: Any,
                 tau: pd.DataFrame, paper: Any, macro_gain: float, by_domain: Mapping[str, Any],
                 ece: Mapping[str, float]) -> Any:
    """The verdict box: the paper's claims for Qwen3-4B and what this run measured of them (only a
    run of the released weights on DeepSpec's prompts tests them)."""
    why_not = {"smoke": "no GPU: not measured", "random-weights": "random weights: not measured"}.get(
        world.mode, f"{prompt_source} prompts: not compared")
    paper_tau = pd.DataFrame(loading.PAPER_TABLE1)
    paper_gain = 100 * (paper_tau["dspark"].mean() / paper_tau["dflash"].mean() - 1)
    paper_chat = loading.PAPER_FIGURE2[("dflash", "chat")]
    claims = [("DSpark accepts more tokens per round than DFlash on every benchmark (Table 1)", f"{paper_gain:+.1f}% macro"),
              ("our DSpark tau is within 10% of Table 1's on every benchmark", f"{paper_tau['dspark'].min():.2f} to "
               f"{paper_tau['dspark'].max():.2f} ({measure.PAPER_NEW_TOKENS} new tokens)"),
              ("DFlash's conditional acceptance falls along the block on chat (Figure 2)",
               f"{paper_chat[0]:.2f} -> {paper_chat[1]:.2f}"),
              ("STS calibrates the confidence head (Figure 6)", "mean ECE 3-8% -> about 1%")]
    if comparable:
        wins = int((tau["dspark"] > tau["dflash"]).sum())
        off = (100 * (tau["dspark"] / paper["dspark"] - 1)).abs()
        chat = [c for c in by_domain["dflash"]["chat"].conditional if c is not None]
        scope = "" if protocol == "table1" else f" (subset: {study.new_tokens} new tokens)"
        measured = [(f"{macro_gain:+.1f}% macro; ahead on {wins} of {len(tau)}{scope}", wins == len(tau)),
                    (f"largest difference {off.max():.1f}% ({study.new_tokens} new tokens)", bool(off.max() <= 10)),
                    (f"{chat[0]:.2f} -> {chat[-1]:.2f}" if chat else "no chat rounds", bool(chat) and chat[-1] < chat[0]),
                    (f"{100 * ece['raw']:.1f}% -> {100 * ece['STS']:.1f}%", bool(ece["STS"] < ece["raw"]))]
    else:
        measured = [(why_not, None)] * len(claims)
    return run_shows([(claim, ref, text, None if ok is None else bool(ok))
                      for (claim, ref), (text, ok) in zip(claims, measured)])
