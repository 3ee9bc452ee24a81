"""Acceptance of a drafter on the held-out prompts of each domain (chapter 03; reused later).

The protocol of the paper's Table 1 at toy scale: first turn only, the chat template, chain
drafting with gamma tokens per round, temperature 1.0 for target and drafter alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from ...progress import progress
from ...runtime import device_generator, model_device
from ...record import Rounds, conditional_acceptance, prefix_survival, tau
from ...speculative import Drafter, Rollout, speculative_generate

if TYPE_CHECKING:  # the toy world (and `datasets` with it) stays out of chapter 07's headless path
    from .world import ToyWorld


@dataclass
class DomainAcceptance:
    """What one drafter achieved on one domain: tau (tokens per round, bonus included), the
    paper's Figure 2 curve (conditional acceptance at positions 1..gamma), DeepSpec's
    accept_rate@k (prefix survival), how many rounds and tokens they rest on, and (when kept)
    the record of those rounds, labelled with the domain."""

    domain: str
    tau: float
    conditional: list[float]
    prefix_survival: list[float]
    rounds: int
    tokens: int
    record: Rounds | None = field(default=None, repr=False)
    per_generation: list[list[float]] = field(default_factory=list)
    """[emitted tokens, rounds] of each generation, in prompt order: what `verdicts` resamples."""

    def to_dict(self) -> dict:
        """Everything but the record of rounds."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "record"}


def summarize(domain: str, rounds: Rounds, gamma: int, tokens: int, keep_record: bool = False) -> DomainAcceptance:
    """A DomainAcceptance from the rounds of one domain (their record kept, labelled `domain`,
    if `keep_record`)."""
    as_list = lambda values: [None if np.isnan(v) else round(float(v), 4) for v in values]
    return DomainAcceptance(domain, float(tau(rounds)), as_list(conditional_acceptance(rounds, gamma)),
                            as_list(prefix_survival(rounds, gamma)), len(rounds), tokens,
                            rounds.labelled(domain) if keep_record else None)


def summarize_rollouts(domain: str, rollouts: Sequence[Rollout], gamma: int, keep_record: bool = False
                       ) -> DomainAcceptance:
    """`summarize` over several rollouts: their rounds pooled, their tokens counted, and each
    rollout's (emitted tokens, rounds) kept for the verdicts' bootstrap."""
    report = summarize(domain, Rounds.concat([out.rounds for out in rollouts]), gamma,
                       sum(len(out.tokens) for out in rollouts), keep_record)
    report.per_generation = [[float(out.rounds.emitted.sum()), len(out.rounds)] for out in rollouts]
    return report


def measure_acceptance(world: ToyWorld, drafter: Drafter, gamma: int, n_prompts: int, new_tokens: int,
                       samples: int = 1, temperature: float = 1.0, seed: int = 0,
                       domains: Sequence[str] | None = None, desc: str = "acceptance",
                       keep_record: bool = False) -> dict[str, DomainAcceptance]:
    """Speculative generation, `samples` times each, on the first `n_prompts` held-out prompts
    of each domain; returns {domain: DomainAcceptance}, with the record of every round if
    `keep_record` (what calibration is fitted on). Seeded: the same call gives the same
    numbers. `domains` default: all of the corpus's."""
    from . import corpus

    domains = corpus.DOMAINS if domains is None else domains
    if min(n_prompts, new_tokens, gamma, samples) < 1:
        raise ValueError(f"need n_prompts, new_tokens, gamma and samples >= 1, got {n_prompts}, {new_tokens}, "
                         f"{gamma}, {samples}")
    generator = device_generator(seed, model_device(world.target))
    eos = world.tokenizer.eos_token_id
    prompts = {domain: world.eval_prompts(domain)[:n_prompts] * samples for domain in domains}
    bar = progress(total=sum(len(p) for p in prompts.values()), desc=desc)
    report = {}
    for domain in domains:
        bar.set_postfix_str(domain)
        rollouts = []
        for prompt in prompts[domain]:
            rollouts.append(speculative_generate(world.target, drafter, world.encode_prompt(prompt), new_tokens, gamma,
                                                 temperature, generator, eos))
            bar.update()
        report[domain] = summarize_rollouts(domain, rollouts, gamma, keep_record)
    bar.close()
    return report
