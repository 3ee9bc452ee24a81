"""Chapter 06b's bookkeeping (serving: cost tables, the simulator, real batched steps): the run's
setup, the figures' plumbing, the sentences each measuring cell says about this run (`say`), the
rows of the verdict box and the result file. The chapter's visible code is the method and its
measurement; everything here only shows, words or writes what that code computed.
"""
from __future__ import annotations

import inspect
import itertools
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ....runtime import device_generator
from ....speculative import target_hidden, verify_block
from ....stepcurve import StepCurve
from ...result_files import results_dir, save_result
from ...serving import engines, simulator
from .. import results, verdicts
from ..results import say
from . import start

PAPER_SLA_GAIN = 51.0  # the smaller of the paper's two gains over MTP-1 (Flash +51%, Pro +52%), Figure 7
GLOSSARY = "92_glossary.md"
_STARTED: list[float] = []  # when `setup` ran: the chapter's wall time goes into its result file


def _default(function: Any, parameter: str) -> Any:
    return inspect.signature(function).parameters[parameter].default


def setup(profile_name: str, device_name: str, seed: int) -> tuple[Any, Any, Any, Any]:
    """The chapter's clock, then the book's setup (`pages.start`): (profile, device, generator seeded
    with `seed`, the toy world); the cell's first output says where the run is."""
    _STARTED[:] = [time.perf_counter()]
    return start(profile_name, device_name, seed)


def tables_folder() -> Path:
    """Where the chapter writes its cost tables: `tables/` beside its results (created)."""
    folder = results_dir() / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ------------------------------------------------------------------------------------ 6b.1 cost tables


def show_step_times(measured: Mapping[int, StepCurve], table_path: Path, gamma: int,
                    label: str) -> tuple[dict[int, np.ndarray], dict]:
    """Say where the profiled tables went and show each R's step time at its two ends. Returns
    (seconds per step at each profiled size, by R; the profile's provenance)."""
    from IPython.display import display

    seconds = {R: np.array(curve.meta["seconds_per_step"]) for R, curve in measured.items()}
    meta = measured[min(measured)].meta
    print(f"saved {Path(table_path).name}: one table for each R in {sorted(measured)}, "
          f"{sum(map(len, seconds.values()))} sizes in all; "
          f"{meta['device']} ({meta['cpu']}), {meta['threads']} threads, torch {meta['torch']}")
    frame = pd.DataFrame({R: {"B = R (ms)": 1e3 * t[0], f"B = {gamma + 1}R (ms)": 1e3 * t[-1], "time ratio": t[-1] / t[0]}
                          for R, t in seconds.items()}).T.rename_axis("R")
    display(results.titled(frame, f"time of a forward step at each R, anchors only against whole blocks, {label} table", 2))
    return seconds, meta


def show_fitted_lines(curves: Mapping[int, StepCurve], label: str) -> None:
    """The straight line a + b B fitted to each R's step times (`StepCurve.affine`), as a table."""
    from IPython.display import display

    frame = pd.DataFrame({R: {"fixed part a (ms)": 1e3 * c.meta["fixed_seconds"],
                              "per token b (us)": 1e6 * c.meta["seconds_per_token"], "R² of the line": c.meta["r2"]}
                          for R, c in curves.items()}).T.rename_axis("R")
    display(results.titled(frame, f"step time fitted as a + b B at each R, {label} table", 3))


def plot_cost_tables(measured: Mapping[int, StepCurve], seconds: Mapping[int, np.ndarray],
                     fitted: Mapping[int, StepCurve], synthetic: StepCurve, device_type: str) -> None:
    """The cost-table figure: measured step times (dots) and fitted lines per R, then every table's
    SPS(B) / SPS(1) beside the synthetic GPU-like one."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(2, 1, figsize=(7, 6.4), layout="constrained")
    palette = sns.color_palette("viridis", len(fitted))
    for color, (R, curve) in zip(palette, fitted.items()):
        axes[0].plot(measured[R].sizes, 1e3 * seconds[R], "o", ms=3, color=color)
        b = np.arange(curve.min_batch, curve.max_batch + 1)
        axes[0].plot(b, 1e3 / curve.sps(b), color=color, label=f"R = {R}")
        axes[1].plot(b, curve.sps(b) / synthetic.sps(1), color=color)
    axes[0].set(ylabel="ms per forward step", title=f"measured on {device_type} (dots), fitted lines")
    b = np.arange(1, synthetic.max_batch + 1)
    axes[1].plot(b, synthetic.sps(b) / synthetic.sps(1), color="#7570b3", ls="--",
                 label=f"synthetic GPU-like (knee {synthetic.meta['knee']})")
    axes[1].set(ylabel="SPS(B) / SPS(1)", title="measured tables (one per R), synthetic table")
    for ax in axes:
        ax.set(yscale="log", xlabel="batch tokens B")
        ax.set_xscale("log", base=2)
    handles, labels = (sum(pair, []) for pair in zip(*(ax.get_legend_handles_labels() for ax in axes)))
    fig.legend(handles, labels, fontsize=9, loc="outside right upper")
    plt.show()


def write_engine_tables(curves: Mapping[int, StepCurve], folder: Path) -> tuple[dict[int, Path], dict[int, Path]]:
    """Each R's fitted table as SGLang's SPS table and TensorRT-LLM's cost curve (ms per step), in
    `folder`; says what it wrote. Returns (SGLang files, TensorRT-LLM files), by R."""
    sps_files = {R: engines.write_json(engines.sglang_sps_table(c), folder / f"sglang_sps_R{R}.json")
                 for R, c in curves.items()}
    print(f"wrote {len(sps_files)} SGLang SPS tables ({engines.SGLANG_SPS_FLAG}), one per R: "
          + ", ".join(f"R = {R}: B {c.min_batch}..{c.max_batch}" for R, c in curves.items()))
    cost_files = {R: engines.write_json(engines.trtllm_cost_table(c), folder / f"trtllm_cost_R{R}.json")
                  for R, c in curves.items()}
    print(f"wrote {len(cost_files)} TensorRT-LLM cost curves ({engines.TRTLLM_SPS_FIELD}), one per R, in ms per step")
    return sps_files, cost_files


def read_cost_file(path: Path) -> dict:
    """A written engine file, read back (the chapter checks it against the table)."""
    return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------ 6b.3 the simulator's figures


def _log_axes(ax: Any) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis in (ax.xaxis, ax.yaxis):  # labels at 1, 2 and 5 times powers of 10: minor labels of a log axis overlap
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def plot_figure7(sims: Mapping[str, pd.DataFrame], gains: Mapping[str, pd.DataFrame], names: Mapping[str, str],
                 colors: Mapping[str, str]) -> None:
    """Figure 7's analog, one panel a cost table: throughput against per-user speed for every
    scheduler, the two SLAs as vertical lines with DSpark's gain over MTP-1 beside each."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(sims), 1, figsize=(7, 3.5 * len(sims)), layout="constrained")
    for ax, (table, df) in zip(np.atleast_1d(axes), sims.items()):
        for name in names:
            rows = df[df["scheduler"] == name].sort_values("R")
            ax.plot(rows["per_user"], rows["throughput"], "o-", ms=3, color=colors[name], label=names[name],
                    lw=2.2 if name == "dspark" else 1.2)
        for i, row in enumerate(gains[table].itertuples()):
            ax.axvline(row.per_user_sla, color="grey", ls=":", lw=1)
            if np.isfinite(row.dspark):  # beside its SLA line, near the top, one line lower per SLA: never on one line
                ax.annotate(f"{row.gain_pct:+.0f}% vs MTP-1", (row.per_user_sla, 0.95 - 0.09 * i),
                            xycoords=("data", "axes fraction"), xytext=(4, 0), textcoords="offset points", va="top",
                            fontsize=9, bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))
        ax.set(xscale="log", yscale="log", xlabel="per-user speed (tokens/s per request)",
               ylabel="throughput (tokens/s)", title=f"{table} table")
        low, high = df["throughput"].min(), df["throughput"].max()
        if high <= 1.01 * low:  # one throughput for every point (tiny profiles): give the log axis a range
            ax.set_ylim(low / 2, high * 2)
        _log_axes(ax)
    fig.legend(*np.atleast_1d(axes)[0].get_legend_handles_labels(), fontsize=9, loc="outside right upper")
    plt.show()


def show_sla_gains(gains: Mapping[str, pd.DataFrame], sla_R: Sequence[int]) -> None:
    """Each table's best throughput at per-user speed >= each SLA, DSpark against MTP-1."""
    from IPython.display import display

    columns = {"R_of_mtp1": "R of MTP-1", "per_user_sla": "SLA (tokens/s per user)", "dspark": "DSpark (tokens/s)",
               "mtp1": "MTP-1 (tokens/s)", "gain_pct": "DSpark's gain (%)"}
    for table, gain in gains.items():
        display(results.titled(gain[list(columns)].rename(columns=columns),
                               f"{table}: best throughput at per-user speed >= SLA (SLAs = MTP-1's speed at R = {list(sla_R)})", 1))


def say_sla_gains(gains: Mapping[str, pd.DataFrame], measured: str, target: Any) -> dict[str, Any]:
    """Say DSpark's gains over MTP-1 at the two SLAs on every table, against the paper's sign and
    size (within a factor of two). Returns the findings the verdict box reads."""
    every_gain = np.concatenate([g["gain_pct"].to_numpy(float) for g in gains.values()])
    sign = bool(np.isfinite(every_gain).all() and (every_gain > 0).all())
    size = bool(np.isfinite(every_gain).all() and (every_gain >= PAPER_SLA_GAIN / 2).all())
    parameters = sum(p.numel() for p in target.parameters())
    others = [t for t in gains if t != measured]
    gains_text = lambda t: " and ".join(f"{g:+.0f}%" for g in gains[t]["gain_pct"])  # noqa: E731
    tolerance = 100 * _default(simulator.sla_gain, "tolerance")
    say(f"**This run.** DSpark's gains over MTP-1 at the two SLAs "
        f"({' and '.join(f'{s:.0f} tokens/s' for s in gains[measured]['per_user_sla'])} per user) are "
        f"{gains_text(measured)} on the {measured} table"
        + "".join(f" and {gains_text(t)} on the {t} one" for t in others)
        + f", with a {parameters / 1e6:.2f}M-parameter toy target (a speed within {tolerance:g}% of an SLA, the "
        "simulated speeds' own noise, counts as meeting it). Against the paper's +51% / +52%, "
        + verdicts.either(sign, "the sign is the paper's", "the sign is not the paper's at every SLA") + ", and "
        + verdicts.either(size, "the size is within a factor of two of it",
                          f"the size is not: at most {np.nanmax(every_gain):+.0f}%, against the "
                          f"{PAPER_SLA_GAIN / 2:+.1f}% that a factor of two below the paper's would need") + ".")
    return {"every_gain": every_gain, "size_reproduced": size}


def plot_figure8(sims: Mapping[str, pd.DataFrame], names: Mapping[str, str], colors: Mapping[str, str]) -> None:
    """Figure 8's analog, one panel a cost table: each scheduler's verification budget against R
    (two standard errors as bars), the paper's band of 4-6 tokens shaded."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(sims), 1, figsize=(7, 3.1 * len(sims)), sharex=True, layout="constrained")
    for ax, (table, df) in zip(np.atleast_1d(axes), sims.items()):
        for name in names:
            rows = df[df["scheduler"] == name].sort_values("R")
            ax.errorbar(rows["R"], rows["budget"], yerr=2 * rows["budget_se"].fillna(0), fmt="o-", ms=3, capsize=2,
                        color=colors[name], label=names[name], lw=2.2 if name == "dspark" else 1.2)
        ax.axhspan(4, 6, color="grey", alpha=0.12, label="paper: about 4-6 at moderate load")
        ax.set(xlabel="concurrency R", title=f"{table} table", ylabel="budget (tokens/request)")
        ax.set_xscale("log", base=2)
    fig.legend(*np.atleast_1d(axes)[-1].get_legend_handles_labels(), fontsize=9, loc="outside right upper")
    plt.show()


def say_versus_and_budget(sims: pd.DataFrame, replays: pd.DataFrame, versus: pd.DataFrame, budget: pd.DataFrame,
                          trend: verdicts.Interval, lead: pd.DataFrame, names: Mapping[str, str],
                          baselines: Sequence[str]) -> dict[str, Any]:
    """Say, for the measured table, how DSpark's budget moves with R and whether it keeps up with the
    best load-blind baseline, and which baseline comes closest (tied within the replays' noise from
    which R on). Returns the findings the verdict box reads."""
    at_least_best = bool(versus["at least the best, within noise"].all())
    behind_at = [int(R) for R in versus.index[~versus["at least the best, within noise"].astype(bool)]]
    # Tied with DSpark at some R: the lead lies inside its noise (two standard errors across replays).
    ties = {names[b]: simulator.lead_with_noise(sims, replays, b)["tie"] for b in baselines}
    within_from = {b: next((int(R) for R in tie.index if tie.loc[tie.index >= R].all()), None) for b, tie in ties.items()}
    closest = sorted(lead.columns, key=lambda b: (within_from[b] is None, within_from[b] or 0, lead[b].abs().max()))[0]
    tie_from = within_from[closest]  # None: behind beyond the noise at the highest load
    margin = 100 * _default(simulator.versus_best_baseline, "min_margin")
    say(f"**This run.** On the measured table DSpark's budget {verdicts.slope_words(trend)} with R (fitted slope "
        f"{trend.estimate:+.2f} tokens per request per doubling, interval {trend.low:+.2f} to {trend.high:+.2f}), "
        f"from {float(budget['budget'].iloc[0]):.2f} tokens per request at the lowest load to "
        f"{float(budget['budget'].iloc[-1]):.2f} at the highest, and DSpark "
        + verdicts.either(at_least_best, "matches or beats the best baseline at every R",
                          "falls behind the best baseline, beyond noise, at R = " + ", ".join(map(str, behind_at)))
        + f" (a lead under {margin:g}% counts as a tie). The fixed block, the static thresholds and MTP-1 do not "
        f"read the load; the closest of them, *{closest}*, is at most {lead[closest].abs().max():.1f}% away from "
        "DSpark at any R, and "
        + verdicts.either(tie_from is not None,
                          f"tied with DSpark (within the replays' noise) at every R >= {tie_from} (at most "
                          f"{lead.loc[lead.index >= (tie_from or 0), closest].abs().max():.2f}% apart there)",
                          "behind DSpark beyond the replays' noise at the highest load") + ".")
    return {"at_least_best": at_least_best}


def say_calibration(raw_vs_sts: pd.DataFrame, inputs: pd.DataFrame) -> None:
    """Say how much STS calibration moved DSpark's throughput and budget, beside the head's ECE."""
    gain = raw_vs_sts["calibration gain %"]
    ece = inputs.loc[["mean ECE of a_k, raw", "mean ECE of a_k, STS"]]
    budget_moved = float((raw_vs_sts["budget, STS"] - raw_vs_sts["budget, raw"]).abs().max())
    say(f"**This run.** Calibration changes DSpark's throughput by {float(gain.min()):+.2f}% to "
        f"{float(gain.max()):+.2f}% across the loads, so on this run it "
        + verdicts.either(gain.abs().max() < 1, "hardly matters here: every change is under 1%",
                          f"matters here: up to {gain.abs().max():.1f}% at R = {int(gain.abs().idxmax())}")
        + f". The head's mean ECE of $a_k$ was {ece.iloc[0].min():.3f} to {ece.iloc[0].max():.3f} per domain before "
        f"[**STS**]({GLOSSARY}) and {ece.iloc[1].min():.3f} to {ece.iloc[1].max():.3f} after (section 6b.2). Here it "
        f"moved DSpark's verification budget by at most {budget_moved:.2f} tokens per request at any R.")


def say_knee(shape: bool, lead: pd.Series) -> None:
    """Say whether DSpark's budget follows the synthetic table's knee and how far the best
    load-blind baseline trails it there."""
    say("**This run.** On the synthetic GPU-like table, whose cost per token jumps at the knee, "
        + verdicts.either(shape, "DSpark sends the whole block while R(gamma + 1) fits under the knee and less past "
                                 "it (the shape of Figure 8)", "DSpark's budget does not follow the knee exactly on this run")
        + ", and "
        + verdicts.either(lead.max() > 1, f"no load-blind baseline follows the knee: the best of them trails DSpark by "
                                          f"up to {lead.max():.1f}% (at R = {int(lead.idxmax())})",
                          f"the best load-blind baseline stays within {lead.abs().max():.1f}% of DSpark at every R")
        + ".")


# -------------------------------------------------------------------------------- 6b.4 the load sweep


def plot_load_sweep(load_agg: Mapping[str, pd.DataFrame], crossing: Mapping[str, int | None],
                    names: Mapping[str, str]) -> None:
    """Throughput over no speculation against R, one panel a table, the fixed block's crossing marked."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(load_agg), 1, figsize=(6.5, 2.9 * len(load_agg)), layout="constrained", sharex=True)
    for ax, (table, agg) in zip(np.atleast_1d(axes), load_agg.items()):
        tp = agg.pivot(index="R", columns="scheduler", values="throughput")
        for name in names:
            ax.plot(tp.index, tp[name] / tp["none"], marker="o", ms=3, label=names[name], ls="--" if name == "none" else "-")
        if crossing[table] is not None:
            ax.axvline(crossing[table], color="grey", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set(xlabel="concurrency R", ylabel="throughput / no speculation", title=f"{table} table")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    plt.show()


def say_load_sweep(crossing: Mapping[str, int | None], above: Mapping[str, bool], gamma: int) -> None:
    """Say, per table, from which R the fixed block falls below no speculation and whether DSpark
    stays at or above it."""
    say(*[f"**This run, {table} table.** The fixed block (gamma = {gamma}) falls below no speculation "
          f"{verdicts.from_R(crossing[table])} (beyond the replays' noise), and DSpark "
          + verdicts.either(above[table], "stays at or above it at every R", "falls below it at some R") + "."
          for table in crossing])


# ------------------------------------------------------------------------------- 6b.5 real batched steps


def draft_requests(world: Any, drafter: Any, target: Any, requests: int, domains: Sequence[str], gamma: int,
                   layer_ids: Sequence[int], generator: Any) -> tuple[list, list]:
    """R held-out prompts from the domains in turn, each drafted once (one block of `gamma`) by
    `drafter` from its prompt, the last token being the anchor. Returns (contexts, drafts)."""
    device = next(target.parameters()).device
    contexts, drafts = [], []
    for r in range(requests):
        prompts = world.eval_prompts(domains[r % len(domains)])
        ids = world.encode_prompt(prompts[(r // len(domains)) % len(prompts)]).to(device)
        drafter.start(ids[:-1], target_hidden(target, ids, layer_ids)[:-1])
        contexts.append(ids)
        drafts.append(drafter.draft(ids, gamma, 1.0, generator))
    return contexts, drafts


def one_request_logits(target: Any, contexts: Sequence, sent: Sequence) -> list:
    """The target's logits over each request's block, one request per forward."""
    import torch

    with torch.inference_mode():
        return [target(input_ids=torch.cat([c, d.tokens])[None]).logits[0, -(1 + d.gamma):] for c, d in zip(contexts, sent)]


def one_request_verdicts(alone: Sequence, sent: Sequence, seed: int, device: Any) -> list:
    """`verify_block` on each request's own logits, one generator seeded with `seed` for all."""
    return [verify_block(rows, d, 1.0, g) for rows, d, g in zip(alone, sent, itertools.repeat(device_generator(seed, device)))]


def fastest_per_R(real: pd.DataFrame, tie: float) -> tuple[dict[str, pd.Series], dict[int, bool]]:
    """The fastest scheduler at each R as the table predicted it and as each real kernel ran it,
    and whether the table's pick is right at R: its real (varlen) throughput within the tie gap of
    the real fastest's."""
    fastest = {kernel: real.loc[real.groupby("R")[kernel].idxmax(), ["R", "scheduler"]].set_index("R")["scheduler"]
               for kernel in ("predicted (table)", "real, varlen kernel", "real, padded")}
    right = {int(R): bool(group.set_index("scheduler").loc[fastest["predicted (table)"][R], "real, varlen kernel"]
                          >= (1 - tie) * group["real, varlen kernel"].max()) for R, group in real.groupby("R")}
    return fastest, right


def say_real_steps(real: pd.DataFrame, varlen: pd.DataFrame, fastest: Mapping[str, pd.Series], pick_right: Mapping[int, bool],
                   agrees: bool, flipped_padded: Sequence[str], tie: float, names: Mapping[str, str]) -> dict[str, Any]:
    """Say how the real batched steps ranked the schedulers against the table, which was fastest,
    and what padding cost DSpark and the fixed block at the largest R. Returns the findings the
    verdict box reads."""
    only_mtp1 = bool(len(varlen)) and all("mtp1" in p for p in varlen["pair"])
    R_max = int(real["R"].max())
    at_max = real[real["R"] == R_max].set_index("scheduler")
    change = 100 * (at_max["real, padded"] / at_max["real, varlen kernel"] - 1)
    pad_dspark, pad_fixed = float(change["dspark"]), float(change["fixed"])
    if pad_dspark < 0 and pad_dspark < pad_fixed:
        pad = "so padding cost DSpark more than the fixed block, as predicted: a confidence-scheduled server wants variable-length attention"
    elif pad_dspark < 0:
        pad = "so padding slowed DSpark, but no more than the fixed block: the predicted extra cost did not show on this run"
    else:
        pad = ("so the padded steps ran faster, not slower: on this machine a dense padded batch outran our variable-length "
               "kernel, and the cost padding should add did not show" + verdicts.either(
                   pad_dspark < pad_fixed, " beyond DSpark gaining less from it than the fixed block, which pads nothing", ""))
    wrong = [R for R, ok in pick_right.items() if not ok]
    fastest_text = "; ".join(
        f"at R = {R}, {names[fastest['real, varlen kernel'][R]]} with the varlen kernel and {names[fastest['real, padded'][R]]} "
        f"right-padded (the table predicted {names[fastest['predicted (table)'][R]]})" for R in fastest["real, varlen kernel"].index)
    say(f"**This run.** Of the {len(varlen)} pairs of schedulers that the cost model separates by more than {100 * tie:g}%, "
        f"the real varlen steps put {int(varlen['same order'].sum())} in the same order (the table above lists them); "
        + verdicts.either(only_mtp1, "every one of them pairs MTP-1 with another scheduler: the table separates no two of the others",
                          "they include pairs without MTP-1")
        + f". The fastest scheduler in this run's real steps was {fastest_text}, so "
        + verdicts.either(not wrong, "the table's fastest scheduler was the real fastest, within that gap, at every R",
                          "the table's fastest scheduler was not the real fastest at R = " + ", ".join(map(str, wrong))
                          + verdicts.either(agrees, ": among the schedulers it cannot separate, it does not predict which wins", ""))
        + ".",
        f"At R = {R_max} padding changed DSpark's real step throughput by {pad_dspark:+.1f}% and the fixed block's by "
        f"{pad_fixed:+.1f}%, {pad}. Of the separated pairs, "
        + verdicts.either(not flipped_padded, "the padded kernel flipped none of them",
                          f"the padded kernel flipped {len(flipped_padded)} of them ({', '.join(flipped_padded)})") + ".")
    return {"only_mtp1": only_mtp1}


def plot_real_steps(real: pd.DataFrame, schedulers: Sequence[str], names: Mapping[str, str]) -> None:
    """Tokens/s of the real steps, one panel an R: the table's prediction, the varlen kernel, padded."""
    import matplotlib.pyplot as plt

    Rs = sorted(real["R"].unique())
    fig, axes = plt.subplots(len(Rs), 1, figsize=(7, 2.8 * len(Rs) + 0.6), layout="constrained")
    for ax, (R, group) in zip(np.atleast_1d(axes), real.groupby("R")):
        at, x = group.set_index("scheduler").loc[list(schedulers)], np.arange(len(schedulers))
        for k, (column, color) in enumerate([("predicted (table)", "#bdbdbd"), ("real, varlen kernel", "#1b9e77"),
                                             ("real, padded", "#d95f02")]):
            ax.bar(x + (k - 1) * 0.27, at[column], 0.27, color=color, label=column)
        ax.set_xticks(x, [names[n].split(",")[0] for n in schedulers], rotation=20, fontsize=9)
        ax.set(title=f"R = {R}", ylabel="tokens/s")
    fig.legend(*np.atleast_1d(axes)[0].get_legend_handles_labels(), fontsize=9, loc="outside right upper")
    plt.show()


# ------------------------------------------------------------------------- the box and the result file


def verdict_rows(**v: Any) -> list[tuple[str, str, str, bool]]:
    """The rows of the chapter's verdict box, from the findings the chapter gathered, passed by
    their names in the chapter (gains, every_gain, versus and budget of the measured table, ...)."""
    measured, gains, versus, conc, fastest, names = v["MEASURED"], v["gains"], v["versus"], v["conc"], v["fastest"], v["NAMES"]
    every, lead_min = v["every_gain"], float(versus["gain %"].min())
    margin = 100 * _default(simulator.versus_best_baseline, "min_margin")
    varlen = v["varlen_table"]
    return [
        *[(f"DSpark beats MTP-1 at both per-user speed SLAs (Figure 7's sign), {table} table",
           "+51% (Flash, 80 tok/s), +52% (Pro, 35 tok/s)", ", ".join(f"{g:+.0f}%" for g in gains[table]["gain_pct"]),
           bool(np.isfinite(gains[table]["gain_pct"]).all() and (gains[table]["gain_pct"] > 0).all()))
          for table in v["CURVES"]],
        (f"Figure 7's size: DSpark's gain over MTP-1 within a factor of two of the paper's (at least {PAPER_SLA_GAIN / 2:+.1f}%)",
         "+51% / +52%", f"{np.nanmin(every):+.0f}% to {np.nanmax(every):+.0f}% over both tables (toy target)",
         v["size_reproduced"]),
        ("DSpark is at least as fast as every load-blind baseline", "not given as a number",
         f"smallest lead over the best baseline {lead_min:+.2f}%"
         + verdicts.either(lead_min < 0 and v["at_least_best"], " (a deficit within the timing noise or the "
                           f"{margin:g}% margin, counted as a tie)", ""), v["at_least_best"]),
        ("The verification budget shrinks as concurrency rises (Figure 8)", "about 4-6 tokens at moderate load, falling",
         f"{float(v['budget']['budget'].iloc[0]):.2f} at R = {conc[0]} to {float(v['budget']['budget'].iloc[-1]):.2f} "
         f"at R = {conc[-1]}; slope per doubling {v['trend']}", v["budget_falls"]),
        (f"Load sweep: fixed gamma = {v['GAMMA']} falls below no speculation at high load, DSpark stays at or above it "
         f"({measured} table; replays' noise)", "vLLM's report (DeepSeek-V4-Pro): yes, yes (figures not quoted here)",
         "fixed below no speculation " + verdicts.from_R(v["crossing"][measured])
         + f"; DSpark at or above at every R: {results.plain(v['dspark_above'][measured])}",
         bool(v["crossing"][measured] is not None and v["dspark_above"][measured])),
        (f"Real batched (varlen) steps keep the order of every pair of schedulers the cost table separates by more than "
         f"{100 * v['tie']:g}%", "not in the paper",
         f"{int(varlen['same order'].sum())} of {len(varlen)} pairs in the predicted order"
         + verdicts.either(v["only_mtp1"], " (every such pair contains MTP-1)", ""), v["real_ordering_agrees"]),
        ("The cost table predicts the real (varlen) step's fastest scheduler at every R", "not in the paper",
         "; ".join(f"R = {R}: table {names[fastest['predicted (table)'][R]].split(',')[0]}, real "
                   f"{names[fastest['real, varlen kernel'][R]].split(',')[0]}" for R in fastest["real, varlen kernel"].index),
         all(v["pick_right"].values())),
    ]


def save_results(profile: str, device: Any, **v: Any) -> None:
    """Write the chapter's result file (`serving`) from the findings, passed by their names in the
    chapter, and say how long the chapter ran."""
    minutes = (time.perf_counter() - _STARTED[0]) / 60 if _STARTED else float("nan")
    by_R = lambda series: {str(k): float(x) for k, x in series.items()}  # noqa: E731  (JSON keys are strings)
    measured, curves, gains, misses = v["MEASURED"], v["CURVES"], v["gains"], v["misses"]
    result = {
        "gamma": v["GAMMA"],
        "step_curves": {"file": str(v["table_path"]), "meta": {k: x for k, x in v["meta"].items() if k != "seconds_per_step"},
                        "by_R": {str(R): {"sizes": list(v["measured"][R].sizes), "seconds": t.tolist()}
                                 for R, t in v["seconds"].items()}},
        "synthetic_knee": v["KNEE"],
        "records": {"blocks": len(v["records"]), "test_blocks": len(v["test_idx"]),
                    "sts_temperatures": v["sts"].temperatures_.tolist()},
        "sweep": {table: v["sims"][table].to_dict(orient="records") for table in curves},
        "sla": {table: gains[table].to_dict(orient="records") for table in curves},
        "gain_over_mtp1": float(gains[measured]["gain_pct"].iloc[0]),
        "gain_over_mtp1_sla2": float(gains[measured]["gain_pct"].iloc[1]),
        "gain_over_mtp1_synthetic": float(gains["synthetic GPU-like"]["gain_pct"].iloc[0]),
        "gain_over_mtp1_synthetic_sla2": float(gains["synthetic GPU-like"]["gain_pct"].iloc[1]),
        "sla_per_user": {table: gains[table]["per_user_sla"].tolist() for table in curves},
        "dspark_vs_best_baseline": {table: v["versus"][table].reset_index().to_dict(orient="records") for table in curves},
        "min_gain_over_best_baseline_pct": float(v["versus"][measured]["gain %"].min()),
        "dspark_at_least_best_baseline": v["at_least_best"],
        "budget": {table: by_R(v["budget"][table]["budget"]) for table in curves},
        "budget_at_min_R": float(v["budget"][measured]["budget"].iloc[0]),
        "budget_at_max_R": float(v["budget"][measured]["budget"].iloc[-1]),
        "budget_falls_with_R": v["budget_falls"],
        "calibration_gain_pct": by_R(v["raw_vs_sts"]["calibration gain %"]),
        "real_step": v["real"].to_dict(orient="records"),
        "real_step_ordering_agrees": v["real_ordering_agrees"],
        "real_step_agrees_with_sweep": bool(v["sweep_order"]["same order"].all()),
        "interpolation_misses": {c: {str(k): float(x) for k, x in misses[c].items()} for c in misses.columns},
        "real_step_padded_flips": v["flipped_padded"],
        "chapter_minutes": minutes, "sizes": asdict(v["sizes"]),
    }
    save_result("serving", result, profile, device=str(device))
    print(f"chapter ran in {minutes:.1f} min")
