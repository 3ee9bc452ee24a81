"""The token stream (chapters 02, 04 and 07): one prompt's rounds as coloured text, stepped through
with a slider in the rendered book.

A round shows its anchor, the drafts the target accepted, the drafts it rejected (struck through)
and the token the target added: a correction at the first rejection, or a bonus when every draft
survived. What is drawn comes from the one record of rounds (`Rollout.rounds`: proposed, accepted,
ended in a draft, confidence logits) and the token ids: the rollout's output, and the drafts the
engine was handed, which `RecordingDrafter` keeps (the record holds counts, not the rejected ids).
`tests/test_stream.py` holds every drawn token against that record.
"""
from __future__ import annotations

import unicodedata

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import altair as alt
import numpy as np
import pandas as pd
import torch

from ...record import sigmoid
from ...speculative import Draft, Rollout

KINDS = ("context", "anchor", "accepted", "rejected", "correction", "bonus")
COLORS = ("#9e9e9e", "#3182bd", "#31a354", "#de2d26", "#d95f02", "#7b3294")


class RecordingDrafter:
    """A drafter that drafts through `drafter` and keeps every draft's token ids, in order (one
    entry a round): the engine sees the same drafts, so the rollout does not change."""

    def __init__(self, drafter: Any) -> None:
        self.drafter, self.drafts = drafter, []

    def __getattr__(self, name: str) -> Any:  # vocab_size, target_layer_ids, gamma, ...
        return getattr(self.drafter, name)

    def start(self, prompt_ids: torch.Tensor, target_hidden: torch.Tensor | None) -> None:
        self.drafts = []
        self.drafter.start(prompt_ids, target_hidden)

    def draft(self, context_ids: torch.Tensor, gamma: int, temperature: float,
              generator: torch.Generator | None) -> Draft:
        draft = self.drafter.draft(context_ids, gamma, temperature, generator)
        self.drafts.append(draft.tokens.detach().cpu().tolist())
        return draft

    def accept(self, n_accepted: int, new_target_hidden: torch.Tensor | None) -> None:
        self.drafter.accept(n_accepted, new_target_hidden)


@dataclass(frozen=True)
class StreamRound:
    """One round as the figure draws it: the anchor id, the drafted ids, how many the target
    accepted, the token it added (None when the round ended on an accepted end id, or the output was
    cut at the length), whether that token is a bonus, and the drafts' confidences (None without a
    confidence head)."""

    anchor: int
    drafted: tuple[int, ...]
    accepted: int
    added: int | None
    bonus: bool
    confidences: tuple[float, ...] | None


def stream_rounds(rollout: Rollout, drafts: Sequence[Sequence[int]]) -> list[StreamRound]:
    """The rounds of one rollout with their token ids (`RecordingDrafter.drafts`). The output starts
    with the prefill's token; each round then emits its accepted drafts and, unless it ended on an
    accepted end id, the target's token; the last round may be cut at the length. ValueError when the
    drafts do not match the record (another rollout's drafts)."""
    tokens, record = rollout.tokens.tolist(), rollout.rounds
    if len(drafts) != len(record):
        raise ValueError(f"{len(drafts)} recorded drafts for {len(record)} rounds: not this rollout's drafts")
    rounds, position = [], 1
    for i, drafted in enumerate(drafts):
        proposed, accepted = int(record.proposed[i]), int(record.accepted[i])
        if len(drafted) != proposed or tokens[position:position + accepted] != list(drafted[:accepted])[:len(tokens) - position]:
            raise ValueError(f"round {i}: the recorded draft {list(drafted)} does not match the record "
                             f"(proposed {proposed}, accepted {accepted}) and the output")
        anchor = tokens[position - 1]
        position += accepted
        ended = bool(record.ended_in_draft[i])
        added = None if ended or position >= len(tokens) else tokens[position]
        position += 0 if added is None else 1
        logits = None if record.logits is None else record.logits[i, :proposed]
        confidences = None if logits is None or not np.isfinite(logits).all() else tuple(float(c) for c in sigmoid(logits))
        rounds.append(StreamRound(anchor, tuple(int(t) for t in drafted), accepted, added,
                                  added is not None and accepted == proposed, confidences))
    return rounds


def _piece(tokenizer: Any, token: int) -> str:
    """One token's text as the figure draws it: a newline as ⏎, any other control character
    (which no SVG text may hold: a random model's tokens can decode to one) as �, an empty piece
    as ·."""
    text = tokenizer.decode([token]).replace("\n", "⏎")
    return "".join("\ufffd" if unicodedata.category(c) == "Cc" else c for c in text) or "·"


def stream_states(rounds: Sequence[StreamRound], tokenizer: Any, context_tokens: int = 48,
                  width: int = 64) -> pd.DataFrame:
    """Every state of the token stream figure, one per round (the slider's value): the last
    `context_tokens` committed tokens before the round's anchor, then the anchor, every draft
    (accepted or rejected) and the token the target added, laid out in a monospace grid `width`
    characters wide. One row a drawn token: round, kind (`KINDS`), token id, text, its columns
    x..x2 and line, and the draft's confidence where there is one. The figure draws `glyphs` (the
    text without its leading spaces, which SVG drops, no-break ones included) at column `x_glyphs`,
    so that " problem" after "No" reads "No problem", not "Noproblem" with the space after it."""
    rows, committed = [], []
    for r, rnd in enumerate(rounds):
        shown = [("context", t, None) for t in committed[-context_tokens:]] + [("anchor", rnd.anchor, None)]
        for k, token in enumerate(rnd.drafted):
            confidence = None if rnd.confidences is None else rnd.confidences[k]
            shown.append(("accepted" if k < rnd.accepted else "rejected", token, confidence))
        if rnd.added is not None:
            shown.append(("bonus" if rnd.bonus else "correction", rnd.added, None))
        column = line = 0
        for kind, token, confidence in shown:
            text = _piece(tokenizer, token)
            if column + len(text) > width and column > 0:
                column, line = 0, line + 1
            glyphs = text.lstrip(" ") or text
            rows.append({"round": r, "kind": kind, "token": int(token), "text": text, "x": column,
                         "x2": column + len(text), "glyphs": glyphs, "x_glyphs": column + len(text) - len(glyphs),
                         "line": line, "confidence": confidence})
            column += len(text)
        committed += [rnd.anchor] + list(rnd.drafted[:rnd.accepted])
    frame = pd.DataFrame(rows)
    frame["confidence"] = frame["confidence"].astype(float).round(3)
    return frame


def stream_summary(rounds: Sequence[StreamRound]) -> pd.DataFrame:
    """One line of text per round, shown above the tokens: what was proposed, accepted and added."""
    rows = []
    for r, rnd in enumerate(rounds):
        added = "ended on an accepted end id" if rnd.added is None else ("bonus" if rnd.bonus else "correction")
        conf = "" if rnd.confidences is None else "; confidences " + " ".join(f"{c:.2f}" for c in rnd.confidences)
        rows.append({"round": r, "label": f"round {r + 1} of {len(rounds)}: {rnd.accepted} of {len(rnd.drafted)} "
                                          f"drafts accepted, then {added}{conf}"})
    return pd.DataFrame(rows)


def stream_chart(streams: Mapping[str, Sequence[StreamRound]], tokenizer: Any, width: int = 64,
                 context_tokens: int = 48) -> alt.VConcatChart:
    """The token stream to step through: one panel per named stream (DFlash beside DSpark on the same
    prompt and seed, say), one slider over the round for all of them (a stream with fewer rounds
    shows its last). Colours: `KINDS` in `COLORS`; rejected drafts struck through; hover a draft for
    its confidence."""
    most = max(len(rounds) for rounds in streams.values())
    # "round" is a Vega expression function, so the parameter has another name; one round: no slider
    slider = alt.binding_range(min=0, max=most - 1, step=1, name="round ") if most > 1 else alt.Undefined
    pick = alt.param(name="shown_round", value=0, bind=slider)
    color = alt.Color("kind:N", scale=alt.Scale(domain=list(KINDS), range=list(COLORS)),
                      legend=alt.Legend(title=None, orient="bottom", direction="horizontal"))
    panels = []
    for name, rounds in streams.items():
        last = len(rounds) - 1
        states = stream_states(rounds, tokenizer, context_tokens, width)
        summary = stream_summary(rounds)
        at = f"datum.round == min(shown_round, {last})"
        lines = int(states["line"].max()) + 1
        scale_x, scale_y = alt.Scale(domain=[0, width]), alt.Scale(domain=[-1.5, lines], reverse=True)
        base = alt.Chart(states).transform_filter(at)
        text = base.mark_text(align="left", baseline="middle", font="monospace", fontSize=13).encode(
            x=alt.X("x_glyphs:Q", scale=scale_x, axis=None), y=alt.Y("line:Q", scale=scale_y, axis=None), text="glyphs:N",
            color=color, tooltip=["kind:N", "text:N", "token:Q", alt.Tooltip("confidence:Q", format=".3f")])
        strike = base.transform_filter("datum.kind == 'rejected'").mark_rule(color=COLORS[3], strokeWidth=1.5).encode(
            x="x:Q", x2="x2:Q", y="line:Q")
        label = alt.Chart(summary).transform_filter(at).mark_text(align="left", fontSize=12).encode(
            x=alt.value(0), y=alt.value(-6), text="label:N")
        panels.append(alt.layer(text, strike, label).properties(
            width=8 * width, height=18 * (lines + 1), title=alt.TitleParams(name, anchor="start", fontSize=13)))
    return alt.vconcat(*panels).add_params(pick).configure_view(stroke=None)
