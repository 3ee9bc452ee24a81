"""Chapter 04's second half (the Markov head): the lean ablation drafters of Figures 3 and 4
(depth against the head, and the block size), what the head costs per round, and the wall-clock
race against the target alone, with the tables, figures and sentences each shows. `ch04` holds the
first half, the result file and the verdict box.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from ...toy import zoo
from ...toy.profiles import DrafterRecipe, HeadStudy
from ...toy.world import ToyWorld
from .. import plots, verdicts
from ..results import plain, say, titled
from .ch04 import COLORS, DOMAINS, LEGEND, NAMES


class LeanDrafters:
    """The ablations' drafters, trained (or loaded) with the lean recipe from every seed, all kinds
    of one (gamma, layers) at once, and measured once: runs[(kind, gamma, layers)] = (its report
    per domain over every seed, training seconds of all seeds)."""

    def __init__(self, world: ToyWorld, recipe: Any, study: Any, seeds: Sequence[int]) -> None:
        self.world, self.recipe, self.study, self.seeds = world, recipe, study, list(seeds)
        self.runs: dict[tuple[str, int, int], tuple[dict[str, Any], float]] = {}

    def train(self, kinds: tuple[str, ...], gamma: int, layers: int) -> dict[str, dict[str, float]]:
        """Train and measure the drafters of `kinds` not done yet; the seed-mean tau per domain of each."""
        todo = [kind for kind in kinds if (kind, gamma, layers) not in self.runs]
        lean_recipe = zoo.ablation_recipe(self.recipe, self.study, gamma, layers)
        runs = zoo.load_or_train_seeds(self.world, todo, lean_recipe, self.seeds)
        for kind in todo:
            report = zoo.measured_seeds(self.world, kind, self.study.ablation_eval_prompts,
                                        self.study.ablation_eval_samples, lean_recipe, self.seeds)
            self.runs[(kind, gamma, layers)] = (report, sum(history.seconds for _, history in runs[kind]))
        return {kind: self.tau(kind, gamma, layers) for kind in kinds}

    def tau(self, kind: str, gamma: int, layers: int) -> dict[str, float]:
        return {d: self.runs[(kind, gamma, layers)][0][d].tau for d in DOMAINS}  # seed means

    def seed_taus(self, kind: str, gamma: int, layers: int) -> dict[str, Any]:
        return {d: self.runs[(kind, gamma, layers)][0][d].seed_taus for d in DOMAINS}

    def parts(self, kind: str, gamma: int, layers: int) -> dict[str, Any]:
        return {d: self.runs[(kind, gamma, layers)][0][d].per_generation for d in DOMAINS}


@dataclass
class Depth:
    """Figure 3's measurements: tau per run and domain, the shallow DSpark against the deep DFlash
    (paired intervals), own parameters, and what the head and the backbone's extra layers each add."""
    depth: pd.DataFrame
    shallow: str
    deep: str
    two_vs_deep: dict[str, verdicts.Interval]
    two_beats_deep: list[str]
    own_params: dict[str, int]
    control_ratio: float
    depth_gain: pd.Series
    head_gain: pd.Series
    lean_share: dict[str, float]


def run_name(kind: str, n: int) -> str:
    return f"{NAMES[kind]}, {verdicts.plural(n, 'layer')}"


def depth_runs(recipe: DrafterRecipe, study: HeadStudy) -> list[tuple[str, int]]:
    """Figure 3's (kind, layers): DSpark-Markov at `study.depth_layers` and at the backbone's depth,
    DFlash at the backbone's depth and at `study.deep_dflash_layers` (the paper's: a 2-layer DSpark
    against a 5-layer DFlash, the backbone's depth)."""
    return ([("dspark-markov", n) for n in sorted({*study.depth_layers, recipe.dflash_layers})]
            + [("dflash", n) for n in sorted({recipe.dflash_layers, study.deep_dflash_layers})])


def figure3(lean: LeanDrafters, runs: list[tuple[str, int]], tau: pd.DataFrame, seed: int) -> Depth:
    """The depth runs' table and figure, and the comparisons Figure 3 is read by (`tau`: Table 1's)."""
    recipe, study, g = lean.recipe, lean.study, lean.study.depth_gamma
    shallow_n, deep_n, backbone = min(study.depth_layers), study.deep_dflash_layers, recipe.dflash_layers
    depth = pd.DataFrame({run_name(kind, n): lean.tau(kind, g, n) for kind, n in runs}).T
    depth_spread = pd.DataFrame({run_name(kind, n): {d: verdicts.seed_spread(lean.seed_taus(kind, g, n)[d]) for d in DOMAINS}
                                 for kind, n in runs}).T
    display(titled(depth_spread, f"tau per domain at gamma = {g}, lean recipe, mean ± sd over "
                                 f"{len(lean.seeds)} seeds: depth against the head (Figure 3)"))
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    greens, blues = ["#a1d99b", "#31a354", "#006d2c"], ["#9ecae1", "#3182bd", "#08519c"]  # deeper runs darker
    shades = {run: (greens if run[0] == "dspark-markov" else blues)[min(2, i)]
              for kind in ("dspark-markov", "dflash") for i, run in enumerate(r for r in runs if r[0] == kind)}
    depth.T.plot.bar(ax=ax, rot=0, color=[shades[run] for run in runs])
    ax.set_ylabel("tau")
    ax.set_title(f"Figure 3: depth vs the Markov head (gamma = {g})")
    ax.legend(**LEGEND)
    plt.show()
    shallow, deep = run_name("dspark-markov", shallow_n), run_name("dflash", deep_n)
    two_vs_deep = {d: verdicts.tau_difference(lean.parts("dspark-markov", g, shallow_n)[d],  # paired: seeds, then prompts
                                              lean.parts("dflash", g, deep_n)[d], seed=seed) for d in DOMAINS}
    # The deeper DFlash is the head's parameter control: its own parameters against the shallow DSpark's (backbone and head)
    own_params = {run_name(kind, n): sum(p.numel() for p in zoo.BUILDERS[kind](
        lean.world, zoo.ablation_recipe(recipe, study, g, n), lean.seeds[0]).parameters()) for kind, n in runs}
    base, full_dspark = depth.loc[run_name("dflash", backbone)], depth.loc[run_name("dspark-markov", backbone)]
    # How far from convergence: the lean drafters at the backbone's depth against the full recipe's (macro tau)
    lean_macro = {"dflash": float(base[DOMAINS].mean()), "dspark-markov": float(full_dspark[DOMAINS].mean())}
    return Depth(depth, shallow, deep, two_vs_deep, [d for d in DOMAINS if two_vs_deep[d].above_zero], own_params,
                 own_params[deep] / own_params[shallow], full_dspark - depth.loc[shallow], full_dspark - base,
                 {k: v / float(tau.loc[NAMES[k], "macro"]) for k, v in lean_macro.items()})


def say_depth(dep: Depth, lean: LeanDrafters) -> None:
    """How far the lean recipe is from convergence, what depth and the head add, and the parameter control."""
    recipe, study = lean.recipe, lean.study
    two, deep, backbone = min(study.depth_layers), study.deep_dflash_layers, recipe.dflash_layers
    where = lambda ok: verdicts.domains_phrase([d for d in DOMAINS if ok(d)], DOMAINS)
    say(f"The lean recipe trains {study.ablation_steps} steps against the full recipe's {recipe.dspark_steps}: at the "
        f"backbone's depth its drafters reached "
        + " and ".join(f"{NAMES[k]} {100 * v:.0f}%" for k, v in dep.lean_share.items())
        + f" of the full recipe's macro tau (at gamma {study.depth_gamma} against {recipe.gamma}).",
        f"On DSpark-Markov, the backbone's {backbone - two} layers above the first {two} change tau by "
        f"{plain(dep.depth_gain.round(2).to_dict())}; adding the head to the {backbone}-layer backbone changes it by "
        f"{plain(dep.head_gain.round(2).to_dict())}. In this run the "
        f"head adds tau in {where(lambda d: dep.head_gain[d] > 0)}, and more than the extra layers do in "
        f"{where(lambda d: dep.head_gain[d] > dep.depth_gain[d])}. The {two}-layer DSpark-Markov beats the {deep}-layer "
        f"DFlash, beyond the noise, in {verdicts.domains_phrase(dep.two_beats_deep, DOMAINS)} (the difference with its 95% "
        f"interval over the seeds, then the prompts: {plain({d: str(v) for d, v in dep.two_vs_deep.items()})}).",
        f"The {deep}-layer DFlash has {dep.own_params[dep.deep] / 1e6:.3f}M parameters of its own, against "
        f"{dep.own_params[dep.shallow] / 1e6:.3f}M for the {two}-layer DSpark-Markov, head included: "
        f"{dep.control_ratio:.1f} times as many, "
        + verdicts.either(dep.control_ratio >= 1, "so it is the parameter-matched control for the head's gain, with "
                          "more parameters, not fewer", "so it has fewer parameters than the DSpark it is compared with, "
                          "and does not control for the head's size")
        + " (own parameters, the target's embedding and LM head not counted: "
        + "; ".join(f"{run}: {n / 1e6:.3f}M" for run, n in dep.own_params.items())
        + f"). Each lean drafter trained from {verdicts.plural(len(lean.seeds), 'seed')} and was measured on "
        f"{verdicts.plural(study.ablation_eval_prompts * study.ablation_eval_samples, 'generation')} per domain.")


@dataclass
class Sweep:
    """Figure 4's measurements: tau per block size (lean recipe), DSpark-Markov's gain over DFlash,
    and the change of the macro gain from the shortest block to the longest (paired interval)."""
    sweep: pd.DataFrame
    sweep_gain: pd.DataFrame
    lo: int
    hi: int
    gain_change: verdicts.Interval

    @property
    def gain_lo(self) -> float:
        return float(self.sweep_gain.loc[self.lo, "macro"])

    @property
    def gain_hi(self) -> float:
        return float(self.sweep_gain.loc[self.hi, "macro"])


def figure4(lean: LeanDrafters, seed: int) -> Sweep:
    """Tau and DSpark's gain at each block size (tables and figure), and the change of the gain."""
    gammas, layers = lean.study.ablation_gammas, lean.recipe.dflash_layers
    sweep = pd.DataFrame({(NAMES[kind], g): lean.tau(kind, g, layers) for g in gammas for kind in ("dflash", "dspark-markov")}).T
    sweep["macro"] = sweep[DOMAINS].mean(axis=1)
    sweep_gain = 100 * (sweep.loc["DSpark-Markov"] / sweep.loc["DFlash"] - 1)
    seed_taus = lambda kind, g: lean.seed_taus(kind, g, layers)
    sweep_spread = pd.DataFrame({(NAMES[kind], g): {**{d: verdicts.seed_spread(seed_taus(kind, g)[d]) for d in DOMAINS},
                                                    "macro": verdicts.seed_spread(np.mean([seed_taus(kind, g)[d] for d in DOMAINS], axis=0))}
                                 for g in gammas for kind in ("dflash", "dspark-markov")}).T
    display(titled(sweep_spread, f"tau per domain at each gamma, lean recipe, mean ± sd over {len(lean.seeds)} seeds (Figure 4)"))
    display(titled(sweep_gain.rename_axis("DSpark gain over DFlash (%) at gamma"),
                   "DSpark-Markov's tau gain over DFlash (%) at each gamma, lean recipe (Figure 4)", 1))
    fig, axes = plt.subplots(2, 1, figsize=(7, 6), sharex=True, layout="constrained")
    for kind in ("dflash", "dspark-markov"):
        axes[0].plot(gammas, sweep.loc[NAMES[kind], "macro"], "o-", color=COLORS[kind], label=NAMES[kind])
    axes[0].set_ylabel("tau, macro average")
    for domain in DOMAINS:
        axes[1].plot(gammas, sweep_gain[domain], "o-", color=plots.DOMAIN_COLORS[domain], label=domain)
    axes[1].plot(gammas, sweep_gain["macro"], "o--", color="black", label="macro")
    axes[1].plot([7, 15], [16.3, 26.0], "s:", color="grey", label="paper (macro, gamma 7 and 15)")
    axes[1].set_ylabel("DSpark gain over DFlash (%)")
    for ax in axes:
        ax.set_xlabel("gamma")
        ax.legend(**LEGEND)
        ax.set_xticks(sorted(set(gammas)))
    plt.show()
    lo, hi = min(gammas), max(gammas)
    at_gamma = lambda kind, g: lean.parts(kind, g, layers)  # the same prompts at both block sizes: one paired draw
    gain_change = verdicts.macro_gain_change(at_gamma("dspark-markov", hi), at_gamma("dflash", hi),
                                             at_gamma("dspark-markov", lo), at_gamma("dflash", lo), seed=seed)
    return Sweep(sweep, sweep_gain, lo, hi, gain_change)


def say_sweep(sw: Sweep) -> None:
    """How DSpark's gain and each drafter's tau move from the shortest block to the longest."""
    macro = lambda name, g: float(sw.sweep.loc[(name, g), "macro"])
    drop = lambda name: macro(name, sw.lo) - macro(name, sw.hi)
    grows = verdicts.compared(sw.gain_change, "grows", "shrinks", "neither grows nor shrinks beyond the seeds' and prompts' noise")
    say(f"DSpark's macro gain over DFlash is {sw.gain_lo:+.1f}% at gamma = {sw.lo} and {sw.gain_hi:+.1f}% at gamma = "
        f"{sw.hi}: it {grows}"
        f" with the block size ({sw.gain_change.text(1)} points, 95% interval over the seeds, then the prompts), "
        f"{verdicts.versus_paper(sw.gain_change.above_zero)}.",
        f"From the shortest block to the longest, DFlash's macro tau {verdicts.direction(macro('DFlash', sw.lo), macro('DFlash', sw.hi))}"
        f" and DSpark-Markov's {verdicts.direction(macro('DSpark-Markov', sw.lo), macro('DSpark-Markov', sw.hi))}: our lean "
        "drafters are not fully converged (section 4.6 says how far), so a long block's later slots are rarely reached, and "
        + verdicts.either(drop("DSpark-Markov") < drop("DFlash"), "it is the head that keeps a few more of them alive.",
                          "in this run the head does not keep more of them alive than DFlash does."))


# ---------------------------------------------------------------- 4.7 the head's cost, 4.8 the race

def overhead_table(draft_s: dict[str, dict[int, float]], verify_s: dict[int, float], gammas: Sequence[int]) -> pd.DataFrame:
    """The time of a round at each gamma (draft calls, verification, the head's overhead), shown and returned."""
    overhead = pd.DataFrame({g: {
        "DFlash draft (ms)": 1e3 * draft_s["DFlash"][g],
        "DSpark draft (ms)": 1e3 * draft_s["DSpark-Markov"][g],
        "verify (ms)": 1e3 * verify_s[g + 1],
        "head overhead (ms)": 1e3 * (draft_s["DSpark-Markov"][g] - draft_s["DFlash"][g]),
    } for g in gammas}).T.rename_axis("gamma")
    overhead["round overhead (%)"] = 100 * overhead["head overhead (ms)"] / (overhead["DFlash draft (ms)"] + overhead["verify (ms)"])
    display(titled(overhead, "time of a round at each gamma: draft calls, verification and the Markov head's overhead", 2))
    return overhead


def say_overhead(overhead: pd.DataFrame, gamma: int, target: torch.nn.Module) -> None:
    """What the head's loop costs per slot and per round, and how its share moves with gamma."""
    ms, pct = float(overhead.loc[gamma, "head overhead (ms)"]), float(overhead.loc[gamma, "round overhead (%)"])
    params = sum(p.numel() for p in target.parameters())
    say(f"The head's loop costs about {1e3 * ms / gamma:.0f} microseconds per slot at gamma = {gamma}, and over the "
        f"block sizes timed above its share of a round {verdicts.trend(overhead['round overhead (%)'], 'gamma')}. At "
        f"gamma = {gamma} the head adds {ms:.2f} ms, {pct:.1f}% of the round "
        f"({verdicts.either(pct < 10, 'under', 'over')} a tenth of it); it is the difference of two short timings, so it "
        f"moves between runs. Our round is one request through a target of {params / 1e6:.2f}M parameters on a "
        f"{'GPU' if next(target.parameters()).is_cuda else 'CPU'}.")


def race_table(race: dict[str, dict[str, Any]], draft_s: dict[str, dict[int, float]], verify_s: dict[int, float],
               acceptance: dict[str, dict[str, Any]], gamma: int) -> pd.DataFrame:
    """Tokens per second per domain and decoder, each drafter's speed-up over the target alone and
    Eq. 1's estimate from the timed forwards (tau tokens per draft call plus verification), shown and returned."""
    speed = pd.DataFrame({d: {name: r["tokens_per_s"] for name, r in race[d].items()} for d in DOMAINS}).T
    speed["speed-up"] = speed["DSpark-Markov"] / speed["target only"]
    for name in ("DFlash", "EAGLE-style"):  # the race the paper's argument is about: per round against per second
        speed[f"{name} speed-up"] = speed[name] / speed["target only"]
    round_s = draft_s["DSpark-Markov"][gamma] + verify_s[gamma + 1]
    speed["Eq. 1 estimate"] = [acceptance["dspark-markov"][d].tau * verify_s[1] / round_s for d in speed.index]
    display(titled(speed.rename_axis("tokens per second"),
                   f"wall clock per domain: our engine with each drafter against the target alone, gamma = {gamma}", 2))
    return speed


def say_race(speed: pd.DataFrame, race: dict[str, dict[str, Any]], tau_macro: float, draft_s: dict[str, dict[int, float]],
             verify_s: dict[int, float], recipe: Any, target_layers: int) -> None:
    """Each drafter's speed-up, the goal of twice the target's speed, Eq. 1's estimate and the repetitions' spread."""
    gamma, mean_speedup, eq1_mean = recipe.gamma, float(speed["speed-up"].mean()), float(speed["Eq. 1 estimate"].mean())
    leader = max(("DSpark-Markov", "DFlash", "EAGLE-style"), key=lambda n: float(speed[n].mean()))
    slower = [d for d in speed.index if speed.loc[d, "speed-up"] <= 1]
    reps = {d: [ours / alone for ours, alone in zip(race[d]["DSpark-Markov"]["tokens_per_s_all"],
                                                    race[d]["target only"]["tokens_per_s_all"])] for d in DOMAINS}
    per_domain = " / ".join(f"{speed.loc[d, 'speed-up']:.2f}" for d in DOMAINS)
    say(f"In the same race DFlash decoded at {float(speed['DFlash speed-up'].mean()):.2f} times and the EAGLE-style "
        f"drafter at {float(speed['EAGLE-style speed-up'].mean()):.2f} times the target's own tokens per second (means "
        f"over the domains); the fastest per second was {leader}.",
        f"DSpark-Markov decodes at {mean_speedup:.2f} times the target's tokens per second on average over the domains "
        f"({per_domain} for math / code / chat): it "
        f"{verdicts.reaches(mean_speedup >= 2)} the goal of twice the target's speed, and it is "
        f"{verdicts.faster_than(slower, 'the target alone')}. Its tau is {tau_macro:.2f}"
        f" tokens per round (macro). Verifying gamma + 1 = {gamma + 1} tokens costs {verify_s[gamma + 1] / verify_s[1]:.1f}"
        f" times a single-token forward, and the draft call, {verdicts.plural(recipe.dflash_layers, 'thin layer')} beside the target's "
        f"{target_layers} plus the head's loop, costs another {draft_s['DSpark-Markov'][gamma] / verify_s[1]:.1f} times "
        f"one. Eq. 1's estimate is {eq1_mean:.2f} times on average. "
        + verdicts.either(mean_speedup < eq1_mean,
                          "The race lands below it: every round our engine also pays rejection sampling, cache trimming "
                          "and bookkeeping, while the target-only loop pays only its sampling per token.",
                          "The race lands at or above it in this run: the engine's per-round bookkeeping (rejection "
                          "sampling, cache trimming) costs less than the estimate's separately timed forwards leave room for."),
        f"Runs differ: within each domain, the speed-ups of the {verdicts.plural(len(next(iter(reps.values()))), 'repetition')} "
        f"({plain({d: [round(v, 2) for v in r] for d, r in reps.items()})}) lie within "
        f"{max(max(v) - min(v) for v in reps.values()):.2f} of each other.")


