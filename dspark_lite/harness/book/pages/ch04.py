"""Chapter 04's bookkeeping (the Markov head), first half: its setup, the tables and figures of
sections 4.2-4.5 (training, the collision, Table 1, Figure 2), the sentences that say what a run
found (each the Markdown output of the cell that measured it), and, for the whole chapter, the
result file `table1_toy` and the verdict box. `ch04_ablations` holds sections 4.6-4.8. The notebook
keeps the method's code and its measurement calls; every computation here is the one the chapter's
cells made, in the same order, with the same seeds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display

from .... import record
from ....runtime import device_generator
from ....speculative import speculative_generate
from ...result_files import save_result
from ...toy import collisions, corpus
from ...toy.world import ToyWorld
from .. import interactive, stream, verdicts
from ..results import plain, run_shows, say, titled

DOMAINS = list(corpus.DOMAINS)
KINDS = ("eagle", "dflash", "dspark-markov", "dspark-rnn")  # Table 1's drafters, in the order its figures draw them
NAMES = {"eagle": "EAGLE-style", "dflash": "DFlash", "dspark-markov": "DSpark-Markov", "dspark-rnn": "DSpark-RNN"}
COLORS = {"eagle": "#e6550d", "dflash": "#3182bd", "dspark-markov": "#31a354", "dspark-rnn": "#756bb1"}
PAPER_TAU = {  # Table 1, Qwen3-4B, mean of the three benchmarks of each domain
    "eagle": {"math": 4.56, "code": 3.87, "chat": 2.40},
    "dflash": {"math": 4.80, "code": 4.44, "chat": 2.95},
    "dspark-markov": {"math": 5.57, "code": 5.12, "chat": 3.49},
}
LEGEND = dict(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def say_setting(target: torch.nn.Module, recipe: Any, seeds: Sequence[int]) -> None:
    """The block size, the head's rank, the target's size and the drafters' seeds of this run."""
    params = sum(p.numel() for p in target.parameters())
    say(f"This run drafts blocks of gamma = {recipe.gamma} tokens with a Markov head of rank r = {recipe.head_rank} "
        f"(vocabulary {target.config.vocab_size}, hidden size {target.config.hidden_size}). The target has "
        f"{params / 1e6:.2f}M parameters in {target.config.num_hidden_layers} layers; the drafters train from "
        f"seeds {plain(list(seeds))}.")


def say_training(recipe: Any, seeds: Sequence[int], train_seconds: dict[str, float]) -> None:
    """The training budgets, and how long DSpark's seeds trained (their histories' record)."""
    say(f"DFlash trained {recipe.steps} steps and DSpark-Markov and DSpark-RNN {recipe.dspark_steps} steps each, from "
        f"each of {len(seeds)} seeds. This run's training histories record {train_seconds['dspark-markov']:.0f} s per "
        f"seed for DSpark-Markov and {train_seconds['dspark-rnn']:.0f} s for DSpark-RNN (as trained, even if loaded "
        "from the cache now: each drafter's own steps and its reading of the target; the two ran at the same time).")


def training_curves(histories: dict[str, Any], recipe: Any) -> None:
    """accept_rate@1 and @gamma (1 - TV on the training batches) along training, smoothed."""
    window = max(1, recipe.dspark_steps // 20)
    smooth = lambda v: pd.Series(np.asarray(v, float)).rolling(window).mean()  # NaN until a window is full
    fig, axes = plt.subplots(2, 1, figsize=(6, 5.6), sharex=True, layout="constrained")
    for ax, k in zip(axes, (1, recipe.gamma)):
        for kind in ("dflash", "dspark-markov", "dspark-rnn"):
            survival = np.asarray(histories[kind].prefix_survival_tv)[:, k - 1]
            ax.plot(smooth(survival), color=COLORS[kind], label=NAMES[kind])
        ax.set_title(f"accept_rate@{k} (1 - TV, training batches)")
        ax.set_xlabel("step")
    for ax in axes:
        ax.set_ylabel("estimated acceptance")
    axes[-1].legend(**LEGEND)
    plt.show()


# ---------------------------------------------------------------- 4.3 the collision

def collision_shares(counts: Sequence[collisions.CollisionCount], phrasings: Sequence[collisions.Phrasings]
                     ) -> dict[str, dict[str, float]]:
    """The share of coherent, mixed and other samples per phrasing and source (figure and table);
    returns the mixed share, {phrasing: {source: share}}."""
    rows = pd.DataFrame([{"phrasings": c.phrasings, "source": c.source, **c.counts} for c in counts])
    shares = rows.groupby(["phrasings", "source"], sort=False)[list(collisions.OUTCOMES)].sum()
    shares = shares.div(shares.sum(axis=1), axis=0)
    fig, axes = plt.subplots(len(phrasings), 1, figsize=(6, 2.8 * len(phrasings)), sharex=True, layout="constrained")
    for ax, phrase_set in zip(axes, phrasings):
        shares.loc[phrase_set.name].plot.barh(stacked=True, ax=ax, color=["#31a354", "#de2d26", "#bdbdbd"], legend=False)
        ax.set_title(f"{phrase_set.name}: " + " / ".join(f'"{h.strip()} ..."' for h in phrase_set.heads))
        ax.set_xlabel("share of samples")
    axes[-1].legend(**LEGEND)
    plt.show()
    display(titled(shares, "chat phrasings: share of coherent, mixed and other samples, target and drafters", 3))
    sources = ["target", "DFlash", "DSpark-Markov", "DSpark-RNN"]
    return {p.name: {src: float(shares.loc[(p.name, src), "mixed"]) for src in sources} for p in phrasings}


def resolves(mixed: dict[str, dict[str, float]], name: str, source: str) -> bool:
    """A collision counts as resolved when a drafter mixes phrasings in under a third as many samples as DFlash."""
    return mixed[name][source] < mixed[name]["DFlash"] / 3


def say_collisions(mixed: dict[str, dict[str, float]], phrasings: Sequence[collisions.Phrasings]) -> None:
    """What the heads did to the opener (first-order) and the skip-word collision in this run."""
    opener, skip = phrasings[0].name, phrasings[1].name
    o, s = mixed[opener], mixed[skip]
    verdict = lambda name, source: verdicts.resolves(resolves(mixed, name, source))
    say(f"On the opener, DFlash mixes two phrasings in {o['DFlash']:.0%} of its samples and DSpark-Markov in "
        f"{o['DSpark-Markov']:.0%} (the target in {o['target']:.0%}): in this run the Markov head "
        f"{verdict(opener, 'DSpark-Markov')} the opener collision.",
        f"On the skip-word phrasing the mixed shares are {s['DFlash']:.0%} for DFlash, {s['DSpark-Markov']:.0%} for "
        f"DSpark-Markov and {s['DSpark-RNN']:.0%} for DSpark-RNN (the target: {s['target']:.0%}): the Markov head, which "
        f"reads only \" to\", {verdict(skip, 'DSpark-Markov')} it (it mixes "
        f"{verdicts.how_often(s['DSpark-Markov'], s['DFlash'])} DFlash), and the RNN head, whose state can carry the "
        f"adjective, {verdict(skip, 'DSpark-RNN')} it.")


def collision_stream(world: ToyWorld, drafters: dict[str, torch.nn.Module], recipe: Any, seed: int,
                     device: torch.device) -> None:
    """DFlash and DSpark-Markov decoding the first chat prompt with the same seed, round by round (one slider)."""
    target, tokenizer = world.target, world.tokenizer
    stream_prompt = world.encode_prompt(world.eval_prompts("chat")[0]).to(device)
    streams = {}
    for kind in ("dflash", "dspark-markov"):
        recording = stream.RecordingDrafter(drafters[kind])
        shown = speculative_generate(target, recording, stream_prompt, recipe.eval_new_tokens, recipe.gamma, 1.0,
                                     device_generator(seed, device), tokenizer.eos_token_id)
        streams[f"{NAMES[kind]}: {record.tau(shown.rounds):.2f} tokens per round"] = stream.stream_rounds(shown, recording.drafts)
    display(stream.stream_chart(streams, tokenizer))


# ---------------------------------------------------------------- 4.4 Table 1

class Table1:
    """Table 1 at toy scale: tau per drafter and domain (seed means) beside the paper's rows, the
    gains, and each verdict's paired bootstrap over the seeds, then the same held-out generations."""

    def __init__(self, acceptance: dict[str, dict[str, Any]], seed: int) -> None:
        self.acceptance, self.seed = acceptance, seed
        tau = pd.DataFrame({NAMES[k]: {d: acceptance[k][d].tau for d in DOMAINS} for k in acceptance}).T
        tau["macro"] = tau[DOMAINS].mean(axis=1)
        paper = pd.DataFrame({f"{NAMES[k]} (paper)": v for k, v in PAPER_TAU.items()}).T
        paper["macro"] = paper[DOMAINS].mean(axis=1)
        self.tau, self.paper = tau, paper
        self.gains = pd.DataFrame({
            "DSpark-Markov vs DFlash (%)": self.gain("dspark-markov"),
            "DSpark-RNN vs DFlash (%)": self.gain("dspark-rnn"),
            "DSpark-Markov vs EAGLE-style (%)": self.gain("dspark-markov", "EAGLE-style"),
            "paper: DSpark vs DFlash (%)": 100 * (paper.loc["DSpark-Markov (paper)"] / paper.loc["DFlash (paper)"] - 1),
        }).T
        self.macro_gain = float(self.gain("dspark-markov")["macro"])  # the paper's definition: ratio of the macro averages
        self.markov_gap = {d: verdicts.tau_difference(acceptance["dspark-markov"][d].per_generation,
                                                      acceptance["dflash"][d].per_generation, seed=seed) for d in DOMAINS}
        self.macro_vs_dflash = verdicts.macro_gain(self.per_generation("dspark-markov"), self.per_generation("dflash"), seed=seed)
        self.macro_vs_eagle = verdicts.macro_gain(self.per_generation("dspark-markov"), self.per_generation("eagle"), seed=seed)
        self.markov_wins = [d for d in DOMAINS if self.markov_gap[d].above_zero]
        self.hardest = tau.loc["DSpark-Markov", DOMAINS].astype(float).idxmin()
        self.domain_order = self.order_of("DSpark-Markov")

    def gain(self, kind: str, base: str = "DFlash") -> pd.Series:
        """The tau gain (%) of `kind` over the drafter named `base`, per domain and macro."""
        return 100 * (self.tau.loc[NAMES[kind]] / self.tau.loc[base] - 1)

    def per_generation(self, kind: str) -> dict[str, Any]:
        return {d: self.acceptance[kind][d].per_generation for d in DOMAINS}

    def order_of(self, name: str) -> list[str]:
        """The domains of the drafter named `name`, from its highest tau to its lowest."""
        return self.tau.loc[name, DOMAINS].astype(float).sort_values(ascending=False).index.tolist()

    def beats_eagle(self, kind: str) -> list[str]:
        """The domains where `kind` accepts more than the EAGLE-style baseline beyond the noise (paired)."""
        return [d for d in DOMAINS if verdicts.tau_difference(self.acceptance[kind][d].per_generation,
                                                              self.acceptance["eagle"][d].per_generation,
                                                              seed=self.seed).above_zero]

    def show(self, gamma: int, n_seeds: int) -> None:
        """The tables (tau beside the paper's, the seeds' spread, the gains, the intervals) and the figure."""
        display(titled(pd.concat([self.tau, self.paper]), f"tau per domain at gamma = {gamma}, T = 1: our drafters "
                       f"(mean of {n_seeds} seeds) and the paper's Qwen3-4B rows (Table 1)", 2))
        display(titled(pd.DataFrame({NAMES[k]: {d: verdicts.seed_spread(self.acceptance[k][d].seed_taus) for d in DOMAINS}
                                     for k in self.acceptance}).T, f"tau over the {n_seeds} training seeds: mean ± sd"))
        display(titled(self.gains, "tau gain per domain (%): DSpark against DFlash and the EAGLE-style drafter,"
                                   " and the paper's", 1))
        display(pd.DataFrame({"DSpark-Markov - DFlash (tau) [95%]": {d: str(self.markov_gap[d]) for d in DOMAINS}})
                .style.set_caption("DSpark-Markov against DFlash, per domain"))
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        width, x = 0.2, np.arange(len(DOMAINS))
        for i, kind in enumerate(KINDS):
            ax.bar(x + (i - 1.5) * width, self.tau.loc[NAMES[kind], DOMAINS], width, color=COLORS[kind],
                   label=f"{NAMES[kind]} (ours)")
            if kind in PAPER_TAU:
                ax.scatter(x + (i - 1.5) * width, [PAPER_TAU[kind][d] for d in DOMAINS], marker="_", s=300,
                           color="black", zorder=3, label="paper (Qwen3-4B)" if kind == "eagle" else None)
        ax.set_xticks(x, DOMAINS)
        ax.set_ylabel("tau (tokens per round)")
        ax.set_title(f"Table 1 at toy scale, gamma = {gamma}, T = 1")
        ax.legend(**LEGEND)
        plt.show()

    def say(self, eagle_layers: int, target_layers: int) -> None:
        """Against DFlash, the hardest domain, the gains' spread and against the EAGLE-style baseline."""
        vs_eagle, iv = self.macro_vs_eagle, self.macro_vs_dflash
        domain_gains = self.gain("dspark-markov")[DOMAINS].astype(float)
        paper_gains = self.gains.loc["paper: DSpark vs DFlash (%)", DOMAINS].astype(float)
        spread, paper_spread = float(domain_gains.max() - domain_gains.min()), float(paper_gains.max() - paper_gains.min())
        least = domain_gains.idxmin()
        say(f"**Against DFlash.** DSpark-Markov accepts more tokens per round than DFlash, beyond the noise, in "
            f"{verdicts.domains_phrase(self.markov_wins, DOMAINS)} (DSpark-Markov minus DFlash, 95% interval over the "
            f"seeds, then the same generations: {plain({d: str(v) for d, v in self.markov_gap.items()})}). Its "
            f"macro-average gain, the ratio of the macro averages, is {self.macro_gain:+.1f}% (over the seeds, then the "
            f"generations: {iv.estimate:+.1f}%, 95% interval {iv.low:+.1f}% to {iv.high:+.1f}%); the RNN head's is "
            f"{float(self.gain('dspark-rnn')['macro']):+.1f}%.",
            f"**Which domain is hardest.** DSpark-Markov's hardest domain is {self.hardest} "
            f"({verdicts.versus_paper(self.hardest == 'chat', 'chat')}); its domains from easiest to hardest are "
            f"{', '.join(self.domain_order)} ({verdicts.versus_paper(self.domain_order == ['math', 'code', 'chat'], 'math, code, chat')}), "
            f"and DSpark-RNN's are {', '.join(self.order_of('DSpark-RNN'))}.",
            "**How the gain spreads.** DSpark-Markov's gains over DFlash are "
            + " / ".join(f"{g:+.0f}" for g in domain_gains) + "% for math / code / chat, "
            + verdicts.either(spread > 2 * paper_spread, f"uneven: a spread of {spread:.0f} points against the paper's "
                              f"{paper_spread:.0f}", f"about as even as the paper's: a spread of {spread:.0f} points "
                              f"against {paper_spread:.0f}") + ". "
            + verdicts.either(least == "math", "Math gains least: it is mostly computation.",
                              f"{least.capitalize()} gains least in this run."),
            f"**Against the EAGLE-style baseline.** DSpark-Markov accepts more than the baseline, beyond the noise, in "
            f"{verdicts.domains_phrase(self.beats_eagle('dspark-markov'), DOMAINS)}, and DSpark-RNN in "
            f"{verdicts.domains_phrase(self.beats_eagle('dspark-rnn'), DOMAINS)}. DSpark-Markov's macro average differs "
            f"from the baseline's by {vs_eagle.estimate:+.1f}% (interval {vs_eagle.low:+.1f}% to {vs_eagle.high:+.1f}%): "
            f"the paper's direction, DSpark ahead of the autoregressive drafter, "
            f"{verdicts.compared(vs_eagle, 'holds', 'is reversed', 'is a tie within the noise')} at toy scale. The baseline "
            f"is a drafter of {verdicts.plural(eagle_layers, 'layer')} against our target's {target_layers}.")


# ---------------------------------------------------------------- 4.5 Figure 2

@dataclass
class SlotFall:
    """Per-slot acceptance from slot 1 to the last slot: each drafter's fall, how much of DFlash's
    fall the heads cut (paired), and the domains where DSpark-Markov's curve is flatter beyond the noise."""
    fall: dict[str, dict[str, verdicts.Interval]]
    head_cut: dict[str, dict[str, verdicts.Interval]]
    flatter_on: list[str]


def figure2_per_slot(per_slot: dict[str, dict[str, np.ndarray]], n_seeds: int, gamma: int, seed: int) -> SlotFall:
    """Figure 2 where the fall lives: per-slot acceptance with 95% bands, and the falls' table."""
    slots = np.arange(1, gamma + 1)
    fig, axes = plt.subplots(1, len(DOMAINS), figsize=(7, 2.9), sharey=True, layout="constrained")
    for ax, d in zip(axes, DOMAINS):
        for kind in KINDS:
            band = [verdicts.mean_interval(per_slot[kind][d][..., j], seed=seed) for j in range(gamma)]
            ax.plot(slots, [v.estimate for v in band], "o-", ms=3, color=COLORS[kind], label=NAMES[kind])
            ax.fill_between(slots, [v.low for v in band], [v.high for v in band], color=COLORS[kind], alpha=0.2, lw=0)
        ax.set_title(d, fontsize=10)
        ax.set_xticks(slots)
        ax.set_xlabel("slot k")
    axes[0].set_ylabel("per-slot acceptance (1 - TV)")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Per-slot acceptance on held-out target replies (mean of {n_seeds} seeds; bands: 95%)", fontsize=10)
    plt.show()
    slot_fall = lambda kind, d: per_slot[kind][d][..., 0] - per_slot[kind][d][..., -1]  # per seed and reply
    fall = {kind: {d: verdicts.mean_interval(slot_fall(kind, d), seed=seed) for d in DOMAINS} for kind in KINDS}
    head_cut = {kind: {d: verdicts.mean_interval(slot_fall("dflash", d) - slot_fall(kind, d), seed=seed)
                       for d in DOMAINS} for kind in ("dspark-markov", "dspark-rnn")}  # paired: the same replies and seed index
    display(titled(pd.DataFrame({
        **{f"{NAMES[k]}: fall": {d: fall[k][d].text(3) for d in DOMAINS} for k in KINDS},
        **{f"DFlash's fall minus {NAMES[k]}'s": {d: head_cut[k][d].text(3) for d in DOMAINS} for k in head_cut},
    }), f"per-slot acceptance, slot 1 minus slot {gamma}, with 95% intervals over seeds and held-out replies"))
    return SlotFall(fall, head_cut, [d for d in DOMAINS if head_cut["dspark-markov"][d].above_zero])


def say_slot_falls(falls: SlotFall, n_seeds: int, gamma: int) -> None:
    """Each drafter's fall from slot 1 to slot gamma, and where the head makes the curve flatter."""
    fall = lambda kind: verdicts.word_list(f"{falls.fall[kind][d].text(3)} on {d}" for d in DOMAINS)
    say(f"From slot 1 to slot {gamma}, DFlash's per-slot acceptance falls by {fall('dflash')}. DSpark-Markov's falls by "
        f"{fall('dspark-markov')}, and DSpark-RNN's by {fall('dspark-rnn')} (a negative fall is a rise). The head "
        "makes the curve flatter than DFlash's, beyond the noise of a paired bootstrap over the seeds and the same "
        f"replies, in {verdicts.domains_phrase(falls.flatter_on, DOMAINS)} "
        f"({verdicts.versus_paper(falls.flatter_on == DOMAINS, 'flatter in every domain')}). The values are means "
        f"over {n_seeds} training seeds, and the intervals resample the seeds, then the replies.")


@dataclass
class Conditional:
    """The decoding-time conditional acceptance (the paper's Figure 2): its fall from position 1 to
    gamma, where DSpark-Markov's curve is never below DFlash's, and the chat curves' fitted slopes."""
    decay: pd.DataFrame
    above_everywhere: list[str]
    chat_slope: dict[str, verdicts.Interval]


def figure2_conditional(acceptance: dict[str, dict[str, Any]], gamma: int) -> Conditional:
    """The conditional acceptance per position (a chart to hover) and the table of its falls."""
    fig2 = pd.DataFrame([{"domain": domain, "drafter": NAMES[kind], "draft position k": k, "conditional acceptance": value}
                         for kind in KINDS for domain in DOMAINS
                         for k, value in enumerate(np.array(acceptance[kind][domain].conditional, dtype=float), start=1)])
    fig2 = fig2.dropna()  # NaN: no round reached position k
    display(interactive.curves_chart(fig2, "draft position k", "conditional acceptance", "drafter", column="domain",
                                     colors={NAMES[kind]: COLORS[kind] for kind in KINDS}))  # hover a point for its value
    decay = pd.DataFrame({NAMES[k]: {d: acceptance[k][d].conditional[0] - acceptance[k][d].conditional[gamma - 1]
                                     for d in DOMAINS} for k in KINDS}).T
    display(titled(decay.rename_axis(f"position 1 - position {gamma}"),
                   f"fall of the conditional acceptance from position 1 to position {gamma} (Figure 2)", 3))
    curve = lambda kind, d: np.array(acceptance[kind][d].conditional, dtype=float)
    above_everywhere = [d for d in DOMAINS if (curve("dspark-markov", d) >= curve("dflash", d)).all()]
    chat_slope = {kind: verdicts.fitted_slope(acceptance[kind]["chat"].conditional) for kind in KINDS}
    return Conditional(decay, above_everywhere, chat_slope)


def say_conditional(cond: Conditional, gamma: int) -> None:
    """Where DSpark-Markov's conditional curve stays above DFlash's, and what each does on chat."""
    fall_dflash, fall_markov = float(cond.decay.loc["DFlash", "chat"]), float(cond.decay.loc["DSpark-Markov", "chat"])
    chat = verdicts.either(
        fall_dflash > 0.005,
        f"From position 1 to position {gamma}, DFlash's chat acceptance {verdicts.falls_by(fall_dflash)} and "
        f"DSpark-Markov's {verdicts.falls_by(fall_markov)}: conditioning each slot on the token drafted before it "
        f"{verdicts.removes(fall_dflash, fall_markov)} DFlash's fall.",
        f"In this run DFlash's chat acceptance {verdicts.falls_by(fall_dflash)} from position 1 to position "
        f"{gamma}, and DSpark-Markov's {verdicts.falls_by(fall_markov)}.")
    say(f"DSpark-Markov's curve lies at or above DFlash's at every position in "
        f"{verdicts.domains_phrase(cond.above_everywhere, DOMAINS)}. {chat} The RNN head's chat curve "
        f"{verdicts.falls_by(float(cond.decay.loc['DSpark-RNN', 'chat']))} from position 1 to position {gamma}. Fitted "
        f"slopes of the chat curves per position (95% interval): {plain({NAMES[k]: str(v) for k, v in cond.chat_slope.items()})}.")


# ---------------------------------------------------------------- the result file and the verdict box

def save_table1_toy(profile_name: str, device: torch.device, *, recipe: Any, study: Any, seeds: Sequence[int],
                    table1: Table1, per_slot: dict[str, dict[str, np.ndarray]], falls: SlotFall, cond: Conditional,
                    mixed: dict[str, dict[str, float]], depth: Any, sweep: Any, overhead: pd.DataFrame,
                    speed: pd.DataFrame, train_seconds: dict[str, float], lean: Any,
                    race: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the chapter's measurements to results_dir()/table1_toy.json and say how long its training took
    (`depth`, `sweep` and `lean`: the Depth, the Sweep and the LeanDrafters of ch04_ablations)."""
    key = lambda kind: kind.replace("-", "_")
    acc, t1 = table1.acceptance, table1
    ablation_seconds = sum(sec for _, sec in lean.runs.values())
    result = {
        "gamma": recipe.gamma,
        "head_rank": recipe.head_rank,
        "seeds": seeds,
        "tau": {key(k): {d: acc[k][d].tau for d in DOMAINS} for k in acc},
        "tau_per_seed": {key(k): {d: acc[k][d].seed_taus for d in DOMAINS} for k in acc},
        "macro_gain_over_dflash_per_seed": list(t1.macro_vs_dflash.seeds),
        "macro_gain_over_eagle_per_seed": list(t1.macro_vs_eagle.seeds),
        "conditional_acceptance": {key(k): {d: acc[k][d].conditional for d in DOMAINS} for k in acc},
        "paper_tau": {key(k): v for k, v in PAPER_TAU.items()},
        "gain_over_dflash_pct": {key(k): t1.gain(k)[DOMAINS].to_dict() for k in ("dspark-markov", "dspark-rnn")},
        "macro_gain_over_dflash": t1.macro_gain,
        "macro_gain_over_dflash_interval": [t1.macro_vs_dflash.low, t1.macro_vs_dflash.high],
        "macro_gain_over_eagle": t1.macro_vs_eagle.estimate,
        "macro_gain_over_eagle_interval": [t1.macro_vs_eagle.low, t1.macro_vs_eagle.high],
        "markov_minus_dflash_interval": {d: [t1.markov_gap[d].low, t1.markov_gap[d].high] for d in DOMAINS},
        "chat_slope": {k: [v.estimate, v.low, v.high] for k, v in cond.chat_slope.items()},
        "per_slot_acceptance": {key(k): {d: np.nanmean(per_slot[k][d], axis=(0, 1)).tolist() for d in DOMAINS} for k in KINDS},
        "per_slot_fall": {key(k): {d: [v.estimate, v.low, v.high] for d, v in f.items()} for k, f in falls.fall.items()},
        "per_slot_flatter_than_dflash_on": falls.flatter_on,
        "markov_beats_dflash_on": t1.markov_wins,
        "hardest_domain_dspark": t1.hardest,
        "collision_mixed_share": mixed,
        "depth_tau": depth.depth.to_dict(orient="index"),
        "two_layer_dspark_beats_deep_dflash_on": depth.two_beats_deep,
        "shallow_dspark_minus_deep_dflash": {d: _triple(v) for d, v in depth.two_vs_deep.items()},
        "gamma_sweep_tau": {f"{name}@{g}": row.to_dict() for (name, g), row in sweep.sweep.iterrows()},
        "gamma_sweep_macro_gain_pct": {str(g): float(sweep.sweep_gain.loc[g, "macro"]) for g in study.ablation_gammas},
        "head_overhead": {str(g): row.to_dict() for g, row in overhead.iterrows()},
        "head_overhead_pct_at_gamma": float(overhead.loc[recipe.gamma, "round overhead (%)"]),
        "e2e_tokens_per_s": speed.to_dict(orient="index"),
        "e2e_speedup_mean": float(speed["speed-up"].mean()),
        "e2e_speedup_dflash_mean": float(speed["DFlash speed-up"].mean()),
        "e2e_speedup_eagle_mean": float(speed["EAGLE-style speed-up"].mean()),
        "e2e_markov_over_eagle_percent": _triple(per_second(race, "DSpark-Markov", "EAGLE-style")),
        "e2e_markov_over_dflash_percent": _triple(per_second(race, "DSpark-Markov", "DFlash")),
        "train_seconds": train_seconds,
        "ablation_tau_per_seed": {f"{k}@{g}x{n}": lean.seed_taus(k, g, n) for k, g, n in lean.runs},
        "ablation_train_seconds": {f"{k}@{g}x{n}": sec for (k, g, n), (_, sec) in lean.runs.items()},
        "chapter_train_minutes": (sum(train_seconds.values()) + ablation_seconds) / 60,
        "recipe": asdict(recipe),
        "study": asdict(study),
    }
    save_result("table1_toy", result, profile_name, device=str(device))
    say(f"Training in this chapter took {result['chapter_train_minutes']:.1f} min as recorded (DSpark "
        f"{sum(train_seconds.values()):.0f} s, {len(lean.runs)} ablation drafters {ablation_seconds:.0f} s); the "
        "measurements are written to the results folder as `table1_toy.json`.")


def _triple(interval: verdicts.Interval) -> list[float]:
    return [interval.estimate, interval.low, interval.high]


def per_second(race: Mapping[str, Mapping[str, Any]], faster: str, slower: str) -> verdicts.Interval:
    """How much faster `faster` decodes than `slower` per second, in percent: the geometric mean of
    their tokens-per-second ratios over every pass of the race in every domain (each pass times both
    on the same prompts, paired), with its 95% interval."""
    pairs = [(a, b) for d in race for a, b in zip(race[d][faster]["tokens_per_s_all"], race[d][slower]["tokens_per_s_all"])]
    return verdicts.ratio_interval([a for a, _ in pairs], [b for _, b in pairs])


def verdict_box(table1: Table1, falls: SlotFall, cond: Conditional, depth: Any, sweep: Any,
                overhead: pd.DataFrame, recipe: Any, study: Any, race: Mapping[str, Mapping[str, Any]]) -> Any:
    """The box "What this run shows": every claim of the chapter, the paper's value, this run's, the verdict
    (`depth` and `sweep`: the Depth and the Sweep of ch04_ablations; `race`: the wall-clock race per domain)."""
    t1, slope = table1, cond.chat_slope
    vs_eagle = per_second(race, "DSpark-Markov", "EAGLE-style")
    return run_shows([
        ("DSpark-Markov accepts more than DFlash in every domain (Table 1; each difference's 95% interval above zero)",
         "+16.3% macro", f"{t1.macro_vs_dflash}% macro; per domain " + ", ".join(f"{d} {t1.markov_gap[d]}" for d in DOMAINS),
         bool(t1.markov_wins == DOMAINS)),
        ("Chat is DSpark's hardest domain (Table 1, math / code / chat)", "5.57 / 5.12 / 3.49",
         " / ".join(f"{t1.tau.loc['DSpark-Markov', d]:.2f}" for d in DOMAINS), bool(t1.hardest == "chat")),
        ("DSpark beats the autoregressive drafter in the macro average (Eagle3; 95% interval above zero)", "+30.9% macro",
         f"{t1.macro_vs_eagle}% macro", bool(t1.macro_vs_eagle.above_zero)),
        ("Per second too: DSpark-Markov decodes faster than the autoregressive drafter (the race: tokens per second, "
         "every pass and domain paired; 95% interval above zero)",
         "not reported against Eagle3 (its per-second results are DeepSeek-V4's, against MTP-1)",
         f"{vs_eagle.text(1)}% ({sum(len(race[d]['EAGLE-style']['tokens_per_s_all']) for d in race)} paired passes)",
         bool(vs_eagle.low > 0)),
        ("Figure 2: DSpark's curve is flatter than DFlash's in every domain (per-slot acceptance on held-out target "
         "replies: DFlash's fall minus DSpark-Markov's, paired 95% interval above zero)",
         "DFlash chat 0.72 -> 0.63; DSpark stays high",
         "; ".join(f"{d}: DFlash {falls.fall['dflash'][d].text(3)}, DSpark-Markov {falls.fall['dspark-markov'][d].text(3)}"
                   for d in DOMAINS), bool(falls.flatter_on == DOMAINS)),
        ("The paper's own yardstick: DFlash's conditional chat curve decays and DSpark's does not (fitted slope, 95% interval)",
         "DFlash chat 0.72 -> 0.63; DSpark stays high", f"DFlash {slope['dflash']}, DSpark-Markov {slope['dspark-markov']}",
         bool(slope["dflash"].below_zero and not slope["dspark-markov"].below_zero)),
        ("A shallow DSpark beats a deeper DFlash in every domain (Figure 3)", "2 vs 5 layers",
         f"{min(study.depth_layers)} vs {study.deep_dflash_layers} layers: ahead in "
         f"{verdicts.domains_phrase(depth.two_beats_deep, DOMAINS)}", bool(depth.two_beats_deep == DOMAINS)),
        ("The gain over DFlash grows with the block size (Figure 4; the change's 95% interval above zero)",
         "+16% at gamma 7, +26% at gamma 15", f"{sweep.gain_lo:+.1f}% at gamma {sweep.lo}, {sweep.gain_hi:+.1f}% at gamma "
         f"{sweep.hi}: {sweep.gain_change.text(1)} points", bool(sweep.gain_change.above_zero)),
        ("The head costs little per round", "0.2-1.3% (GPU, batch 128)",
         f"{float(overhead.loc[recipe.gamma, 'round overhead (%)']):.1f}% (CPU, one request)", None),
    ])
