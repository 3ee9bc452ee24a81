"""The multimodal collision, counted (chapter 03; chapter 04 shows it resolved).

Where the target puts mass on several multi-token phrasings ("Of course!" / "No problem!"),
a parallel drafter predicts each slot's MARGINAL: slot 1 may say "Of" while slot 2 says
" problem!", a block no phrasing ever produces. An autoregressive drafter conditions slot 2
on its own slot 1 and stays coherent. This module builds such contexts from the chat
domain, samples drafts from any `Drafter` (and continuations from the target), and sorts
each into coherent (head i + tail i), mixed (head i + tail j, j != i) or other.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import torch
from transformers import PreTrainedModel

from . import samplers
from .knobs import CorpusKnobs
from . import tokenizer
from ...baselines import autoregressive_generate
from ...speculative import Drafter, target_hidden
from .world import ToyWorld

OUTCOMES: tuple[str, ...] = ("coherent", "mixed", "other")


@dataclass(frozen=True)
class Phrasings:
    """Equally good phrasings at one kind of context: phrasing i is heads[i] + tails[i].
    `cue` is the reply text right before the phrasings start ("" = at the reply's start)."""

    name: str
    heads: tuple[str, ...]
    tails: tuple[str, ...]
    cue: str = ""

    def __post_init__(self) -> None:
        if len(self.heads) != len(self.tails) or len(self.heads) < 2:
            raise ValueError(f"{self.name}: need >= 2 phrasings with one head and one tail each")

    def classify(self, text: str) -> str:
        """'coherent' if text starts with heads[i] + tails[i], 'mixed' if with heads[i] +
        tails[j] for j != i, else 'other'."""
        for i, head in enumerate(self.heads):
            if not text.startswith(head):
                continue
            rest = text[len(head):]
            if rest.startswith(self.tails[i]):
                return "coherent"
            if any(rest.startswith(tail) for j, tail in enumerate(self.tails) if j != i):
                return "mixed"
        return "other"


def _split_opener(opener: str) -> tuple[str, str]:
    head = opener.split(" ")[0].rstrip("!")
    return head, opener[len(head):]


def chat_phrasings(knobs: CorpusKnobs) -> list[Phrasings]:
    """The chat domain's two multi-token collisions, from the corpus's own phrase lists:
    the reply's opener, and the adjective that decides the verb two tokens later."""
    b = knobs.chat_branching
    openers = [_split_opener(o) for o in samplers.OPENERS[:b]]
    agreement = samplers.AGREEMENT[:b]
    return [
        Phrasings("opener", tuple(h for h, _ in openers), tuple(t for _, t in openers)),
        Phrasings("adjective ... verb", tuple(f" {a} to" for a, _ in agreement),
                  tuple(f" {v}" for _, v in agreement), cue=" I would be"),
    ]


def contexts(world: ToyWorld, phrasings: Phrasings, n: int) -> list[torch.Tensor]:
    """Token ids of up to n chat contexts that end right before the phrasings: the held-out
    prompt, and the reference reply up to and including the cue."""
    records = world.split("eval", ("chat",))
    out = []
    for prompt, reply in zip(records["prompt"], records["reply"]):
        if phrasings.cue not in reply:
            continue
        prefix = reply[: reply.index(phrasings.cue) + len(phrasings.cue)] if phrasings.cue else ""
        text = tokenizer.format_chat(prompt) + prefix
        out.append(torch.tensor(world.tokenizer(text)["input_ids"]))
        if len(out) == n:
            break
    if not out:
        raise ValueError(f"no chat eval reply contains the cue {phrasings.cue!r}")
    return out


@torch.inference_mode()
def draft_texts(drafter: Drafter, target: PreTrainedModel, tok, context: torch.Tensor, gamma: int,
                samples: int, generator: torch.Generator) -> list[str]:
    """`samples` drafts of gamma tokens from the block anchored at the context's last token
    (temperature 1), decoded."""
    ids = context.to(next(target.parameters()).device)
    hidden = target_hidden(target, ids, getattr(drafter, "target_layer_ids", None))
    texts = []
    for _ in range(samples):
        drafter.start(ids[:-1], None if hidden is None else hidden[:-1])
        draft = drafter.draft(ids, gamma, 1.0, generator)
        texts.append(tok.decode(draft.tokens.tolist()))
    return texts


def target_texts(target: PreTrainedModel, tok, context: torch.Tensor, gamma: int, samples: int,
                 generator: torch.Generator) -> list[str]:
    """`samples` continuations of gamma tokens sampled from the target itself (temperature 1)."""
    return [tok.decode(autoregressive_generate(target, context, gamma, 1.0, generator, None).tolist())
            for _ in range(samples)]


@dataclass
class CollisionCount:
    """How one source's samples fell at one kind of context, with a few examples."""

    source: str
    phrasings: str
    counts: dict[str, int]
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def share(self, outcome: str) -> float:
        """The fraction of samples with this outcome."""
        return self.counts.get(outcome, 0) / max(self.total, 1)


def count(source: str, phrasings: Phrasings, texts: Sequence[str], keep: int = 3) -> CollisionCount:
    """Sort texts into OUTCOMES and keep up to `keep` distinct examples of each."""
    outcomes = [phrasings.classify(t) for t in texts]
    examples: dict[str, list[str]] = {o: [] for o in OUTCOMES}
    for text, outcome in zip(texts, outcomes):
        if text not in examples[outcome] and len(examples[outcome]) < keep:
            examples[outcome].append(text)
    tally = Counter(outcomes)
    return CollisionCount(source, phrasings.name, {o: tally.get(o, 0) for o in OUTCOMES}, examples)
