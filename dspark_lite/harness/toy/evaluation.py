"""Acceptance of a drafter on the held-out prompts of each domain (chapter 03; reused later).

The protocol of the paper's Table 1 at toy scale: first turn only, the chat template, chain
drafting with gamma tokens per round, temperature 1.0 for target and drafter alike.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
import sys
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


def rollout_seed(seed: int, domain: int, index: int) -> int:
    """The seed of one rollout (the `index`-th generation of the `domain`-th domain): each rollout
    draws from its own generator, so the numbers do not depend on the order rollouts run in."""
    return int(np.random.SeedSequence([seed, domain, index]).generate_state(1)[0])


def worker_processes(device: torch.device) -> int:
    """How many processes generate rollouts (or train drafters, `zoo`) side by side: one per CPU
    core on Linux; one on a GPU or where processes cannot fork. A toy rollout is a long chain of
    small ops that a second thread barely speeds up (measured on 2 cores: six rollouts in 0.71 s
    on one thread, 0.68 s on two), so two single-thread processes generate about 1.7 times as many."""
    if device.type != "cpu" or sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return len(os.sched_getaffinity(0))


_WORK: tuple | None = None  # what forked rollout workers inherit: target, drafter, settings and jobs


def _generate(job: int) -> tuple[list[int], Rounds]:
    """The `job`-th rollout of `measure_acceptance` -> (tokens, rounds)."""
    target, drafter, gamma, new_tokens, temperature, eos, jobs = _WORK
    _, prompt, seed = jobs[job]  # (domain number, prompt ids, seed)
    generator = device_generator(seed, model_device(target))
    out = speculative_generate(target, drafter, prompt, new_tokens, gamma, temperature, generator, eos)
    return out.tokens.tolist(), out.rounds


def fork_pool(processes: int) -> multiprocessing.pool.Pool:
    """A pool of `processes` forked single-thread workers (see `worker_processes`); forked, they
    inherit the models and settings the caller put in a module global, without pickling them."""
    return multiprocessing.get_context("fork").Pool(processes, initializer=torch.set_num_threads, initargs=(1,))


def measure_acceptance(world: ToyWorld, drafter: Drafter, gamma: int, n_prompts: int, new_tokens: int,
                       samples: int = 1, temperature: float = 1.0, seed: int = 0,
                       domains: Sequence[str] | None = None, desc: str = "acceptance",
                       keep_record: bool = False, workers: int | None = None) -> dict[str, DomainAcceptance]:
    """Speculative generation, `samples` times each, on the first `n_prompts` held-out prompts
    of each domain; returns {domain: DomainAcceptance}, with the record of every round if
    `keep_record` (what calibration is fitted on). Seeded, one generator per rollout
    (`rollout_seed`): the same call gives the same numbers, with any number of `workers`
    (None: `worker_processes`; more than one forks single-thread processes). `domains` default:
    all of the corpus's."""
    global _WORK
    from . import corpus

    domains = corpus.DOMAINS if domains is None else domains
    if min(n_prompts, new_tokens, gamma, samples) < 1:
        raise ValueError(f"need n_prompts, new_tokens, gamma and samples >= 1, got {n_prompts}, {new_tokens}, "
                         f"{gamma}, {samples}")
    workers = worker_processes(model_device(world.target)) if workers is None else workers
    if workers < 1:
        raise ValueError(f"need workers >= 1, got {workers}")
    jobs = [(d, world.encode_prompt(prompt), rollout_seed(seed, d, i))
            for d, domain in enumerate(domains)
            for i, prompt in enumerate(world.eval_prompts(domain)[:n_prompts] * samples)]
    _WORK = (world.target, drafter, gamma, new_tokens, temperature, world.tokenizer.eos_token_id, jobs)
    done: list[list] = [[] for _ in domains]
    bar, pool = progress(total=len(jobs), desc=desc), None
    try:
        if workers > 1 and len(jobs) > 1:
            pool = fork_pool(min(workers, len(jobs)))
        order = range(len(jobs))
        results = map(_generate, order) if pool is None else pool.imap(_generate, order, chunksize=2)
        for (d, _, _), (tokens, rounds) in zip(jobs, results):
            done[d].append(Rollout(torch.tensor(tokens, dtype=torch.long), rounds))
            bar.update()
    finally:
        _WORK = None
        if pool is not None:
            pool.terminate()
        bar.close()
    return {domain: summarize_rollouts(domain, done[d], gamma, keep_record) for d, domain in enumerate(domains)}
