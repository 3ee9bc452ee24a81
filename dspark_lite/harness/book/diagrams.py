"""The opening diagram of each chapter: the idea as boxes and arrows, drawn before any code.

Two shapes cover the book. `flow` draws a pipeline (preface, chapters 01, 03, 05, 06, 06b):
boxes left to right, each with a note below it. `token_round` draws one speculative round over
real-looking tokens (chapters 02 and 04): the drafted block, which drafts the target kept, the
token it sampled itself, and, for a semi-autoregressive drafter, the head's arrow from each drafted
token into the next slot. The diagrams hold no measured number; they are the chapter's idea only.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

INK, FILL = "#2b5d9b", "#e8f0fa"
KEPT, DROPPED, OWN = "#1b9e77", "#c0392b", "#7570b3"
FONT = 9  # points; at the book's 7-inch width this renders above plots.MIN_FONT_PX


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], color: str = INK, **style) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", color=color, lw=1.4,
                                                          mutation_scale=11, shrinkA=0, shrinkB=0, **style))


def flow(steps: Sequence[str], title: str, notes: Sequence[str] | None = None,
         highlight: Sequence[int] = ()) -> Figure:
    """A pipeline of `steps` (box labels, "\\n" for line breaks) left to right with arrows, a grey
    note under each box (`notes`, same length, "" for none), and the boxes at `highlight`
    (indices) with a thick border: the part the chapter builds."""
    if not steps:
        raise ValueError("flow needs at least one step")
    notes = list(notes) if notes is not None else [""] * len(steps)
    if len(notes) != len(steps):
        raise ValueError(f"{len(steps)} steps but {len(notes)} notes")
    if any(not 0 <= i < len(steps) for i in highlight):
        raise ValueError(f"highlight indices {list(highlight)} outside 0..{len(steps) - 1}")
    pitch, width = 1.55, 1.3
    size = FONT if len(steps) <= 5 else FONT - 0.5  # seven boxes are narrow
    fig, ax = plt.subplots(figsize=(7, 2.3))
    for i, (step, note) in enumerate(zip(steps, notes)):
        bold = i in highlight
        ax.add_patch(plt.Rectangle((i * pitch, 0), width, 1, fc=FILL, ec=INK, lw=2.4 if bold else 1.2))
        ax.text(i * pitch + width / 2, 0.5, step, ha="center", va="center", fontsize=size)
        ax.text(i * pitch + width / 2, -0.12, note, ha="center", va="top", fontsize=FONT - 0.5, color="#555")
        if i < len(steps) - 1:
            _arrow(ax, (i * pitch + width, 0.5), ((i + 1) * pitch, 0.5))
    ax.set_xlim(-0.1, len(steps) * pitch - pitch + width + 0.1)
    ax.set_ylim(-0.75, 1.15)
    ax.axis("off")
    ax.set_title(title, fontsize=FONT + 1)
    return fig


def token_round(context: str, draft: Sequence[str], kept: int, own: str, title: str,
                head: bool = False) -> Figure:
    """One speculative round: the `context` so far, the drafter's block `draft` (gamma tokens),
    of which the first `kept` survive verification, and `own`, the token the target samples
    itself at the first rejected slot (or as the bonus when every draft survived). With `head`,
    arrows from each drafted token into the next slot: the Markov or RNN head's input;
    without, every slot is drafted from the context alone (one parallel forward)."""
    if not 0 <= kept <= len(draft):
        raise ValueError(f"kept must be in 0..{len(draft)} (the drafted tokens), got {kept}")
    fig, ax = plt.subplots(figsize=(7, 2.5))
    ax.text(0, 1.6, context, ha="left", va="center", fontsize=FONT, color="#333")
    pitch, width = 0.95, 0.85
    for k, token in enumerate(draft):
        x = k * pitch
        color = KEPT if k < kept else DROPPED
        ax.add_patch(plt.Rectangle((x, 0.5), width, 0.6, fc="white", ec=color, lw=1.6,
                                   ls="-" if k <= kept else ":"))
        ax.text(x + width / 2, 0.8, token, ha="center", va="center", fontsize=FONT)
        ax.text(x + width / 2, 0.3, f"slot {k + 1}", ha="center", va="center", fontsize=FONT - 1, color="#555")
        if head and k > 0:
            _arrow(ax, (x - pitch + width * 0.8, 1.1), (x + width * 0.2, 1.1), color=OWN,
                   connectionstyle="arc3,rad=-0.5")
        mark = "kept" if k < kept else ("rejected" if k == kept else "dropped")
        ax.text(x + width / 2, 0.05, mark, ha="center", va="center", fontsize=FONT - 1, color=color)
    bonus = kept == len(draft)  # every draft survived: the target's token comes after the block
    x_own, y_own = kept * pitch, (0.5 if bonus else -0.55)
    ax.add_patch(plt.Rectangle((x_own, y_own), width, 0.6 if bonus else 0.45, fc=FILL, ec=OWN, lw=1.6))
    ax.text(x_own + width / 2, y_own + (0.3 if bonus else 0.225), own, ha="center", va="center", fontsize=FONT)
    label = "bonus: the\ntarget's own" if bonus else "correction: the target's own"
    ax.text(x_own + (width / 2 if bonus else width + 0.1), 0.15 if bonus else y_own + 0.225, label,
            ha="center" if bonus else "left", va="center", fontsize=FONT - 1, color=OWN)
    ax.set_xlim(-0.1, (len(draft) + 1) * pitch + 0.2)
    ax.set_ylim(-0.75, 1.85)
    ax.axis("off")
    ax.set_title(title, fontsize=FONT + 1)
    return fig
