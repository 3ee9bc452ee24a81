"""Chapter 01's bookkeeping (the toy world: corpus, tokenizer, target, costs): the run's setup, the
figures' plumbing, the sentences each measuring cell says about this run (`say`), the rows of the
verdict box and the result file. The chapter's visible code is the method and its measurement;
everything here only shows, words or writes what that code computed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import display
from matplotlib.ticker import MaxNLocator

from ...result_files import describe_path, save_result
from .. import plots, results, verdicts
from ..results import say
from . import start

ENTROPY_ORDER = ["math", "code", "chat"]  # Table 1: tau falls from math to code to chat, so entropy rises so


def setup(profile_name: str, device_name: str, seed: int) -> tuple[Any, torch.device, torch.Generator]:
    """The book's setup (`pages.start`) without the toy world, which this chapter builds: (profile,
    device, generator seeded with `seed`); the cell's first output says where the run is."""
    profile, device, generator, _ = start(profile_name, device_name, seed, world=False)
    return profile, device, generator


def _value_table(values: Mapping[str, Any], title: str) -> Any:
    return results.titled(pd.DataFrame({"value": pd.Series(dict(values), dtype=object)}), title)


def knobs_table(knobs: Any) -> Any:
    """The corpus knobs (a `CorpusKnobs`), one row each, as a titled table."""
    return _value_table(vars(knobs), "The corpus knobs (CorpusKnobs)")


def corpus_line(corpus_dir: Path, records: Sequence[Any], seconds: float, digest: str) -> str:
    """One line on the corpus this run built: how many training records, where, how long, its digest."""
    return (f"{len(records)} training records in {describe_path(corpus_dir)} ({seconds:.1f} s), "
            f"digest {digest[:12]}")


# --------------------------------------------------------------------------- 1.2 the tokenizer

def show_vocab_sweep(sweep: pd.DataFrame, profile: Any) -> None:
    """Tokens per conversation against the requested vocabulary (figure and table), then what this
    run found: whether the curve flattens at the largest size tried, and the size the profile asks for."""
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(sweep["requested vocab"], sweep["tokens per conversation"], "o-")
    for _, row in sweep.iterrows():
        ax.annotate(f"{int(row['learned vocab'])} learned", (row["requested vocab"], row["tokens per conversation"]),
                    textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("requested vocabulary size")
    ax.set_ylabel("tokens per conversation")
    ax.set_title("Tokens per conversation against the vocabulary size")
    plt.show()
    display(results.titled(sweep, "Tokens per conversation at each vocabulary size"))
    largest, second = sweep.iloc[-1], sweep.iloc[-2]
    saturated = int(largest["learned vocab"]) == int(second["learned vocab"])
    curve = verdicts.either(
        saturated, "The curve flattens once the vocabulary holds every frequent word and number of the corpus: beyond "
                   "that, merges have nothing left to merge",
        "The curve still falls at the largest size tried: the corpus still has merges to fill")
    learned = verdicts.either(saturated, f"the two largest requests both learned {int(largest['learned vocab'])} tokens",
                              f"the two largest requests learned {int(second['learned vocab'])} and "
                              f"{int(largest['learned vocab'])} tokens")
    say(f"{curve} ({learned}). Asked for up to {int(largest['requested vocab'])} tokens, the tokenizer learned at most "
        f"{int(sweep['learned vocab'].max())}. The book asks for {profile.target.vocab_size} in the "
        f"{profile.name} profile.")


# --------------------------------------------------------------------------- 1.3 the target

def target_table(profile: Any) -> Any:
    """The target's shape and training recipe (the profile's `target`), after a sentence on its size."""
    say(f"In the {profile.name} profile the target has {profile.target.num_layers} layers of width "
        f"{profile.target.hidden_size}.")
    return _value_table(vars(profile.target), "The target's shape and training recipe (profile.target)")


def training_figure(history: Any) -> None:
    """The target's training curve: per-step and smoothed train loss, and the validation loss."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    steps = np.arange(1, len(history.train_loss) + 1)
    ax.plot(steps, history.train_loss, alpha=0.35, label="train (per step)")
    window = max(1, len(steps) // 30)
    ax.plot(steps, pd.Series(history.train_loss).rolling(window).mean(), label="train (smoothed)")  # mean at its last step
    ax.plot(history.val_steps, history.val_loss, "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("Training the toy target")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def show_domain_stats(stats: pd.DataFrame, entropy_order: Sequence[str], ordering_holds: bool) -> None:
    """Entropy and perplexity per domain (figure and table), then the order this run's entropy rises
    in and whether it is Table 1's."""
    fig, axes = plt.subplots(2, 1, figsize=(6.5, 5), layout="constrained")
    colors = [plots.DOMAIN_COLORS[d] for d in stats.index]
    axes[0].bar(stats.index, stats["entropy"], color=colors)
    axes[0].set_title("mean next-token entropy (nats)")
    axes[1].bar(stats.index, stats["perplexity"], color=colors)
    axes[1].set_title("validation perplexity on replies")
    axes[0].set_ylabel("entropy (nats)")
    axes[1].set_ylabel("perplexity")
    for ax in axes:
        ax.set_xlabel("domain")
    plt.show()
    display(results.titled(stats, "The target on held-out replies: next-token entropy (nats) and perplexity per domain", 3))
    say(f"In this run the target's mean next-token entropy rises as {' < '.join(entropy_order)} ("
        + ", ".join(f"{d} {stats.loc[d, 'entropy']:.3f}" for d in entropy_order)
        + f" nats), {verdicts.versus_paper(ordering_holds, ' < '.join(ENTROPY_ORDER))}: Table 1's accepted length "
          "falls from math to code to chat.")


def show_regime(regime_table: pd.DataFrame, inside: pd.Series, dependency: Mapping[str, Mapping[str, float]]) -> None:
    """The toy world beside the paper's setting (table), then how many of the rows held to the paper's
    regime (`inside`: the table's verdicts less those the profile leaves out) sit inside it, and which
    share of chat's next-but-one entropy only the token in between settles."""
    display(regime_table.style.hide(axis="index").format({"inside": verdicts.yes_no})
            .set_caption("The toy world beside the paper's setting"))
    chat_mi_share = dependency["chat"]["mutual_information"] / dependency["chat"]["marginal_entropy"]
    left_out = int(regime_table["inside"].notna().sum()) - len(inside)
    held = (f" ({verdicts.plural(left_out, 'row')} with a line not held to it in this profile: the smoke drafters are too "
            "small and shallow beside their tiny target for any size or depth to be held)" if left_out else "")
    say(f"{int(inside.sum())} of {len(inside)} rows with a line sit on the paper's side of it{held}. In chat, "
        f"{100 * chat_mi_share:.0f}% of the next-but-one token's entropy is settled only by the token in between: "
        "the share a parallel drafter pays for and a drafter that samples in order does not.")


def show_logit_lens(lens: pd.DataFrame, read_layers: Sequence[int]) -> None:
    """The logit lens per layer (1 - TV and top-1 agreement, the layers the drafters read circled),
    then what the highest layer read would be accepted at."""
    fig, ax = plt.subplots(figsize=(6.5, 3))
    ax.plot(lens["layer"], 1 - lens["tv"], "o-", label="1 - TV to the target's output")
    ax.plot(lens["layer"], lens["top1_agreement"], "s--", label="top-1 agreement")
    read = lens[lens["read by the drafters"]]
    ax.scatter(read["layer"], 1 - read["tv"], s=160, facecolors="none", edgecolors="black", label="read by the drafters")
    ax.set_xlabel("target layer (0-based; the last is the target itself)")
    ax.set_ylabel("agreement with the output")
    ax.set_ylim(0, 1.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Logit lens: how much of the answer each layer holds")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    top_read = int(max(read_layers))
    say(f"The highest layer the drafters read, layer {top_read}, read through the LM head would be accepted at "
        f"{1 - lens.loc[top_read, 'tv']:.2f} of the target's own output: what is left above it is the drafter's job.")


# --------------------------------------------------------------------------- 1.5 what verifying costs

def cost_verdict(ratio: float, q: int) -> str:
    """How one forward over `q` query tokens compares with `q` one-token forwards, at `ratio` =
    latency(q) / latency(1): 'far less than' under q / 2, 'not much less than' under q."""
    return verdicts.either(ratio < q / 2, "far less than", verdicts.either(ratio < q, "not much less than", "no less than"))


def show_cost_curve(curve: Mapping[int, float], ms: pd.Series, q8: int, ratio_8: float, device: Any,
                    context: int) -> None:
    """Latency against the number of query tokens beside q one-token forwards (figure), then the
    ratio at `q8` and at the largest q, and the test that decides the verdict."""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.plot(ms.index, ms.values, "o-", ms=3, label="one forward over q tokens")
    ax.plot(ms.index, ms.iloc[0] * np.array(ms.index), "--", color="grey", label="q forwards over 1 token")
    ax.set_ylim(0, ms.max() * 2.5)
    ax.set_xlabel("query tokens q (context of %d cached)" % context)
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"latency({q8}) / latency(1) = {ratio_8:.2f} on {device}")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()
    q_max = max(curve)
    ratio_max = curve[q_max] / curve[1]
    say(f"In this run one forward over {q8} query tokens took {ratio_8:.2f}x the time of a forward over one, "
        f"{cost_verdict(ratio_8, q8)} the {q8} one-token forwards it replaces ({100 * ratio_8 / q8:.0f}% of their "
        f"time){'' if q_max == q8 else f'; at {q_max} query tokens it took {ratio_max:.2f}x'}. The verdict box counts "
        f"the premise as reproduced when the ratio at {q8} is under {q8 / 2:g}, half the forwards it replaces.")


# --------------------------------------------------------------------------- the result file and the box

def save_toy_world(timings: dict[str, float], world: Any, n_params: int, tokenizer: Any, stats: pd.DataFrame,
                   ar_tokens_per_s: float, ms: pd.Series, ratio_8: float, knobs: Any, profile_name: str,
                   device: Any) -> Any:
    """Write the chapter's result file (toy_world.json) and show its scalar numbers as a table."""
    timings["total"] = sum(timings.values())
    result = {
        "train_minutes": (timings["corpus"] + timings["tokenizer"] + world.history.seconds) / 60,
        "target_params_M": n_params / 1e6,
        "vocab_size": len(tokenizer),
        "entropy": stats["entropy"].to_dict(),
        "perplexity": stats["perplexity"].to_dict(),
        "ar_tokens_per_s": ar_tokens_per_s,
        "latency_ms": ms.to_dict(),
        "latency_ratio_8_over_1": ratio_8,
        "knobs": vars(knobs),
    }
    save_result("toy_world", result, profile_name, device=str(device))
    scalars = {k: v for k, v in result.items() if isinstance(v, (int, float))}
    return results.titled(pd.DataFrame({"measured": pd.Series(scalars, dtype=object)}),
                          "The numbers this chapter saves (toy_world.json)")


def verdict_rows(stats: pd.DataFrame, ordering_holds: bool, q8: int, ratio_8: float, device: Any,
                 cached: torch.Tensor, uncached: torch.Tensor, n_params: int, target: Any, world: Any
                 ) -> list[tuple[str, str, str, bool | None]]:
    """The rows of the chapter's verdict box (`results.run_shows`): the domain ordering's cause, the
    cost of verifying q8 tokens, the KV cache against greedy decoding, the target's architecture."""
    greedy_tokens = len(cached)
    return [
        ("Accepted length falls from math to code to chat (Table 1); its cause, the openness of the target's "
         "next-token distribution, rises in that order", "DSpark tau 5.6 / 5.1 / 3.5 on Qwen3-4B",
         "entropy " + " / ".join(f"{stats.loc[d, 'entropy']:.3f}" for d in ENTROPY_ORDER) + " nats (math / code / chat)",
         bool(ordering_holds)),
        (f"One forward over {q8} query tokens costs far less than {q8} one-token forwards (speculative decoding's premise)",
         "a GPU fact, not a table of the paper", f"{ratio_8:.2f}x one forward on {device}", bool(ratio_8 < q8 / 2)),
        ("A KV cache does not change greedy decoding", "exact", f"{greedy_tokens} of {greedy_tokens} tokens identical",
         bool(torch.equal(cached, uncached))),
        ("The target is a Qwen3 model", "Qwen3-4B: 36 layers, about 4B parameters",
         f"{n_params / 1e6:.2f}M parameters, {target.config.num_hidden_layers} layers, trained in "
         f"{world.history.seconds / 60:.1f} min on a CPU", None),
    ]
