"""Chapter 03's bookkeeping (parallel drafting): the world it opens, the sentences its measurements
go into (said as each measuring cell's Markdown output), its tables and figures, the result file
and the verdict box's rows. The method (the drafters, the trainer, the per-slot acceptance) and
the tests that decide each verdict stay in the notebook.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from ...result_files import save_result
from ...toy import collisions, corpus
from ...toy.knobs import CorpusKnobs
from ..results import say
from .. import interactive, results, verdicts

NAMES = {"dflash": "DFlash", "eagle": "EAGLE-style"}
COLORS = {"dflash": "#3182bd", "eagle": "#e6550d"}
DOMAINS = corpus.DOMAINS


def _layers_read(target: Any, recipe: Any) -> str:
    n_layers = target.config.num_hidden_layers
    layer_ids = tuple(recipe.target_layer_ids)
    return verdicts.either(sorted(layer_ids) == list(range(n_layers)), f"all {n_layers} of the target's layers",
                           f"the target's layers {', '.join(map(str, layer_ids))} (of {n_layers})")


def say_recipe(target: Any, recipe: Any, seeds: Sequence[int]) -> None:
    """The drafter recipe this profile sets: gamma, the target layers read, each drafter's depth,
    training steps and seeds."""
    say(f"This profile drafts gamma = {recipe.gamma} tokens a round, so tau lies between 1 and {recipe.gamma + 1}. "
        f"Both drafters read {_layers_read(target, recipe)}. DFlash has {verdicts.plural(recipe.dflash_layers, 'decoder layer')} and the "
        f"EAGLE-style drafter {verdicts.plural(recipe.eagle_layers, 'decoder layer')}; DFlash trains for "
        f"{recipe.steps} steps and the EAGLE-style drafter for {recipe.eagle_steps} (`eagle_steps`), each from "
        f"{verdicts.plural(len(seeds), 'training seed')} ({results.plain(list(seeds))}).")


def knobs_table(world: Any) -> None:
    """The corpus knobs of this world beside their defaults."""
    knobs = pd.Series(asdict(world.knobs), name="value").to_frame()
    knobs["default"] = pd.Series(asdict(CorpusKnobs()))
    display(results.titled(knobs, "corpus knobs of this world, against their defaults"))


def mask_figure(mask: Any, anchors: Any, gamma: int, length: int) -> None:
    """The block-attention mask of a few anchors on a `length`-token context, blue where a slot may attend."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.imshow(mask.numpy(), cmap="Blues", aspect="auto", interpolation="nearest")
    ax.axvline(length - 0.5, color="black", lw=1)
    ax.set_xlabel(f"keys: {length} context positions | the three blocks")
    ax.set_ylabel("queries: block slots")
    ax.set_yticks([gamma * i for i in range(anchors.shape[1])], [f"block @ {a}" for a in anchors[0].tolist()])
    ax.set_title("Who a block slot may attend to (blue)")
    plt.show()


def say_loss(recipe: Any, gamma: int) -> None:
    """The loss this recipe trains with, and whether it is the paper's (0.1 CE + 0.9 TV, decay 4)."""
    decay = recipe.loss_decay or gamma  # None means gamma
    loss = f"{recipe.ce_weight:g} CE + {recipe.tv_weight:g} TV, with w_k = exp(-(k-1)/{decay:g})"
    paper_loss = (recipe.ce_weight, recipe.tv_weight, decay) == (0.1, 0.9, 4)  # the paper's and DeepSpec's
    eagle3 = recipe.eagle_loss == "eagle3"
    say(f"This recipe trains DFlash with {loss}: " + verdicts.either(paper_loss, "the paper's loss", "not the paper's loss")
        + "; and the EAGLE-style baseline with " + verdicts.either(
            eagle3, "Eagle3's soft cross-entropy against the target's distribution, step weights 0.8^(k-1): DeepSpec's.",
            "the same loss as DFlash, not Eagle3's."))


def say_training(recipe: Any, seeds: Sequence[int], train_seconds: Mapping[str, float]) -> None:
    """How long each drafter trained per seed (as trained, even when loaded from the cache now)."""
    say(f"Each drafter trained from {verdicts.plural(len(seeds), 'seed')}: DFlash for {recipe.steps} steps and the "
        f"EAGLE-style baseline for {recipe.eagle_steps}. Training took {train_seconds['dflash']:.0f} s per seed for "
        f"DFlash and {train_seconds['eagle']:.0f} s for the baseline, {sum(train_seconds.values()) / 60:.1f} minutes "
        "of training per seed for the pair on the CPU that trained them (a cached drafter keeps the time it was "
        "trained in). The curves below are the first seed's.")


def training_curves(histories: Mapping[str, Any], gamma: int, steps: int, first_seed: int) -> None:
    """The first seed's training loss and prefix survival (accept_rate@1 and @gamma) per drafter,
    as moving averages over a twentieth of the steps."""
    window = max(1, steps // 20)
    smooth = lambda values, window: pd.Series(np.asarray(values, dtype=float)).rolling(window).mean()  # NaN until full
    fig, axes = plt.subplots(3, 1, figsize=(6.5, 9.5), layout="constrained")
    for kind, history in histories.items():
        axes[0].plot(smooth(history.loss, window), label=kind)
        survival = np.asarray(history.prefix_survival_tv)
        for k, style in ((1, "-"), (gamma, "--")):
            axes[1 if kind == "dflash" else 2].plot(smooth(survival[:, k - 1], window), style,
                                                    label=f"prefix survival @{k}")
    titles = (f"training loss (CE + TV), seed {first_seed}", "DFlash: prefix survival (accept_rate@k), from 1 - TV",
              "EAGLE-style: prefix survival (accept_rate@k), from 1 - TV")
    for ax, title, label in zip(axes, titles, ("loss", "prefix survival", "prefix survival")):
        ax.set_title(title)
        ax.set_ylabel(label)
        ax.set_xlabel(f"step (moving average over {window})")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def tau_table(acceptance: Mapping[str, Mapping[str, Any]], paper_tau: Mapping[str, Mapping[str, float]],
              seeds: Sequence[int], seed: int, gamma: int) -> tuple[pd.DataFrame, dict[str, verdicts.Interval]]:
    """Show tau per domain beside the paper's, each drafter's seed spread and DFlash minus the
    EAGLE-style drafter with its 95% interval (paired bootstrap over seeds, then generations);
    return (the table, that difference per domain)."""
    table = pd.DataFrame({
        "EAGLE-style (ours)": {d: acceptance["eagle"][d].tau for d in DOMAINS},
        "DFlash (ours)": {d: acceptance["dflash"][d].tau for d in DOMAINS},
        "Eagle3 (paper)": paper_tau["eagle"],
        "DFlash (paper)": paper_tau["dflash"],
    })
    for kind, name in (("eagle", "EAGLE-style"), ("dflash", "DFlash")):
        table[f"{name}: seed mean ± sd"] = [verdicts.seed_spread(acceptance[kind][d].seed_taus) for d in DOMAINS]
    gap = {d: verdicts.tau_difference(acceptance["dflash"][d].per_generation, acceptance["eagle"][d].per_generation,
                                      seed=seed) for d in DOMAINS}
    table["DFlash - EAGLE-style [95%]"] = [str(gap[d]) for d in DOMAINS]
    display(results.titled(table, f"tau per round, gamma = {gamma}, T = 1 (ours: mean of {len(seeds)} training seeds)", 2))
    return table, gap


def _calibration_verdict(table: pd.DataFrame, in_window: Mapping[str, bool], chat_lowest: bool, lowest: str) -> str:
    outside = [d for d, ok in in_window.items() if not ok]
    text = verdicts.either(not outside, "landed inside the window in every domain",
                           "landed outside the window on " + verdicts.word_list(
                               f"{d} ({table.loc[d, 'DFlash (ours)']:.2f})" for d in outside))
    return text + verdicts.either(chat_lowest, ", with chat the lowest", f", and chat was not the lowest ({lowest} was)")


def say_calibration(table: pd.DataFrame, window: float, in_window: Mapping[str, bool], margin: Mapping[str, float],
                    lowest: str, chat_lowest: bool, chat_gap: Mapping[str, verdicts.Interval]) -> None:
    """The calibration check (DFlash's tau within `window` of the paper's, chat the lowest) and
    chat against the next-lowest domain for each drafter."""
    say(f"**Calibration.** In this run DFlash's tau {_calibration_verdict(table, in_window, chat_lowest, lowest)}. "
        f"The window is ±{window:g} around the paper's tau: "
        + ", ".join(f"{d} {verdicts.inside(ok)}" for d, ok in in_window.items())
        + f"; the margin left inside it is {results.plain({d: round(m, 2) for d, m in margin.items()})}.",
        "Chat minus the next-lowest domain (95% interval, unpaired: other prompts): "
        + ", ".join(f"{NAMES[k]} {v}" for k, v in chat_gap.items()) + ".")


def eagle_summary(dflash_wins: Sequence[str], eagle_wins: Sequence[str], ties: Sequence[str]) -> str:
    """Where the EAGLE-style drafter beats DFlash, loses to it and ties, as one phrase."""
    text = verdicts.by_domains([("beats DFlash", eagle_wins), ("loses to it", dflash_wins),
                                ("ties with it within the noise", ties)])
    return text + verdicts.either(list(dflash_wins) == list(DOMAINS), ", as the paper's Eagle3 does", "")


def tau_figure(table: pd.DataFrame, gamma: int) -> None:
    """Bars of tau per domain: both drafters, ours beside the paper's."""
    fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
    table[["EAGLE-style (ours)", "DFlash (ours)", "Eagle3 (paper)", "DFlash (paper)"]].plot.bar(
        ax=ax, color=["#9ecae1", "#3182bd", "#fdd0a2", "#e6550d"], rot=0)
    ax.set_ylabel("tau (tokens per round)")
    ax.set_title(f"tau per round, gamma = {gamma}, T = 1")
    ax.set_xlabel("domain")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def say_ordering(table: pd.DataFrame, paper_tau: Mapping[str, Mapping[str, float]], gap: Mapping[str, Any],
                 dflash_wins: Sequence[str], eagle_wins: Sequence[str], ties: Sequence[str]) -> None:
    """Whether the paper's ordering (DFlash above Eagle3 in every domain) reproduces, domain by domain."""
    summary = eagle_summary(dflash_wins, eagle_wins, ties)
    eagle_above_paper = [d for d in DOMAINS if table.loc[d, "EAGLE-style (ours)"] > paper_tau["eagle"][d]]
    above = verdicts.either(bool(eagle_above_paper),
                            f" Against the paper's Eagle3, ours accepts more on {verdicts.word_list(eagle_above_paper)}.",
                            " Ours accepts fewer than the paper's Eagle3 in every domain.")
    ours_md = ("Our EAGLE-style drafter, trained by the same trainer on the same replies for the same steps, "
               f"{summary} (the table above, with each difference's 95% interval).{above}")
    say(verdicts.either(
        list(dflash_wins) == list(DOMAINS),
        "**DFlash beats the autoregressive baseline in every domain, as in the paper's Table 1**, each difference "
        "outside its 95% interval (the table above). Our EAGLE-style drafter was trained by the same trainer on the "
        f"same replies for the same steps.{above}",
        verdicts.either(not dflash_wins, "**The paper's ordering does not reproduce here.** ",
                        "**The paper's ordering reproduces only in part.** ")
        + f"The paper's Eagle3 sits below DFlash in every domain (Table 1). {ours_md}"),
        "DFlash minus the autoregressive baseline, per domain: "
        + ", ".join(f"{d} {gap[d]} ({verdicts.compared(gap[d], 'DFlash ahead', 'the baseline ahead', 'a tie')})"
                    for d in DOMAINS) + ".")


def say_ordering_causes(dependency: Mapping[str, Mapping[str, float]], drafter_shares: Mapping[str, float],
                        target: Any, recipe: Any) -> None:
    """What this run measured of the setting: the drafters' sizes, the layers they read, and each
    domain's share of the next-but-one token's entropy that the token in between settles."""
    read = _layers_read(target, recipe)
    share = {d: 100 * v["mutual_information"] / v["marginal_entropy"] for d, v in dependency.items()}
    say(f"In this run DFlash is {100 * drafter_shares['dflash']:.1f}% and the EAGLE-style drafter "
        f"{100 * drafter_shares['eagle']:.1f}% of the target's non-embedding parameters, and both read {read}. "
        "The share of the next-but-one token's entropy that only the token in between settles is "
        + ", ".join(f"{share[d]:.0f}% in {d}" for d in dependency) + ".")


def slot_figure(slot_mean: Mapping[str, Mapping[str, list]], gamma: int, n_seeds: int) -> None:
    """Per-slot acceptance per domain for both drafters, with 95% bands."""
    slots = np.arange(1, gamma + 1)
    fig, axes = plt.subplots(1, len(DOMAINS), figsize=(7, 2.9), sharey=True, layout="constrained")
    for ax, d in zip(axes, DOMAINS):
        for k in ("eagle", "dflash"):
            mid = np.array([v.estimate for v in slot_mean[k][d]])
            low, high = np.array([v.low for v in slot_mean[k][d]]), np.array([v.high for v in slot_mean[k][d]])
            ax.plot(slots, mid, "o-", ms=3, color=COLORS[k], label=NAMES[k])
            ax.fill_between(slots, low, high, color=COLORS[k], alpha=0.2, lw=0)
        ax.set_title(d, fontsize=10)
        ax.set_xticks(slots)
        ax.set_xlabel("slot k")
    axes[0].set_ylabel("per-slot acceptance (1 - TV)")
    axes[-1].legend(fontsize=8, loc="lower left")
    fig.suptitle(f"Per-slot acceptance on held-out target replies (mean of {n_seeds} seeds; bands: 95%)", fontsize=10)
    plt.show()


def fall_table(slot_mean: Mapping[str, Any], fall: Mapping[str, Any], extra_fall: Mapping[str, Any],
               gamma: int, n_replies: int, n_seeds: int) -> None:
    """The table of each drafter's per-slot acceptance from slot 1 to gamma, its fall and DFlash's excess fall."""
    table = pd.DataFrame({
        **{f"{NAMES[k]}: slot 1 -> slot {gamma}": {d: f"{slot_mean[k][d][0].estimate:.3f} -> "
                                                      f"{slot_mean[k][d][-1].estimate:.3f}" for d in DOMAINS}
           for k in slot_mean},
        **{f"{NAMES[k]}: fall [95% interval]": {d: fall[k][d].text(3) for d in DOMAINS} for k in slot_mean},
        "DFlash's fall minus EAGLE-style's": {d: extra_fall[d].text(3) for d in DOMAINS},
    })
    display(results.titled(table, f"per-slot acceptance from slot 1 to slot {gamma}, per domain "
                                  f"({n_replies} held-out replies each, {n_seeds} seeds)"))


def say_suffix_decay(fall: Mapping[str, Mapping[str, verdicts.Interval]], extra_fall: Mapping[str, verdicts.Interval],
                     decays_on: Sequence[str], decay_reproduced: bool, gamma: int, n_seeds: int, n_replies: int) -> None:
    """The per-slot verdict on suffix decay: each drafter's fall from slot 1 to gamma, DFlash's
    excess over the baseline on chat, and the test's outcome."""
    falls = {k: verdicts.word_list(f"{verdicts.falls_by(fall[k][d].estimate, digits=3)} on {d}" for d in DOMAINS)
             for k in ("dflash", "eagle")}
    verdict = verdicts.either(
        decay_reproduced, "suffix decay is reproduced: DFlash's chat acceptance falls along the block, by more than "
                          "the autoregressive drafter's, both beyond the noise",
        "suffix decay is not reproduced by this test: DFlash's chat fall, or its excess over the autoregressive "
        "drafter's, is inside the noise")
    say(f"From slot 1 to slot {gamma}, DFlash's per-slot acceptance {falls['dflash']}; the autoregressive drafter's "
        f"{falls['eagle']}. DFlash's fall is beyond the noise on {verdicts.domains_phrase(decays_on, DOMAINS)}. On chat it "
        f"exceeds the autoregressive drafter's by {extra_fall['chat'].text(3)} (paired, the same replies). So in this "
        f"run **{verdict}**.",
        f"The values are means over the {n_seeds} training seeds; the intervals ({verdicts.LEVEL:.0%}) resample the "
        f"seeds, then the {n_replies} held-out replies of each domain.")


def figure2_chart(acceptance: Mapping[str, Mapping[str, Any]], paper_fig2: Mapping[tuple[str, str], list]) -> None:
    """The paper's Figure 2 at toy scale: conditional acceptance per draft position, ours beside the
    paper's endpoints, with hover tooltips."""
    line_colors = {"EAGLE-style (ours)": "#e6550d", "EAGLE-style (paper)": "#fdae6b",
                   "DFlash (ours)": "#3182bd", "DFlash (paper)": "#9ecae1"}
    ours = [{"domain": domain, "drafter": f"{NAMES[kind]} (ours)", "draft position k": k, "conditional acceptance": value}
            for kind in ("eagle", "dflash") for domain in DOMAINS
            for k, value in enumerate(np.array(acceptance[kind][domain].conditional, dtype=float), start=1)]
    paper = [{"domain": domain, "drafter": f"{NAMES[kind]} (paper)", "draft position k": k, "conditional acceptance": value}
             for (kind, domain), points in paper_fig2.items() for k, value in points]
    fig2 = pd.DataFrame(ours + paper).dropna()  # NaN: no round reached position k
    display(interactive.curves_chart(fig2, "draft position k", "conditional acceptance", "drafter", column="domain",
                                     colors=line_colors))  # hover a point for its exact value


def conditional_tables(decay: Mapping[str, Mapping[str, float]], slopes: Mapping[str, Mapping[str, Any]],
                       acceptance: Mapping[str, Mapping[str, Any]], gamma: int) -> None:
    """Three tables under Figure 2: the conditional curve's fall from position 1 to gamma, its fitted
    slope per position, and the share of chat rounds that reach each slot."""
    display(results.titled(pd.DataFrame({f"{NAMES[k]}: position 1 - position {gamma}": v for k, v in decay.items()}),
                           f"fall of the conditional acceptance from position 1 to position {gamma}, per domain", 3))
    display(results.titled(pd.DataFrame({f"{NAMES[k]}: fitted slope per position [95% interval]":
                                         {d: v.text(3) for d, v in s.items()} for k, s in slopes.items()}),
                           "trend along the block: fitted slope of the conditional acceptance per position"))
    reach = pd.DataFrame({NAMES[k]: {f"slot {j}": 1.0 if j == 1 else acceptance[k]["chat"].prefix_survival[j - 2]
                                     for j in range(1, gamma + 1)} for k in decay})
    display(results.titled(reach.T, "chat: share of rounds that reach each slot (what the conditional curve averages over)", 3))


def say_conditional(decay: Mapping[str, Mapping[str, float]], slopes: Mapping[str, Mapping[str, verdicts.Interval]],
                    acceptance: Mapping[str, Mapping[str, Any]], paper_fig2: Mapping[tuple[str, str], list],
                    conditional_decay: bool, eagle_not_falling: Sequence[str], gamma: int) -> None:
    """Figure 2's reading: DFlash's and the baseline's conditional falls, DFlash's beside the
    paper's, both chat slopes and the verdict of the slope test, and how many rounds reach slot gamma."""
    paper_fall = {d: 100 * (paper_fig2[("dflash", d)][0][1] - paper_fig2[("dflash", d)][-1][1])
                  for d in DOMAINS if ("dflash", d) in paper_fig2}
    dflash_fall = {d: 100 * decay["dflash"][d] for d in DOMAINS}
    fall_text = lambda points: verdicts.falls_by(points, digits=1, unit=" points")
    same_size = {}  # "larger than" -> the domains where ours is larger than the paper's (within 2 points: about as large)
    for d in paper_fall:
        same_size.setdefault(verdicts.size_against(dflash_fall[d], paper_fall[d], tolerance=2.0), []).append(d)
    decay_vs_paper = verdicts.word_list(f"{r} the paper's on {verdicts.word_list(ds)}" for r, ds in same_size.items())
    say(f"From position 1 to position {gamma}, DFlash's curve "
        + verdicts.word_list(f"{fall_text(v)} on {d}" for d, v in dflash_fall.items())
        + f", so at toy scale the decay is {decay_vs_paper} (within two points counts as about as large). "
        "The autoregressive curve "
        + verdicts.word_list(f"{fall_text(100 * decay['eagle'][d])} on {d}" for d in DOMAINS) + ".",
        f"DFlash's chat slope is {slopes['dflash']['chat'].text(3)} per position "
        f"({verdicts.slope_words(slopes['dflash']['chat'])}) and the autoregressive drafter's "
        f"{slopes['eagle']['chat'].text(3)}; the EAGLE-style curve does not fall on: {results.plain(list(eagle_not_falling))}. "
        f"This run **{verdicts.meets(conditional_decay)} the slope test**. On chat, "
        f"{acceptance['dflash']['chat'].prefix_survival[gamma - 2]:.2f} of DFlash's rounds reach slot {gamma}.")


def latency_figure(latency: Mapping[str, Mapping[int, float]], gammas: Sequence[int]) -> None:
    """The draft call's median time against gamma for both drafters, as a figure and a table."""
    latency_ms = pd.DataFrame({NAMES[k]: {g: 1e3 * s for g, s in v.items()} for k, v in latency.items()})
    latency_ms.index.name = "gamma"
    fig, ax = plt.subplots(figsize=(6, 3.4), layout="constrained")
    for kind in ("eagle", "dflash"):
        ax.plot(latency_ms.index, latency_ms[NAMES[kind]], "o-", color=COLORS[kind], label=NAMES[kind])
    ax.set_xlabel("gamma (drafted tokens)")
    ax.set_xticks(list(gammas))
    ax.set_ylabel("draft call (ms, median)")
    ax.set_ylim(bottom=0)
    ax.set_title("One block forward vs gamma sequential passes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    display(results.titled(latency_ms.T, "draft call (ms, median) at each gamma: one block forward against gamma passes", 2))


def say_latency(pair: tuple[int, int], pair_ratio: Mapping[str, float], block_scales_slowly: bool) -> None:
    """How much each drafter's draft call grew between the two gammas of `pair`, and the verdict
    (DFlash's increase under a third of the sequential drafter's)."""
    growth = verdicts.either(
        block_scales_slowly, "far more slowly (its increase is under a third of the sequential drafter's)",
        verdicts.either(pair_ratio["dflash"] < pair_ratio["eagle"], "more slowly, but not by the factor of three we look for",
                        "no more slowly than the sequential drafter's on this machine"))
    say(f"Going from gamma = {pair[0]} to gamma = {pair[1]} multiplied DFlash's draft call by "
        f"{pair_ratio['dflash']:.2f}x and the autoregressive drafter's by {pair_ratio['eagle']:.2f}x: "
        f"**the block's cost grows {growth}**.")


def per_token_table(per_token_ms: pd.DataFrame, gamma: int) -> None:
    """Eq. 1's estimated time per generated token, per domain and drafter."""
    display(results.titled(per_token_ms.rename_axis("ms per token (Eq. 1)"),
                           f"estimated time per generated token on this machine, gamma = {gamma} (Eq. 1)", 2))


def say_per_token(verify: float, draft_at_gamma: Mapping[str, float], gamma: int, faster_on: Sequence[str]) -> None:
    """The two sides of Eq. 1 as timed here, and where DFlash comes out ahead per token."""
    say(f"T_verify = {1e3 * verify:.2f} ms and T_draft at gamma = {gamma}: "
        + ", ".join(f"{NAMES[k]} {1e3 * v:.2f} ms" for k, v in draft_at_gamma.items())
        + f". Per generated token (Eq. 1), DFlash comes out ahead **{'in ' + verdicts.domains_phrase(faster_on, DOMAINS)}**.")


def collision_shares(counts: Sequence[Any]) -> pd.DataFrame:
    """Show and return the share of coherent, mixed and other samples per phrasing set and source."""
    rows = pd.DataFrame([{"phrasings": c.phrasings, "source": c.source, **c.counts} for c in counts])
    shares = rows.groupby(["phrasings", "source"], sort=False)[list(collisions.OUTCOMES)].sum()
    shares = shares.div(shares.sum(axis=1), axis=0)
    display(results.titled(shares, "chat phrasings: share of coherent, mixed and other samples, target and drafters", 3))
    return shares


def collision_figure(shares: pd.DataFrame, phrasings: Sequence[Any], counts: Sequence[Any]) -> None:
    """Stacked bars of the shares per phrasing set, then a few mixed openers each source drew."""
    fig, axes = plt.subplots(len(phrasings), 1, figsize=(7, 2.6 * len(phrasings)), sharex=True, layout="constrained")
    for ax, phrase_set in zip(axes, phrasings):
        shares.loc[phrase_set.name].plot.barh(stacked=True, ax=ax, color=["#31a354", "#de2d26", "#bdbdbd"], legend=False)
        ax.set_title(f"{phrase_set.name}: " + " / ".join(f'"{h.strip()} ..."' for h in phrase_set.heads))
        ax.set_xlabel("share of samples")
    fig.legend(*axes[-1].get_legend_handles_labels(), fontsize=8, loc="outside right upper")
    plt.show()
    examples = {c.source: c.examples["mixed"][:3] for c in counts if c.phrasings == "opener" and c.examples["mixed"]}
    print("mixed openers, examples:", results.plain({k: [repr(x) for x in v] for k, v in examples.items()}))


def say_collision(mixed: Mapping[str, float], n_openers: int, collision_seen: bool) -> None:
    """The mixed openers of each source and the verdict (DFlash ten points above the baseline)."""
    verdict = verdicts.either(
        collision_seen,
        "the collision is plain: the parallel block mixes phrasings that the target and the autoregressive drafter keep apart",
        "the collision does not show in this run: DFlash's share of mixed openers is not ten points above the "
        "autoregressive drafter's")
    say(f"The target spreads its first reply tokens over {n_openers} openers. At the opener, "
        f"{100 * mixed['DFlash']:.0f}% of DFlash's drafts are mixed, against {100 * mixed['EAGLE-style']:.0f}% of the "
        f"autoregressive drafter's and {100 * mixed['target']:.0f}% of the target's own continuations: **{verdict}**.")


def save_result_file(profile_name: str, device: Any, *, gamma: int, world: Any, entropy: Mapping[str, float],
                     seeds: Sequence[int], acceptance: Mapping[str, Mapping[str, Any]], trained: Mapping[str, Any],
                     margin: Mapping[str, float], paper_tau: Mapping[str, Mapping[str, float]],
                     in_window: Mapping[str, bool], chat_lowest: bool, dflash_wins: list[str], eagle_wins: list[str],
                     gap: Mapping[str, Any], chat_gap: Mapping[str, Any], chat_dependency: Mapping[str, float],
                     crossover: Mapping[str, Any],
                     drafter_shares: Mapping[str, float], chat_decay_points: float, decay_reproduced: bool,
                     conditional_decay: bool, slot_mean: Mapping[str, Any], fall: Mapping[str, Any],
                     extra_fall: Mapping[str, Any], heldout: Mapping[str, Any], eagle_not_falling: list[str],
                     slopes: Mapping[str, Any], latency: Mapping[str, Mapping[int, float]],
                     ratio_4_16: Mapping[str, float] | None, verify: float, per_token_ms: pd.DataFrame,
                     dflash_faster_on: list[str], shares: pd.DataFrame, phrasings: Sequence[Any],
                     train_seconds: Mapping[str, float], replies: Any, recipe: Any) -> None:
    """Write the chapter's result file (`parallel_drafting`): every number its prose and box report
    (section 3.9's in `crossover`, from `ch03_crossover.result`)."""
    result = {
        "crossover": crossover,
        "gamma": gamma,
        "knobs": asdict(world.knobs),
        "entropy": entropy,
        "seeds": seeds,
        "tau": {kind: {d: acceptance[kind][d].tau for d in DOMAINS} for kind in trained},
        "tau_per_seed": {kind: {d: acceptance[kind][d].seed_taus for d in DOMAINS} for kind in trained},
        "calibration_margin": margin,
        "conditional_acceptance": {kind: {d: acceptance[kind][d].conditional for d in DOMAINS} for kind in trained},
        "prefix_survival": {kind: {d: acceptance[kind][d].prefix_survival for d in DOMAINS} for kind in trained},
        "paper_tau": paper_tau,
        "calibrated": bool(all(in_window.values()) and chat_lowest),
        "dflash_beats_eagle_on": dflash_wins,
        "eagle_beats_dflash_on": eagle_wins,
        "dflash_minus_eagle_interval": {d: [gap[d].estimate, gap[d].low, gap[d].high] for d in DOMAINS},
        "chat_minus_next_lowest": {k: [v.estimate, v.low, v.high] for k, v in chat_gap.items()},
        "chat_mi_share": chat_dependency["mutual_information"] / chat_dependency["marginal_entropy"],
        "drafter_share_of_target": drafter_shares,
        "chat_decay_points_dflash": chat_decay_points,
        "suffix_decay_reproduced": decay_reproduced,
        "conditional_decay_reproduced": conditional_decay,
        "per_slot_acceptance": {k: {d: [v.estimate for v in slot_mean[k][d]] for d in DOMAINS} for k in trained},
        "per_slot_fall": {k: {d: [v.estimate, v.low, v.high] for d, v in f.items()} for k, f in fall.items()},
        "per_slot_fall_minus_eagle": {d: [v.estimate, v.low, v.high] for d, v in extra_fall.items()},
        "heldout_replies": {d: len(heldout[d]) for d in DOMAINS},
        "per_slot_fall_per_seed": {k: {d: list(v.seeds) for d, v in f.items()} for k, f in fall.items()},
        "eagle_not_falling_on": eagle_not_falling,
        "conditional_slope": {k: {d: [v.estimate, v.low, v.high] for d, v in s.items()} for k, s in slopes.items()},
        "draft_latency_ms": {k: {str(g): 1e3 * s for g, s in v.items()} for k, v in latency.items()},
        "draft_latency_ratio_16_over_4": ratio_4_16,
        "verify_ms": 1e3 * verify,
        "per_token_ms_eq1": per_token_ms.to_dict(),
        "dflash_faster_per_token_on": dflash_faster_on,
        "collision_mixed_share": {phrase_set.name: {src: float(shares.loc[(phrase_set.name, src), "mixed"])
                                                    for src in ("target", "EAGLE-style", "DFlash")}
                                  for phrase_set in phrasings},
        "train_seconds": train_seconds,
        "replies": len(replies),
        "recipe": asdict(recipe),
    }
    save_result("parallel_drafting", result, profile_name, device=str(device))


def verdict_box(*, acceptance: Mapping[str, Mapping[str, Any]], paper_tau: Mapping[str, Mapping[str, float]],
                n_seeds: int, gap: Mapping[str, verdicts.Interval], dflash_wins: Sequence[str],
                chat_gap: Mapping[str, verdicts.Interval], window: float, in_window: Mapping[str, bool],
                chat_lowest: bool, gamma: int, slot_mean: Mapping[str, Any], fall: Mapping[str, Any],
                extra_fall: Mapping[str, verdicts.Interval], decay_reproduced: bool, slopes: Mapping[str, Any],
                conditional_decay: bool, pair: tuple[int, int], pair_ratio: Mapping[str, float],
                block_scales_slowly: bool, mixed: Mapping[str, float], collision_seen: bool,
                more: Sequence[tuple[str, str, str, bool]] = ()) -> Any:
    """The box that ends the chapter: each claim it tests, the paper's value, this run's and the
    verdict (`more`: section 3.9's rows, `ch03_crossover.verdict_rows`)."""
    def taus(kind: str) -> str:
        return " / ".join(f"{acceptance[kind][d].tau:.2f}" for d in DOMAINS)

    def endpoints(kind: str, domain: str) -> str:
        curve = acceptance[kind][domain].conditional
        return f"{domain} {curve[0]:.2f} -> {curve[gamma - 1]:.2f}"

    paper_taus = {k: " / ".join(f"{v:.2f}" for v in paper_tau[k].values()) for k in paper_tau}
    return results.run_shows([
        (f"DFlash accepts more per round than Eagle3 in every domain (tau, math / code / chat, mean of {n_seeds} "
         "seeds; the difference's 95% interval over seeds and prompts must leave zero)",
         f"{paper_taus['dflash']} vs {paper_taus['eagle']}",
         f"{taus('dflash')} vs {taus('eagle')}; difference " + ", ".join(f"{d} {gap[d]}" for d in DOMAINS),
         len(dflash_wins) == len(DOMAINS)),
        ("Chat is the lowest domain for every drafter (chat minus the next-lowest domain, 95% interval below zero)",
         "DFlash 2.95, Eagle3 2.40: chat lowest",
         ", ".join(f"{NAMES[k]} {chat_gap[k]}" for k in ("dflash", "eagle")),
         bool(all(v.below_zero for v in chat_gap.values()))),
        (f"DFlash's tau in the paper's regime (calibrated: within ±{window}, chat lowest)",
         paper_taus["dflash"], taus("dflash"), bool(all(in_window.values()) and chat_lowest)),
        (f"Suffix decay: DFlash's per-slot chat acceptance falls from slot 1 to {gamma}, by more than the "
         "autoregressive drafter's (held-out target replies; both 95% intervals above zero)",
         "code 0.87 -> 0.78, chat 0.72 -> 0.63 (conditional)",
         f"chat {slot_mean['dflash']['chat'][0].estimate:.3f} -> {slot_mean['dflash']['chat'][-1].estimate:.3f}, fall "
         f"{fall['dflash']['chat'].text(3)}, minus the baseline's {extra_fall['chat'].text(3)}",
         decay_reproduced),
        ("The paper's own yardstick: DFlash's conditional chat acceptance falls (fitted slope, 95% interval below zero)",
         "code 0.87 -> 0.78, chat 0.72 -> 0.63",
         f"{endpoints('dflash', 'code')}, {endpoints('dflash', 'chat')}; chat slope {slopes['dflash']['chat'].text(3)}",
         conditional_decay),
        ("The autoregressive drafter's chat curve does not fall (fitted slope's interval not below zero)",
         "chat 0.53 -> 0.74", f"{endpoints('eagle', 'chat')}; slope {slopes['eagle']['chat'].text(3)}",
         bool(not slopes["eagle"]["chat"].below_zero)),
        (f"A block costs one forward: draft time grows far more slowly with gamma ({pair[0]} to {pair[1]})",
         "one forward vs gamma passes", f"DFlash {pair_ratio['dflash']:.2f}x, EAGLE-style {pair_ratio['eagle']:.2f}x",
         block_scales_slowly),
        ("Multimodal collision: a parallel block mixes phrasings (mixed openers)", "described, not measured",
         f"DFlash {100 * mixed['DFlash']:.0f}%, EAGLE-style {100 * mixed['EAGLE-style']:.0f}%, "
         f"target {100 * mixed['target']:.0f}%", collision_seen),
        *more,
    ])
