"""Chapter 05's bookkeeping (the confidence head): the chapter's setup, the sentences its run's
numbers go into (each said as the Markdown output of the cell that measured it), its tables and
figures, the SGLang and TensorRT-LLM calibration files, the result file and the rows of the
verdict box. The method (the head, its loss, the calibrators, the threshold sweep) stays in the
notebook's visible code.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display
from matplotlib.ticker import MaxNLocator

from .... import calibration, scheduler
from ....record import Rounds
from ...result_files import results_dir, save_result
from ...serving import engines
from ...toy import corpus
from .. import interactive, verdicts
from ..results import plain, say, titled
from . import start

STS_BAR = 0.015  # the paper's "about 1%" mean ECE of a_k after STS, read as at most 1.5%
RAW_RANGE = (0.03, 0.08)  # the paper's raw ECE of a_k, 3-8%
HEADERS = {"position": "position k", "n_reached": "blocks reaching k", "conditional_acceptance": "acceptance at k",
           "conditional_auroc": "AUROC of c_k", "prefix_ece": "ECE of a_k", "prefix_brier": "Brier of a_k"}


def setup(profile_name: str, device_name: str, seed: int) -> tuple[Any, Any, Any]:
    """(profile, device, world): the book's setup (`pages.start`: theme, sizes, device, every generator
    seeded with `seed`, the toy world from the cache); the cell's first output says where the run is."""
    profile, device, _, world = start(profile_name, device_name, seed)
    return profile, device, world


def say_recipe(recipe: Any, study: Any, bce_weight: float, drafter_seeds: Sequence[int]) -> None:
    """The recipe's settings this run uses (they differ between profiles)."""
    say(f"This run drafts gamma = {recipe.gamma} tokens a round. The joint fine-tune trains "
        f"{recipe.finetune_steps} more steps with the BCE term at weight {bce_weight:g}; the head alone trains "
        f"{study.frozen_head_steps} steps. The rollouts take {study.rollout_prompts} held-out prompts per domain, "
        f"each generated {study.rollout_samples} time{'s' if study.rollout_samples != 1 else ''} (chapter 04's Table 1: "
        f"{recipe.eval_prompts} prompts x "
        f"{recipe.eval_samples} samples). Sections 5.2-5.6 measure the drafter of seed {drafter_seeds[0]}; "
        f"section 5.7 repeats them for the seeds {verdicts.word_list([str(s) for s in drafter_seeds])}.")


def say_training(trainable: Sequence[str], joint_history: Any, frozen_history: Any, recipe: Any, study: Any) -> None:
    """What the two trainings trained and how long they took."""
    say(f"The frozen drafter trains only {plain(list(trainable))}. The joint fine-tune took "
        f"{joint_history.seconds:.0f} s ({recipe.finetune_steps} steps, as trained, from the cache when it is warm); "
        f"the head alone {frozen_history.seconds:.0f} s ({study.frozen_head_steps} steps).")


def bce_figure(joint_history: Any, frozen_history: Any, joint_steps: int, frozen_steps: int) -> None:
    """The confidence BCE of the training batches along training (a moving average), both trainings."""
    smooth = lambda v, n: pd.Series(np.asarray(v, float)).rolling(max(1, n // 20)).mean()  # a window's mean at its last step
    fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
    for history, n, label in ((joint_history, joint_steps, "joint"),
                              (frozen_history, frozen_steps, "frozen drafter, head alone")):
        ax.plot(np.arange(1, len(history.confidence_bce) + 1), smooth(history.confidence_bce, n), label=label)
    ax.set_xlabel("training step (moving average)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("confidence BCE (training batches)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def tau_table(table1: Mapping[str, Any], baseline: Mapping[str, Any], report: Mapping[str, Any], recipe: Any,
              study: Any) -> pd.DataFrame:
    """Shows and returns tau per domain and macro: DSpark-Markov's Table 1 row, the control (as many steps,
    no head) and the drafter with the head on the same rollouts, with the change the head makes (%)."""
    table1_name = f"DSpark-Markov, chapter 04's Table 1 ({recipe.eval_prompts} x {recipe.eval_samples})"
    same_name = (f"DSpark-Markov + {recipe.finetune_steps} steps without the head, these rollouts "
                 f"({study.rollout_prompts} x {study.rollout_samples})")
    head_name = "+ confidence head (joint), these rollouts"
    tau = pd.DataFrame({
        table1_name: {d: table1[d].tau for d in corpus.DOMAINS},
        same_name: {d: baseline[d].tau for d in corpus.DOMAINS},
        head_name: {d: report[d].tau for d in corpus.DOMAINS},
    })
    tau.loc["macro"] = tau.mean()
    tau["change with the head (%)"] = 100 * (tau[head_name] / tau[same_name] - 1)
    display(titled(tau, "tau per domain: chapter 04's Table 1 row, the control without the head, and the"
                        " drafter with the head", 3))
    return tau


def say_head_change(records: Rounds, tau_change: float, head_change: Any, recipe: Any, study: Any) -> None:
    """Does the head cost tokens: the change of the macro tau with the head against the control, its
    interval and verdict."""
    columns = verdicts.either(
        recipe.eval_prompts == study.rollout_prompts, "on the same prompts with a different number of samples",
        f"on the first {recipe.eval_prompts} and the first {study.rollout_prompts} held-out prompts of each domain")
    verdict = verdicts.compared(head_change, "a gain outside the noise", "a loss outside the noise",
                                "a tie: the interval holds zero")
    say(f"{len(records)} full blocks were recorded ({plain(records.counts())}). Against the control, which had the "
        f"same steps and sees the same prompts and as many samples, the head {verdicts.raises(tau_change)} the macro "
        f"tau by {abs(tau_change):.2f}%, with a {100 * verdicts.LEVEL:.0f}% interval (paired bootstrap over the "
        f"generations) of {head_change.low:+.2f}% to {head_change.high:+.2f}%: {verdict}. Lowered by more than 2%: "
        f"{plain(tau_change < -2.0)}. Chapter 04's Table 1 column and these rollouts were measured {columns}.")


def raw_table(raw: pd.DataFrame) -> None:
    """Shows the raw head's ranking and calibration per position on the test blocks."""
    display(titled(raw[list(HEADERS)].rename(columns=HEADERS).set_index("position k"),
                   "raw confidence head per position, test blocks: ranking (AUROC) and calibration (ECE, Brier)", 3))


def say_ranking(raw: pd.DataFrame, raw_frozen: pd.DataFrame, test_blocks: int) -> None:
    """How well the raw head ranks, per position, beside the head trained alone and the paper's range."""
    auroc = raw["conditional_auroc"]
    say(f"On this run's {test_blocks} test blocks the raw head's AUROC ranges over "
        f"{auroc.min():.2f}-{auroc.max():.2f} across positions (the paper: 0.81-0.91); per position "
        f"{plain(auroc.round(3).tolist())}. The head trained alone on the frozen drafter: "
        f"{plain(raw_frozen['conditional_auroc'].round(3).tolist())}. Every position's AUROC at least 0.75: "
        f"{plain(float(auroc.min()) >= 0.75)}.")


def calibrator_table(metrics: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Shows and returns each calibrator's mean ECE, Brier and AUROC of a_k and c_k on the test split."""
    comparison = pd.DataFrame({name: {"mean ECE of a_k": m["prefix_ece"].mean(), "mean Brier of a_k": m["prefix_brier"].mean(),
                                      "mean AUROC of c_k": m["conditional_auroc"].mean(),
                                      "mean ECE of c_k (conditional)": m["conditional_ece"].mean()}
                               for name, m in metrics.items()}).T
    display(titled(comparison, "calibrators on the test split: survival product a_k and confidences c_k", 4))
    return comparison


def say_main_split(sts: Any, ece_drop: float, auroc_shift: float, best: str) -> None:
    """STS on the main split: its temperatures, the ECE drop, and that no ranking moved."""
    say(f"STS's temperatures per position: {np.round(sts.temperatures_, 2).tolist()}. On the test split STS lowers the "
        f"mean ECE of a_k by {ece_drop:.1f}% (the bar we set: 40% or more, {verdicts.yes_no(bool(ece_drop >= 40))}); "
        f"the largest change of a per-position AUROC is {auroc_shift:.1e}; the lowest ECE of a_k is {best}'s.")


def write_sts_files(sts: Any, metrics: Mapping[str, pd.DataFrame], fitted_on: int, profile: str) -> tuple[dict, dict]:
    """Writes STS's temperatures for SGLang and for TensorRT-LLM (`engines`), says so, and returns
    both payloads."""
    sts_payload = engines.sglang_sts_calibration(
        sts.temperatures_, dataset=f"dspark_lite toy world, chapter 05 ({profile} profile)",
        num_samples=fitted_on, ece_before=metrics["raw"]["prefix_ece"].tolist(),
        ece_after=metrics["STS"]["prefix_ece"].tolist())
    sts_file = engines.write_json(sts_payload, results_dir() / "engines" / "sglang_sts.json")
    trtllm_sts = engines.trtllm_sts_calibration(
        sts.temperatures_, dataset=sts_payload["dataset"], num_samples=fitted_on,
        ece_before=sts_payload["ece_before"], ece_after=sts_payload["ece_after"])
    trtllm_sts_file = engines.write_json(trtllm_sts, results_dir() / "engines" / "trtllm_sts.json")
    say(f"Wrote `{sts_file.name}` for SGLang's `{engines.SGLANG_STS_FLAG}` ({len(sts_payload['temperatures'])} "
        f"temperatures, fitted on {fitted_on} blocks) and `{trtllm_sts_file.name}` for TensorRT-LLM's "
        f"`{engines.TRTLLM_STS_FIELD}`, with the same temperatures.")
    return sts_payload, trtllm_sts


def resplit_table(split_drops: pd.DataFrame, resplits: int) -> None:
    """Shows the spread of each calibrator's ECE drop over the random resplits."""
    display(titled(split_drops.describe().loc[["mean", "std", "min", "max"]],
                   f"drop of the mean ECE of a_k below the raw head's (%), over {resplits} random splits", 1))


def say_sts_verdict(methods: Mapping[str, Any], comparison: pd.DataFrame, split_drops: pd.DataFrame,
                    test_blocks: int, resplits: int) -> dict[str, Any]:
    """Does STS win, on the main split and over the resplits, and where its ECE stands against the
    paper's: said, and returned as {"top_resplits", "sts_wins"} for the verdict box."""
    ece_of = comparison["mean ECE of a_k"].astype(float)
    best = comparison["mean ECE of a_k"].idxmin()
    mean_drops = split_drops.mean()
    top_resplits = str(mean_drops.idxmax()) if mean_drops.notna().any() else "none"
    fitted = [name for name in methods if name != "raw"]
    runner_up = min((n for n in fitted if n != best), key=lambda n: ece_of[n]) if best in fitted else "STS"
    main_sentence = verdicts.either(
        best == "raw", f"no calibrator lowers the mean ECE of the survival product below the raw head's ({ece_of['raw']:.4f})",
        verdicts.either(best == "STS",
                        f"STS has the lowest mean ECE of the survival product, {ece_of['STS']:.4f}, "
                        f"against {ece_of[runner_up]:.4f} for {runner_up} and {ece_of['raw']:.4f} for the raw head",
                        f"{best} has the lowest mean ECE of the survival product, {ece_of[best]:.4f}, "
                        f"against {ece_of['STS']:.4f} for STS and {ece_of['raw']:.4f} for the raw head"))
    sts_wins = best == "STS" and top_resplits == "STS"
    why = {"isotonic": ("Isotonic regression fits a free monotone map per slot instead of a single temperature; "
                        "with enough blocks per slot it can follow a shape of miscalibration that one "
                        "temperature cannot, and in this run that matters more than aiming at the product."),
           "per-position TS": ("Per-position temperature scaling has as many parameters as STS, and in this run "
                               "calibrating each slot against its own conditional acceptance also calibrates "
                               "the product better than STS's sequential fit does."),
           "none": "No calibrator could be measured on these splits."}
    verdict = verdicts.either(
        sts_wins, "STS wins in this run, as the paper's argument predicts.",
        verdicts.either("STS" in (best, top_resplits),
                        "STS wins on one count and not the other, so this run does not single out a best calibrator.",
                        f"STS does not win in this run. {why.get(top_resplits if best == 'raw' else best, '')}"))
    sts_top_count = int((split_drops.idxmax(axis=1) == "STS").sum()) if split_drops.notna().all(axis=None) else 0
    resplit_sentence = ("the mean ECE of the survival product falls below the raw head's by "
                        + ", ".join(f"{mean_drops[name]:.1f}% on average with {name} ({split_drops[name].min():.1f}% to "
                                    f"{split_drops[name].max():.1f}%)" for name in fitted)
                        + f". The largest mean drop is {top_resplits}'s, and STS has the largest drop in "
                          f"{sts_top_count} of {resplits} splits")
    sts_reaches = bool(ece_of["STS"] <= STS_BAR)
    noise_note = verdicts.either(sts_reaches, "",
        f"Part of what is left may be the binned ECE's own noise floor on {test_blocks} test blocks: "
        f"refitted on fresh splits, STS's drop below the raw head moves from {split_drops['STS'].min():.0f}% to "
        f"{split_drops['STS'].max():.0f}% from one split to the next. ")
    conditional = comparison["mean ECE of c_k (conditional)"].astype(float)
    cond_ece = verdicts.either(
        conditional["STS"] > conditional["raw"],
        f"STS made the mean ECE of the conditional confidences c_k worse, {conditional['raw']:.4f} -> "
        f"{conditional['STS']:.4f}: it calibrates the product the scheduler reads, and each factor only as far as that needs",
        f"STS also lowered the mean ECE of the conditional confidences c_k, {conditional['raw']:.4f} -> "
        f"{conditional['STS']:.4f}, though it fits only the product")
    say(f"On the main split, {main_sentence}. Over the {resplits} extra splits, {resplit_sentence}. {verdict}",
        f"Our raw head starts with a mean ECE of $a_k$ of {ece_of['raw']:.1%}, "
        f"{verdicts.inside(RAW_RANGE[0] <= ece_of['raw'] <= RAW_RANGE[1])} the paper's range (the paper: 3-8%); after "
        f"STS it is {ece_of['STS']:.1%}, which {verdicts.reaches(sts_reaches)} the paper's value (the paper: 1%, "
        f"read here as at most {STS_BAR:.1%}). {noise_note}{cond_ece}.")
    return {"top_resplits": top_resplits, "sts_wins": bool(sts_wins)}


def reliability_chart(calibrated: Mapping[str, np.ndarray], metrics: Mapping[str, pd.DataFrame], accepted: np.ndarray,
                      gamma: int) -> Any:
    """Figure 6 at toy scale: reliability of a_k at positions 1, 3, 5 and 7, raw and after STS."""
    positions = [k for k in (1, 3, 5, 7) if k <= gamma]
    survived = calibration.survival_targets(accepted, gamma)
    reliability = []
    for k in positions:
        panel = (f"position {k}: ECE raw {metrics['raw'].loc[k, 'prefix_ece']:.3f}, STS {metrics['STS'].loc[k, 'prefix_ece']:.3f}"
                 f"; AUROC of a_k {metrics['raw'].loc[k, 'prefix_auroc']:.2f}")
        for name in ("raw", "STS"):
            curve = calibration.reliability_curve(scheduler.survival(calibrated[name])[:, k - 1], survived[:, k - 1], bins=10)
            reliability.append(curve.to_frame().dropna().assign(position=panel, calibration=name))
    reliability = pd.concat(reliability).rename(columns={"mean_predicted": "predicted survival a_k",
                                                         "observed_frequency": "observed survival", "count": "blocks"})
    return interactive.curves_chart(
        reliability[["position", "calibration", "predicted survival a_k", "observed survival", "blocks"]],
        "predicted survival a_k", "observed survival", "calibration", column="position", diagonal=True,
        colors={"raw": "#de2d26", "STS": "#31a354"})  # hover a point for its bin's numbers


def threshold_figure(sweeps: Mapping[str, pd.DataFrame]) -> None:
    """Figure 5: per domain, accepted and rejected drafts per round and the share accepted, per threshold."""
    fig, axes = plt.subplots(3, 1, figsize=(6.5, 8.5), sharex=True, layout="constrained")
    for ax, domain in zip(axes, corpus.DOMAINS):
        sweep = sweeps[domain]
        x = sweep.index.to_numpy()
        ax.bar(x, sweep["accepted_per_round"], 0.07, color="#31a354", label="accepted drafts (left axis)")
        ax.bar(x, sweep["rejected_per_round"], 0.07, bottom=sweep["accepted_per_round"], color="#de2d26",
               label="rejected drafts (left axis)")
        rate = ax.twinx()
        rate.plot(x, sweep["acceptance_rate"], "o-", color="black", ms=3, label="share of verified drafts accepted (right axis)")
        rate.set_ylim(0, 1.02)
        rate.grid(False)
        rate.set_ylabel("share accepted", fontsize=9)
        shares = sweep["acceptance_rate"].dropna()
        ax.set_title(f"{domain}: {shares.iloc[0]:.0%} -> {shares.iloc[-1]:.0%} accepted" if len(shares) else domain)
        ax.set_xlabel("static threshold on c_k")
    for ax in axes:
        ax.set_ylabel("drafts per round")
    handles = [h for a in (axes[0], rate) for h in a.get_legend_handles_labels()[0]]
    fig.legend(handles=handles, fontsize=9, loc="outside lower center", ncol=2, frameon=False)
    plt.show()


def say_threshold(rates: pd.DataFrame, monotone: Mapping[str, bool], rise: pd.Series, gains_most: str) -> dict[str, str]:
    """Figure 5's reading: chat's share accepted from the lowest to the highest threshold that drafts,
    monotone per domain, the domain that gains most. Returns chat's ends for the verdict box."""
    chat = rates["chat"].dropna()
    chat_from, chat_to = verdicts.ends(chat, ".1%")
    chat_last_threshold = verdicts.ends(chat.index, "g")[1]
    say(f"In this run chat goes from {chat_from} accepted to {chat_to} at threshold {chat_last_threshold} (the paper: "
        f"45.7% at threshold 0 to 95.7% at 0.9), and the domain that gains the most is {gains_most} (the paper: chat). "
        f"Rise from the lowest to the highest threshold that drafts, in points: {plain((100 * rise).round(1).to_dict())}. "
        f"The share accepted rises monotonically with the threshold: {plain(monotone)}; in every domain: "
        f"{plain(all(monotone.values()))}; chat gains the most: {plain(gains_most == 'chat')}.")
    return {"chat_from": chat_from, "chat_to": chat_to, "chat_last_threshold": chat_last_threshold}


def seed_table(by_seed: pd.DataFrame, seeds: Sequence[int]) -> dict[str, Any]:
    """Shows sections 5.4-5.6 per drafter seed, says what every seed found, and returns the
    per-seed findings the verdict box reads."""
    display(titled(by_seed, "sections 5.4-5.6 for each drafter seed: mean ECE of a_k on the test split per "
                            "calibrator, the raw head's AUROC range, Figure 5's domain that gains most", 4))
    ece_seeds = lambda name: by_seed[f"ECE of a_k, {name}"].astype(float)
    which = lambda ok: "every seed" if ok.all() else ("some seeds and not others" if ok.any() else "no seed")
    found = {"per_seed_raw": ", ".join(f"{v:.1%}" for v in ece_seeds("raw")),
             "per_seed_sts": ", ".join(f"{v:.1%}" for v in ece_seeds("STS")),
             "raw_in_range": bool(ece_seeds("raw").between(*RAW_RANGE).all()),
             "sts_at_most": bool((ece_seeds("STS") <= STS_BAR).all()),
             "auroc_min_seeds": float(by_seed["AUROC min"].astype(float).min()),
             "sts_best_seeds": int((by_seed["lowest ECE"] == "STS").sum()),
             "chat_most_seeds": int((by_seed["threshold lifts most"] == "chat").sum()),
             "monotone_seeds": bool(by_seed["threshold monotone"].all()), "seeds": len(seeds)}
    say(f"Per seed, the raw head's mean ECE of $a_k$ is {found['per_seed_raw']}: inside the paper's range (the paper: "
        f"3-8%) for {which(ece_seeds('raw').between(*RAW_RANGE))}. After STS it is {found['per_seed_sts']}: at most "
        f"{STS_BAR:.1%} (the verdicts' reading of the paper's value; the paper: 1%) for "
        f"{which(ece_seeds('STS') <= STS_BAR)}. STS has the lowest ECE of the product for {found['sts_best_seeds']} of "
        f"{len(seeds)} seeds, the lowest per-position AUROC of any seed is {found['auroc_min_seeds']:.2f}, and the "
        f"static threshold lifts chat the most for {found['chat_most_seeds']} of {len(seeds)} seeds.")
    return found


def save_chapter_result(profile: str, device: Any, *, gamma: int, tau: pd.DataFrame, tau_change: float, head_change: Any,
                        records: Rounds, raw: pd.DataFrame, raw_frozen: pd.DataFrame, comparison: pd.DataFrame,
                        sts: Any, ece_drop: float, auroc_shift: float, split_drops: pd.DataFrame, calibrators: Mapping[str, Any],
                        rates: pd.DataFrame, monotone: Mapping[str, bool], rise: pd.Series, gains_most: str,
                        seeds: Sequence[int], by_seed: pd.DataFrame, histories: tuple[Any, Any], start: float) -> None:
    """Writes the chapter's result file (`confidence`) and says the chapter's run time."""
    best = comparison["mean ECE of a_k"].idxmin()
    result = {
        "gamma": gamma,
        "tau": tau.drop(columns="change with the head (%)").to_dict(),
        "tau_change_with_head_pct": tau_change,
        "tau_change_with_head_interval_pct": {"estimate": head_change.estimate, "low": head_change.low,
                                              "high": head_change.high},
        "blocks": records.counts(),
        "auroc_raw": raw["conditional_auroc"].tolist(),
        "auroc_raw_min": float(raw["conditional_auroc"].min()),
        "auroc_frozen_head": raw_frozen["conditional_auroc"].tolist(),
        "calibration": comparison.to_dict(orient="index"),
        "sts_temperatures": sts.temperatures_.tolist(),
        "sts_ece_drop_pct": float(ece_drop),
        "sts_auroc_max_change": auroc_shift,
        "ece_drop_over_resplits_pct": split_drops.to_dict(orient="list"),
        "best_calibrator": best,
        "largest_mean_drop_over_resplits": calibrators["top_resplits"],
        "sts_wins": bool(calibrators["sts_wins"]),
        "threshold_acceptance": rates.to_dict(),
        "acceptance_monotone": dict(monotone),
        "acceptance_rise_points": (100 * rise).to_dict(),
        "gains_most": gains_most,
        "drafter_seeds": list(seeds),
        "by_seed": {int(s): row.to_dict() for s, row in by_seed.iterrows()},
        "train_seconds": {"joint": histories[0].seconds, "frozen_head": histories[1].seconds},
        "chapter_seconds": time.perf_counter() - start,
    }
    save_result("confidence", result, profile, device=str(device))
    say(f"Chapter run time: {result['chapter_seconds'] / 60:.1f} min.")


def verdict_rows(raw: pd.DataFrame, ece_of: pd.Series, ece_drop: float, split_drops: pd.DataFrame, resplits: int,
                 calibrators: Mapping[str, Any], threshold: Mapping[str, str], gains_most: str,
                 seeds: Mapping[str, Any]) -> list[tuple[str, str, str, bool]]:
    """The verdict box's rows: a claim is reproduced only if every drafter seed shows it (section 5.7)."""
    auroc_min, auroc_max = float(raw["conditional_auroc"].min()), float(raw["conditional_auroc"].max())
    best = ece_of.idxmin()
    n = seeds["seeds"]
    return [
        ("Per-position AUROC of the raw confidence, at least the paper's lowest", "0.81-0.91",
         f"{auroc_min:.2f}-{auroc_max:.2f}; lowest over {n} seeds {seeds['auroc_min_seeds']:.2f}",
         bool(seeds["auroc_min_seeds"] >= 0.81)),
        ("The raw head's mean ECE of a_k lies in the paper's range", "3-8%",
         f"{ece_of['raw']:.1%}; per seed {seeds['per_seed_raw']}", seeds["raw_in_range"]),
        ("STS brings the mean ECE of a_k to about 1% (at most 1.5%)", "1%",
         f"{ece_of['STS']:.1%} (a {ece_drop:.1f}% drop; {split_drops['STS'].min():.0f}% to "
         f"{split_drops['STS'].max():.0f}% over {resplits} resplits); per seed {seeds['per_seed_sts']}",
         seeds["sts_at_most"]),
        ("STS calibrates the survival product best (lowest ECE, largest mean drop over resplits)", "STS",
         f"lowest ECE: {best}; largest mean drop: {calibrators['top_resplits']}; lowest ECE for "
         f"{seeds['sts_best_seeds']} of {n} seeds", bool(calibrators["sts_wins"] and seeds["sts_best_seeds"] == n)),
        ("A static threshold raises the share accepted in every domain, chat the most", "chat 45.7% -> 95.7%",
         f"chat {threshold['chat_from']} -> {threshold['chat_to']} at {threshold['chat_last_threshold']}; most: "
         f"{gains_most}; chat the most for {seeds['chat_most_seeds']} of {n} seeds",
         bool(seeds["monotone_seeds"] and seeds["chat_most_seeds"] == n)),
    ]
