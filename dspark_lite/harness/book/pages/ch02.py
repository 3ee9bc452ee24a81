"""Chapter 02's bookkeeping (speculative decoding from scratch): the run's setup, the figures'
plumbing, the sentences each measuring cell says about this run (`say`), the rows of the verdict
box and the result file. The chapter's visible code is the method and its measurement; everything
here only shows, words or writes what that code computed.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from ...result_files import save_result
from ...toy import corpus
from .. import interactive, plots, results, verdicts
from ..results import say

ENGINE = "dspark_lite engine + draft model"
ASSISTED = "transformers assisted generation"
TARGET_ONLY = "target only (KV cache)"


def parameter_count(model: torch.nn.Module) -> int:
    """How many parameters `model` has."""
    return sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------------------------ 2.2 the rejection rule


def plot_rejection(p_t: torch.Tensor, p_d: torch.Tensor, by_hand: np.ndarray, package: np.ndarray) -> None:
    """The target's and the drafter's distributions beside the output of the rule, by hand and by
    `rejection_sample`, as grouped bars."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(len(p_t))
    for i, (label, values) in enumerate([("target p_t", p_t), ("drafter p_d", p_d), ("output, by hand", by_hand),
                                         ("output, dspark_lite", package)]):
        ax.bar(x + (i - 1.5) * 0.2, values, width=0.2, label=label)
    ax.set_xticks(x, [f"token {i}" for i in x])
    ax.set_ylabel("probability")
    ax.set_title("Rejection sampling turns drafts from p_d into samples from p_t")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def say_rejection(n_accepted: torch.Tensor, p_t: torch.Tensor, p_d: torch.Tensor, tv_output: float, samples: int) -> None:
    """Say how often the package's rule accepted the draft against 1 - TV(p_d, p_t), and how far its
    output is from p_t."""
    theory = 1 - 0.5 * (p_t - p_d).abs().sum().item()
    say(f"**This run.** `rejection_sample` accepted {n_accepted.float().mean().item():.3f} of the {samples:,} drafts "
        f"(theory: $1 - \\mathrm{{TV}}(p_d, p_t) = {theory:.3f}$), and its output lies at "
        f"$\\mathrm{{TV}}(\\text{{output}}, p_t) = {tv_output:.4f}$ from the target's distribution "
        f"(the cell asserts below 0.01).")


# ------------------------------------------------------------------------------------ 2.3 the classic drafter


def say_draft_model(draft_lm: Any, history: Any, world: Any, seconds: float) -> None:
    """Say what the classic drafter is beside the target: layers, parameters, training time and
    validation loss."""
    target = world.target
    n_draft, n_target = parameter_count(draft_lm), parameter_count(target)
    say(f"**This run's classic drafter** is a {draft_lm.config.num_hidden_layers}-layer Qwen3 with "
        f"{n_draft / 1e6:.2f}M parameters, {n_draft / n_target:.2f} of the "
        f"{target.config.num_hidden_layers}-layer target's. It trained in {history.seconds:.0f} s (loading or "
        f"training it here took {seconds:.0f} s) to a final validation loss of {history.val_loss[-1]:.3f}, against "
        f"the target's {world.history.val_loss[-1]:.3f}.")


# ------------------------------------------------------------------------------------ 2.5 three metrics


def plot_acceptance_metrics(records: Mapping[str, Any], gamma: int) -> None:
    """Conditional acceptance (Figure 2's curve) and prefix survival (accept_rate@k) at every draft
    position, per domain, as a chart that shows each point's value on hover."""
    from IPython.display import display

    from .... import record

    curves = pd.DataFrame([
        {"metric": metric, "domain": d, "draft position k": k, "fraction of rounds": float(value)}
        for d, r in records.items()
        for metric, values in (("conditional acceptance (paper, Fig. 2)", record.conditional_acceptance(r, gamma)),
                               ("prefix survival (DeepSpec accept_rate@k)", record.prefix_survival(r, gamma)))
        for k, value in enumerate(values, start=1)])
    display(interactive.curves_chart(curves, "draft position k", "fraction of rounds", "domain", column="metric",
                                     colors=plots.DOMAIN_COLORS))


# ------------------------------------------------------------------------------------ 2.6 the gamma sweep


def show_gamma_sweep(sweep: pd.DataFrame) -> Any:
    """tau against its ceiling gamma + 1, and tokens/s, at each gamma of the sweep: the figure,
    then the table (returned, so a cell that ends with it shows it)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 1, figsize=(7, 5.6), layout="constrained")
    axes[0].plot(sweep.index, sweep["tau"], "o-", label="measured tau")
    axes[0].plot(sweep.index, np.array(sweep.index) + 1, "--", color="grey", label="ceiling gamma + 1")
    axes[0].set_xlabel("gamma")
    axes[0].set_ylabel("tau")
    axes[1].plot(sweep.index, sweep["tokens/s"], "o-")
    axes[1].set_xlabel("gamma")
    axes[1].set_ylabel("tokens/s")
    axes[0].set_title("tau against gamma, classic drafter")
    axes[1].set_title("speed against gamma")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper")
    plt.show()
    return results.titled(sweep, "The classic drafter's gamma sweep: tau and tokens/s at each gamma", 2)


# ------------------------------------------------------------------------------------ 2.7 Eq. 1


def plot_eq1(terms: pd.DataFrame, target_only_ms: float) -> None:
    """Eq. 1's terms per generated token, stacked for each gamma, against plain decoding's latency
    per token; then the table of the terms."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    fig, ax = plt.subplots(figsize=(6, 3))
    left = np.zeros(len(terms))
    for col in ("T_draft (ms/round)", "T_verify (ms/round)", "overhead (ms/round)"):
        per_token = terms[col].values / terms["tau"].values
        ax.barh(terms.index, per_token, left=left, label=col.replace("ms/round", "per token"))
        left += per_token
    ax.axvline(target_only_ms, color="black", ls="--", label="target-only, per token")
    ax.set_xlabel("ms per generated token")
    ax.set_title("Eq. 1 with the overhead, against plain decoding")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    display(results.titled(terms, "Eq. 1's terms per round and per token, against plain decoding", 3))


def say_eq1(terms: pd.DataFrame, per_prompt_ms: Sequence[float], target_only_prompt_ms: Sequence[float],
            target_only_ms: float, gamma: int, draft_lm: Any, target: Any) -> dict[str, Any]:
    """Say what one drafter call costs beside a step of plain decoding, and whether speculation at
    `gamma` is faster or slower than plain decoding per prompt (the paired ratio's 95% interval).
    Returns the findings the verdict box reads: row (the terms at `gamma`), target_only_ms, gap."""
    row = terms.loc[f"gamma={gamma}"]
    draft_call_ms = row["T_draft (ms/round)"] / gamma
    timed = np.isfinite(per_prompt_ms)  # a prompt that ended at the prefill has no round to time
    gap = verdicts.ratio_interval(np.array(per_prompt_ms)[timed], np.array(target_only_prompt_ms)[timed])
    ratio = parameter_count(draft_lm) / parameter_count(target)
    say(f"**This run.** One call of the {draft_lm.config.num_hidden_layers}-layer drafter took {draft_call_ms:.2f} ms, "
        f"{verdicts.times_cheaper(target_only_ms / draft_call_ms)} a step of plain decoding with the "
        f"{target.config.num_hidden_layers}-layer target ({target_only_ms:.2f} ms), although the drafter has "
        f"{ratio:.2f} of the target's parameters. At gamma = {gamma} and temperature 1 (target and drafter alike), "
        f"speculative decoding therefore spends {row['L (ms/token)']:.2f} ms per token: "
        f"{verdicts.compared(gap, above='slower than', below='faster than')} plain decoding at the same temperature. "
        f"Per prompt, its latency per token differs from plain decoding's by {gap.text(1)}% (geometric mean over "
        f"{int(timed.sum())} prompts, with its 95% confidence interval; a gap whose interval holds zero is a tie).")
    return {"row": row, "target_only_ms": target_only_ms, "gap": gap}


# ------------------------------------------------------------------------------------ 2.8 the race


def show_race(speeds: Mapping[str, Mapping[str, Any]], gamma: int, repeats: int) -> pd.DataFrame:
    """The race's tokens/s per decoder (median over the passes) and against the target alone: the
    figure and the table. Returns the table."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    race = pd.DataFrame({name: {"tokens/s (median)": v["tokens_per_s"], "tokens": v["tokens"]}
                         for name, v in speeds.items()}).T
    race["vs target only"] = race["tokens/s (median)"] / race.loc[TARGET_ONLY, "tokens/s (median)"]
    ours_vs_hf = race.loc[ENGINE, "tokens/s (median)"] / race.loc[ASSISTED, "tokens/s (median)"]
    fig, ax = plt.subplots(figsize=(7, 2.6))
    ax.barh(race.index, race["tokens/s (median)"], color=["grey", "#2b5d9b", "#999"])
    ax.set_xlabel(f"tokens/s, median of {repeats} (greedy, gamma={gamma})")
    ax.set_title(f"our engine / assisted generation = {ours_vs_hf:.2f}x")
    plt.show()
    display(results.titled(race, "The race: tokens/s of each decoder (greedy), and against the target alone", 2))
    return race


def say_race(speeds: Mapping[str, Mapping[str, Any]], race: pd.DataFrame) -> dict[str, Any]:
    """Say how our engine did against assisted generation (the book's goal: no slower within the
    noise) and whether speculation paid against the target alone. Each pass of the race times every
    decoder on every prompt, so the passes are paired and their spread is the noise (`ratio_interval`).
    Returns the findings the verdict box and the result file read."""
    passes = {name: v["tokens_per_s_all"] for name, v in speeds.items()}
    found = {
        "ours_vs_hf": race.loc[ENGINE, "tokens/s (median)"] / race.loc[ASSISTED, "tokens/s (median)"],
        "ours_vs_target": race.loc[ENGINE, "vs target only"],
        "hf_vs_target": race.loc[ASSISTED, "vs target only"],
        "ours_hf_gap": verdicts.ratio_interval(passes[ENGINE], passes[ASSISTED]),
        "ours_target_gap": verdicts.ratio_interval(passes[ENGINE], passes[TARGET_ONLY]),
        "hf_target_gap": verdicts.ratio_interval(passes[ASSISTED], passes[TARGET_ONLY]),
    }
    found["goal_met"] = not found["ours_hf_gap"].below_zero  # no slower: faster, or a tie within the noise
    pays = found["ours_target_gap"].above_zero or found["hf_target_gap"].above_zero
    loses = found["ours_target_gap"].below_zero and found["hf_target_gap"].below_zero
    outcome = verdicts.either(pays, "pays", verdicts.either(loses, "does not pay", "neither pays nor loses beyond the noise"))
    say(f"**This run.** At temperature 0 (greedy), our engine ran at {found['ours_vs_hf']:.2f}x the speed of assisted "
        f"generation (per pass of the race: {found['ours_hf_gap'].text(1)}%, with its 95% confidence interval over the "
        f"passes): our engine {verdicts.reaches(found['goal_met'])} the goal, no slower within the noise.",
        f"Against target-only decoding, our engine ran at {found['ours_vs_target']:.2f}x its speed and assisted "
        f"generation at {found['hf_vs_target']:.2f}x (ours per pass: {found['ours_target_gap'].text(1)}%): with this "
        f"classic drafter, speculation {outcome} on this machine.")
    return found


# ------------------------------------------------------------------------------------ the box and the result file


def verdict_rows(tv_output: float, samples: int, greedy_identical: Mapping[str, int], gamma: int,
                 eq1: Mapping[str, Any], race: Mapping[str, Any]) -> list[tuple[str, str, str, bool]]:
    """The rows of the chapter's verdict box, from the findings of sections 2.2, 2.4, 2.7 and 2.8
    (`say_eq1`'s and `say_race`'s returns)."""
    row, gap = eq1["row"], eq1["gap"]
    return [
        ("Rejection sampling keeps the target's distribution exactly (Section 2)", "lossless",
         f"TV(output, p_t) = {tv_output:.4f} over {samples:,} samples", bool(tv_output < 0.01)),
        ("At temperature 0 speculative decoding reproduces the target's greedy output", "token for token",
         ", ".join(f"{d}: {n} of {n} tokens" for d, n in greedy_identical.items()),
         len(greedy_identical) == len(corpus.DOMAINS)),
        ("Eq. 1: a classic small drafter lowers the latency per token", "faster than target-only (the 2023 recipe, on a GPU)",
         f"L = {row['L (ms/token)']:.2f} ms/token at gamma = {gamma} against {eq1['target_only_ms']:.2f} ms/token "
         f"target-only; per prompt {gap.text(1)}% (95% interval)", bool(gap.below_zero)),
        ("Speculative decoding with the classic drafter beats target-only decoding in a wall-clock race",
         "faster than target-only (on a GPU)",
         f"{race['ours_vs_target']:.2f}x (ours; per pass {race['ours_target_gap'].text(1)}%), "
         f"{race['hf_vs_target']:.2f}x (transformers; per pass {race['hf_target_gap'].text(1)}%)",
         bool(race["ours_target_gap"].above_zero)),
        ("Our engine is no slower than transformers' assisted generation, within noise (the book's goal, not the paper's)",
         "not in the paper", f"{race['ours_vs_hf']:.2f}x; per pass {race['ours_hf_gap'].text(1)}%", race["goal_met"]),
    ]


def save_results(profile: str, device: Any, metrics: pd.DataFrame, sweep: pd.DataFrame, terms: pd.DataFrame,
                 race: pd.DataFrame, ours_vs_hf: float, draft_lm: Any, target: Any) -> None:
    """Write the chapter's result file, `speculative.json`: tau per domain (and its macro mean),
    the conditional-rate check, the gamma sweep, Eq. 1's terms and the race."""
    result = {
        "tau": {"classic": float(np.mean(metrics["tau (measured)"])),
                **{f"classic_{d}": float(metrics.loc[d, "tau (measured)"]) for d in corpus.DOMAINS}},
        "tau_from_conditional": metrics["tau (from conditional rates)"].to_dict(),
        "tokens_emitted_per_round": metrics["tokens emitted per round"].to_dict(),
        "gamma_sweep": sweep.reset_index().to_dict(orient="list"),
        "eq1_terms": terms.to_dict(orient="index"),
        "race_tokens_per_s": race["tokens/s (median)"].to_dict(),
        "race_speedup_vs_target": race["vs target only"].to_dict(),
        "ours_over_assisted": ours_vs_hf,
        "draft_params_ratio": parameter_count(draft_lm) / parameter_count(target),
    }
    save_result("speculative", result, profile, device=str(device))
