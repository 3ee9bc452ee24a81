"""Chapter 03's section 3.9, where parallel drafting wins: per-slot acceptance split at the
block's branch points, the crossover map of tau(DFlash) / tau(EAGLE-style) over the drafters'
capacity ratio and the domains, the baseline's loss ablation, and the reasons these leave, with
the tables, figures, sentences and verdict rows each shows. `ch03` holds the rest of the chapter.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from .. import plots, verdicts
from ..results import say, titled
from .ch03 import COLORS, DOMAINS, NAMES


def _nanmean(values: Any, axis: int | None = None) -> Any:
    """np.nanmean, quiet where every value is missing (a reply with no branched slot: NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _interval(values: Any, seed: int = 0) -> verdicts.Interval:
    """`verdicts.mean_interval`, or an interval of NaNs where fewer than two values exist (no branched
    slot in a domain, say: nothing to compare)."""
    if np.isfinite(np.asarray(values, dtype=float)).sum() < 2:
        return verdicts.Interval(float("nan"), float("nan"), float("nan"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return verdicts.mean_interval(values, seed=seed)


def split_means(split: Mapping[str, Mapping[str, Sequence[Mapping[str, np.ndarray]]]]) -> dict:
    """Each reply's mean over slots 2..gamma of its clean and its branched slots, and the share of
    those slots that are branched: {kind: {domain: {"clean" | "branched" | "share": [seeds, replies]}}}
    from `evaluation.slot_acceptance_split` per seed."""
    def later(values: np.ndarray) -> np.ndarray:
        return _nanmean(values[:, 1:], axis=1)

    return {kind: {d: {"clean": np.stack([later(s["clean"]) for s in per_seed]),
                       "branched": np.stack([later(s["branched"]) for s in per_seed]),
                       "share": np.stack([_nanmean(s["branched_share"][:, 1:], axis=1) for s in per_seed])}
                   for d, per_seed in by_domain.items()}
            for kind, by_domain in split.items()}


def split_gaps(means: Mapping[str, Any], seed: int) -> dict[str, dict[str, verdicts.Interval]]:
    """DFlash minus the baseline on clean and on branched slots (paired: same replies and seed
    index), and the branched gap minus the clean one, per domain."""
    gaps = {}
    for d in DOMAINS:
        clean = means["dflash"][d]["clean"] - means["eagle"][d]["clean"]
        branched = means["dflash"][d]["branched"] - means["eagle"][d]["branched"]
        gaps[d] = {"clean": _interval(clean, seed), "branched": _interval(branched, seed),
                   "branched minus clean": _interval(branched - clean, seed)}
    return gaps


def deficit_parts(means: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """DFlash's deficit against the baseline over slots 2..gamma, per slot, in its two parts: the
    clean slots' (1 - share) x (baseline - DFlash) and the branched slots' share x (baseline - DFlash),
    from seed means (a negative part: DFlash is ahead there)."""
    out = {}
    for d in DOMAINS:
        share = float(_nanmean(means["dflash"][d]["share"]))
        gap = {part: float(_nanmean(means["eagle"][d][part] - means["dflash"][d][part])) for part in ("clean", "branched")}
        out[d] = {"clean": (1 - share) * gap["clean"], "branched": share * gap["branched"]}
    return out


def deficit_words(parts: Mapping[str, float]) -> str:
    """Where DFlash's deficit over slots 2..gamma sits, in words."""
    clean, branched = parts["clean"], np.nan_to_num(parts["branched"])
    if clean + branched <= 0:
        return "over slots 2..γ DFlash has no deficit against the baseline"
    if clean < 0:
        return "all of DFlash's deficit over slots 2..γ sits after branch points (on clean slots it is ahead)"
    return f"{100 * branched / (clean + branched):.0f}% of DFlash's deficit over slots 2..γ sits after branch points"


def show_split(means: Mapping[str, Any], gaps: Mapping[str, Any], deficit: Mapping[str, Mapping[str, float]], threshold: float,
               n_seeds: int) -> None:
    """Figure and table: each drafter's acceptance on clean and on branched slots 2..gamma per domain."""
    fig, axes = plt.subplots(1, len(DOMAINS), figsize=(7, 3.1), sharey=True, layout="constrained")
    for ax, d in zip(axes, DOMAINS):
        for i, kind in enumerate(("eagle", "dflash")):
            for j, part in enumerate(("clean", "branched")):
                value = _interval(means[kind][d][part])
                ax.bar(j + 0.38 * i, value.estimate, width=0.36, color=COLORS[kind], alpha=1.0 if part == "clean" else 0.55,
                       yerr=[[value.estimate - value.low], [value.high - value.estimate]], capsize=3,
                       label=NAMES[kind] if j == 0 else None)
        ax.set_xticks([0.19, 1.19], ["clean", "after a\nbranch point"])
        ax.set_title(f"{d}: {100 * _nanmean(means['dflash'][d]['share']):.0f}% branched", fontsize=10)
    axes[0].set_ylabel("acceptance (1 - TV)")
    axes[0].set_ylim(0, 1.15)
    axes[0].legend(fontsize=9, loc="upper left", ncol=2, frameon=False)
    fig.suptitle(f"Where each drafter loses inside a block: slots 2..γ, clean or after a branch point\n(the target's "
                 f"entropy > {threshold:g} nats earlier in the block; mean of {n_seeds} seeds, 95% bars)", fontsize=9)
    plt.show()
    table = pd.DataFrame({
        **{f"{NAMES[k]}: clean / branched": {d: f"{_nanmean(means[k][d]['clean']):.3f} / "
                                               f"{_nanmean(means[k][d]['branched']):.3f}" for d in DOMAINS}
           for k in ("dflash", "eagle")},
        "branched share of slots 2..γ": {d: f"{100 * _nanmean(means['dflash'][d]['share']):.0f}%" for d in DOMAINS},
        "DFlash - EAGLE-style, clean": {d: gaps[d]["clean"].text(3) for d in DOMAINS},
        "DFlash - EAGLE-style, branched": {d: gaps[d]["branched"].text(3) for d in DOMAINS},
        "DFlash's deficit per slot: clean + branched parts": {d: f"{deficit[d]['clean']:+.3f} + {deficit[d]['branched']:+.3f}"
                                                             for d in DOMAINS},
    })
    display(titled(table, "Per-slot acceptance on held-out target replies, slots 2..γ, split at branch points"))


def say_split(gaps: Mapping[str, Any], deficit: Mapping[str, Mapping[str, float]]) -> None:
    """Where DFlash stands against the baseline on clean slots and after branch points, and where its deficit sits."""
    parts = []
    for d in DOMAINS:
        g = gaps[d]
        change = g["branched minus clean"]
        parts.append(f"in {d} DFlash is {verdicts.compared(g['clean'])} the baseline on clean slots ({g['clean'].text(3)}) "
                     f"and {verdicts.compared(g['branched'])} it after a branch point ({g['branched'].text(3)}); its standing "
                     f"{verdicts.compared(change, 'rises', 'drops', 'does not change (within noise)')} after branch points "
                     f"({change.text(3)}), and {deficit_words(deficit[d])}")
    say("Measured on this run's drafters: " + "; ".join(parts) + ".")


def crossover_points(dflash: Mapping[str, Any], eagles: Mapping[float, Mapping[str, Any]], seed: int
                     ) -> pd.DataFrame:
    """One row per (capacity ratio, domain): both taus and DFlash's gain over the baseline, in
    percent, with its interval (paired: same prompts, seeds resampled)."""
    rows = []
    for ratio, eagle in sorted(eagles.items()):
        for d in DOMAINS:
            gain = verdicts.macro_gain({d: dflash[d].per_generation}, {d: eagle[d].per_generation}, seed=seed)
            rows.append({"capacity ratio": ratio, "domain": d, "tau DFlash": dflash[d].tau, "tau EAGLE-style": eagle[d].tau,
                         "gain": gain})
    return pd.DataFrame(rows)


def show_crossover(points: pd.DataFrame, dependency_share: Mapping[str, float], paper_ratio: float,
                   paper_tau: Mapping[str, Mapping[str, float]]) -> None:
    """The map: DFlash's gain over the baseline against the capacity ratio, one line per domain
    (labelled with its in-block dependency share), with the paper's Qwen3-4B point."""
    fig, ax = plt.subplots(figsize=(7, 3.4), layout="constrained")
    for d in DOMAINS:
        part = points[points["domain"] == d]
        gain = part["gain"].tolist()
        mid = np.array([g.estimate for g in gain])
        ax.errorbar(part["capacity ratio"], mid, yerr=[mid - [g.low for g in gain], [g.high for g in gain] - mid], fmt="o-",
                    capsize=3, color=plots.DOMAIN_COLORS[d], label=f"{d}\n(dependency share {100 * dependency_share[d]:.0f}%)")
        paper = 100 * (paper_tau["dflash"][d] / paper_tau["eagle"][d] - 1)
        ax.scatter([paper_ratio], [paper], marker="*", s=140, color=plots.DOMAIN_COLORS[d], edgecolors="black", zorder=5)
    ax.axhline(0, color="grey", lw=1, ls="--")
    ax.axvline(paper_ratio, color="grey", lw=0.8, ls=":")
    top = max(100 * (paper_tau["dflash"][d] / paper_tau["eagle"][d] - 1) for d in DOMAINS)
    ax.annotate("stars: the paper (Qwen3-4B)", (paper_ratio, top), xytext=(10, 4), textcoords="offset points", fontsize=9)
    ax.set_xlabel("capacity ratio: baseline's non-embedding parameters / DFlash's")
    ax.set_ylabel("tau(DFlash) / tau(EAGLE-style) - 1 (%)")
    ax.set_title("Where parallel drafting wins: above the dashed line (95% bars)", fontsize=10)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    plt.show()
    table = (points.assign(gain=[g.text(1) for g in points["gain"]]).rename(columns={"gain": "DFlash's gain (%) [95%]"})
             .set_index(["capacity ratio", "domain"]))
    display(titled(table, "The crossover map: lean recipe, every drafter from the same seeds and replies", 2))


def crossover_verdicts(points: pd.DataFrame) -> dict[str, list[str]]:
    """Per domain, each capacity ratio's verdict in order: 'DFlash', 'baseline' or 'tie'."""
    word = lambda g: "DFlash" if g.above_zero else "baseline" if g.below_zero else "tie"
    return {d: [word(g) for g in points[points["domain"] == d]["gain"]] for d in DOMAINS}


def say_crossover(points: pd.DataFrame, paper_ratio: float, full_dflash: Mapping[str, float], lean: Any = None,
                  full: Any = None) -> None:
    """Per domain, who wins at each capacity ratio, what the point nearest the paper's ratio says, and
    how far the lean recipe (`lean`) and its DFlash sit from Table 1's (`full`, `full_dflash`: its tau)."""
    if lean is not None and full is not None:
        anchors = lambda r: r.steps * r.sequences_per_batch * r.anchors_per_sequence
        say(f"The lean recipe trains {lean.steps} steps of {lean.sequences_per_batch} replies with "
            f"{lean.anchors_per_sequence} anchors each, against Table 1's {full.steps} steps of {full.sequences_per_batch} "
            f"replies with {full.anchors_per_sequence}: {100 * anchors(lean) / anchors(full):.0f}% of its anchors.")
    ratios = sorted(points["capacity ratio"].unique())
    calls = crossover_verdicts(points)
    nearest = int(np.argmin([abs(r - paper_ratio) for r in ratios]))
    say(f"At capacity ratios {', '.join(f'{r:.2f}' for r in ratios)}, the higher tau per domain is: "
        + "; ".join(f"{d} {', '.join(calls[d])}" for d in DOMAINS)
        + f". Nearest the paper's ratio ({paper_ratio:.2f}), at {ratios[nearest]:.2f}: "
        + ", ".join(f"{d} {calls[d][nearest]}" for d in DOMAINS) + ". The lean recipe's DFlash reaches "
        + ", ".join(f"{points[points['domain'] == d]['tau DFlash'].iloc[0]:.2f} in {d} (Table 1's recipe: {full_dflash[d]:.2f})"
                    for d in DOMAINS) + ".")


def eagle3_loss_gain(eagle3: Mapping[str, Any], tv: Mapping[str, Any], seed: int) -> verdicts.Interval:
    """The baseline trained on Eagle3's loss against the same baseline trained on CE + TV, macro
    gain in percent (paired)."""
    return verdicts.macro_gain({d: eagle3[d].per_generation for d in DOMAINS}, {d: tv[d].per_generation for d in DOMAINS},
                               seed=seed)


def say_reasons(points: pd.DataFrame, loss_gain: verdicts.Interval, ratio_tv: float, gaps: Mapping[str, Any],
                deficit: Mapping[str, Mapping[str, float]], slot1: Mapping[str, Mapping[str, float]]) -> None:
    """What decides the ordering, from this section's measurements."""
    calls = crossover_verdicts(points)
    smallest, largest = min(points["capacity ratio"]), max(points["capacity ratio"])
    say(f"**Size.** At the smallest baseline (capacity ratio {smallest:.2f}) DFlash has the higher tau in "
        f"{sum(c[0] == 'DFlash' for c in calls.values())} of {len(DOMAINS)} domains; at the largest ({largest:.2f}) in "
        f"{sum(c[-1] == 'DFlash' for c in calls.values())}, and the baseline in {sum(c[-1] == 'baseline' for c in calls.values())}. "
        f"**Loss.** At capacity ratio {ratio_tv:.2f}, Eagle3's soft cross-entropy against the parallel drafters' CE + TV "
        f"moves the baseline's macro tau by {loss_gain.text(1)}% ({verdicts.compared(loss_gain, 'a gain', 'a loss', 'a tie')}). "
        f"**Branch points.** " + "; ".join(f"in {d}, {deficit_words(deficit[d])}" for d in DOMAINS)
        + ". **Slot 1** (always clean): " + ", ".join(f"{d} DFlash {slot1['dflash'][d]:.3f}, baseline {slot1['eagle'][d]:.3f}"
                                                    for d in DOMAINS) + ".")


def verdict_rows(acceptance: Mapping[str, Mapping[str, Any]], paper_tau: Mapping[str, Mapping[str, float]], window: float,
                 points: pd.DataFrame, paper_ratio: float) -> list[tuple[str, str, str, bool]]:
    """The box's rows for this section: the baseline's calibration, and the ordering at the paper's ratio."""
    eagle_in = all(abs(acceptance["eagle"][d].tau - paper_tau["eagle"][d]) <= window for d in DOMAINS)
    ratios = sorted(points["capacity ratio"].unique())
    nearest = ratios[int(np.argmin([abs(r - paper_ratio) for r in ratios]))]
    at_paper = points[points["capacity ratio"] == nearest]
    return [
        (f"The autoregressive baseline's tau also in the paper's regime (within ±{window} of Eagle3's in every domain)",
         " / ".join(f"{paper_tau['eagle'][d]:.2f}" for d in DOMAINS),
         " / ".join(f"{acceptance['eagle'][d].tau:.2f}" for d in DOMAINS), bool(eagle_in)),
        (f"At the paper's capacity ratio ({paper_ratio:.2f}; nearest measured {nearest:.2f}), DFlash out-accepts the "
         "baseline in every domain (lean recipe; gain's 95% interval above zero)",
         " / ".join(f"{100 * (paper_tau['dflash'][d] / paper_tau['eagle'][d] - 1):+.0f}%" for d in DOMAINS),
         ", ".join(f"{r['domain']} {r['gain'].text(1)}%" for _, r in at_paper.iterrows()),
         bool(all(g.above_zero for g in at_paper["gain"]))),
    ]


def result(*, points: pd.DataFrame, means: Mapping[str, Any], gaps: Mapping[str, Any], deficit: Mapping[str, Mapping[str, float]],
           loss_gain: verdicts.Interval, ratio_tv: float, tv_tau: Mapping[str, float], dependency_share: Mapping[str, float],
           paper_ratio: float, seeds: Sequence[int], threshold: float) -> dict:
    """Section 3.9's numbers for the chapter's result file."""
    triple = lambda i: [i.estimate, i.low, i.high]
    return {
        "seeds": list(seeds), "branch_entropy": threshold, "paper_capacity_ratio": paper_ratio,
        "dependency_share": dict(dependency_share),
        "map": [{"capacity_ratio": float(r["capacity ratio"]), "domain": r["domain"], "tau_dflash": float(r["tau DFlash"]),
                 "tau_eagle": float(r["tau EAGLE-style"]), "gain_percent": triple(r["gain"])} for _, r in points.iterrows()],
        "split": {k: {d: {part: float(_nanmean(v[part])) for part in ("clean", "branched", "share")} for d, v in by_d.items()}
                  for k, by_d in means.items()},
        "split_gap": {d: {part: triple(v) for part, v in g.items()} for d, g in gaps.items()},
        "deficit_parts": {d: dict(v) for d, v in deficit.items()},
        "loss_ablation": {"capacity_ratio": ratio_tv, "tv_tau": dict(tv_tau), "eagle3_over_tv_percent": triple(loss_gain)},
    }


def say_baseline_calibration(full: Mapping[str, Any], eagles: Mapping[float, Mapping[str, Any]],
                             paper_tau: Mapping[str, Mapping[str, float]], window: float) -> None:
    """Whether the baseline's tau lands in Eagle3's window (Table 1's recipe), and why a size cannot put
    it there: its math-to-chat ratio at every size of the map against Eagle3's."""
    outside = [d for d in DOMAINS if abs(full[d].tau - paper_tau["eagle"][d]) > window]
    paper_ratio = paper_tau["eagle"]["math"] / paper_tau["eagle"]["chat"]
    ratios = {r: e["math"].tau / e["chat"].tau for r, e in sorted(eagles.items())}
    say(f"**Calibrating the baseline too.** With Table 1's recipe the baseline's tau is "
        + " / ".join(f"{full[d].tau:.2f}" for d in DOMAINS) + " against Eagle3's "
        + " / ".join(f"{paper_tau['eagle'][d]:.2f}" for d in DOMAINS) + ": "
        + verdicts.either(not outside, f"inside the window (±{window}) in every domain.",
                          f"outside the window (±{window}) in {verdicts.word_list(outside)}.")
        + f" Eagle3's math is {paper_ratio:.2f} times its chat; this baseline's is "
        + ", ".join(f"{v:.2f} at capacity ratio {r:.2f}" for r, v in ratios.items())
        + f" and {full['math'].tau / full['chat'].tau:.2f} with Table 1's recipe. "
        + verdicts.either(max(ratios.values()) < paper_ratio - 0.25,
                          "Its size moves math and chat together, so no size gives Eagle3's shape: in this world chat "
                          "is nearly as easy as math for a drafter that samples in order, and the knobs that make chat "
                          "hard for DFlash (choices inside the block) cost such a drafter little. One toy world does not "
                          "hold both calibrations; the book keeps DFlash's.",
                          "A size of this baseline comes near Eagle3's shape, so both calibrations could be held."))
