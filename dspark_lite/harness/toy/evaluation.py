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
from ...hidden_drafter import AnchorBatch
from ...speculative import Drafter, Rollout, speculative_generate
from ...sampling import total_variation
from ...loss import block_targets
from ...training_data import TargetViews, TrainingSequences
from .workers import fork_map, worker_processes

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
    per_generation: list = field(default_factory=list)
    """[emitted tokens, rounds] of each generation, in prompt order: what `verdicts` resamples
    ([seeds][generations][2] in a `seed_mean`)."""
    seed_taus: list[float] = field(default_factory=list)
    """Each training seed's tau, in a `seed_mean` (empty for one drafter)."""

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


def seed_mean(runs: Sequence[dict[str, DomainAcceptance]]) -> dict[str, DomainAcceptance]:
    """One drafter kind trained from several seeds, each measured on the same prompts (records
    kept): per domain, tau is the mean of the seeds' taus (`seed_taus` keeps each), the curves
    and counts are over all seeds' rounds pooled, and `per_generation` is [seeds][generations][2]."""
    if not runs or any(run.keys() != runs[0].keys() for run in runs):
        raise ValueError(f"expected one report per seed, over the same domains, got {[sorted(r) for r in runs]}")
    pooled = {}
    for domain, first in runs[0].items():
        reports = [run[domain] for run in runs]
        if any(r.record is None for r in reports):
            raise ValueError(f"{domain}: a seed mean needs every seed's record of rounds (keep_record=True)")
        merged = summarize(domain, Rounds.concat([r.record for r in reports]), len(first.conditional),
                           sum(r.tokens for r in reports), keep_record=True)
        merged.seed_taus = [r.tau for r in reports]
        merged.tau = float(np.mean(merged.seed_taus))
        merged.per_generation = [r.per_generation for r in reports]
        pooled[domain] = merged
    return pooled


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


_WORK: tuple | None = None  # what forked rollout workers inherit: target, drafter, settings and jobs


def _generate(job: int) -> tuple[list[int], Rounds]:
    """The `job`-th rollout of `measure_acceptance` -> (tokens, rounds)."""
    target, drafter, gamma, new_tokens, temperature, eos, jobs = _WORK
    _, prompt, seed = jobs[job]  # (domain number, prompt ids, seed)
    generator = device_generator(seed, model_device(target))
    out = speculative_generate(target, drafter, prompt, new_tokens, gamma, temperature, generator, eos)
    return out.tokens.tolist(), out.rounds


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
    bar = progress(total=len(jobs), desc=desc)
    labels = [f"{domain} prompt {i % n}, sample {i // n}" for domain in domains
              for n in [len(world.eval_prompts(domain)[:n_prompts])] for i in range(n * samples)]
    describe = lambda job: f"rollout {job} ({labels[job]}) of {type(drafter).__name__}"
    try:
        order = range(len(jobs))
        results = (map(_generate, order) if workers == 1 or len(jobs) < 2
                   else fork_map(_generate, len(jobs), workers, describe))
        for (d, _, _), (tokens, rounds) in zip(jobs, results):
            done[d].append(Rollout(torch.tensor(tokens, dtype=torch.long), rounds))
            bar.update()
    finally:
        _WORK = None
        bar.close()
    return {domain: summarize_rollouts(domain, done[d], gamma, keep_record) for d, domain in enumerate(domains)}


def _slot_blocks(drafter: Drafter, target: torch.nn.Module, replies: TrainingSequences, batch_size: int):
    """Every reply's blocks, anchored at every reply position, a batch of replies at a time:
    yields (1 - TV per slot [B, A, gamma], the mask of slots that exist [B, A, gamma], the
    target's distribution per slot [B, A, gamma, V]), teacher-forced (`slot_acceptance`)."""
    layer_ids = getattr(drafter, "target_layer_ids", None)
    views = TargetViews(target, replies, layer_ids)
    gamma, device = drafter.gamma, model_device(drafter)
    for first in range(0, len(replies), batch_size):
        indices = range(first, min(first + batch_size, len(replies)))
        input_ids, lengths, prompt_lengths = replies.batch(indices)
        logits, hidden = views.batch(indices)
        n_anchors = lengths - prompt_lengths  # the trainer's anchors: last prompt token .. length - 2
        offsets = torch.arange(int(n_anchors.max()))
        anchors = (prompt_lengths[:, None] - 1 + offsets).minimum(lengths[:, None] - 2)  # [B, A]
        batch = AnchorBatch(input_ids.to(device), None if hidden is None else hidden.to(device), anchors.to(device))
        output = drafter.train_logits(batch)
        draft_logits = output if isinstance(output, torch.Tensor) else output.logits  # [B, A, gamma, V]
        targets = block_targets(input_ids, logits.to(device), anchors, lengths, gamma)
        mask = targets.mask & (offsets < n_anchors[:, None]).to(device)[..., None]  # [B, A, gamma]
        draft_probs = torch.softmax(draft_logits.float(), dim=-1)  # [B, A, gamma, V]
        yield (1 - total_variation(draft_probs, targets.probs)) * mask, mask, targets.probs


@torch.no_grad()
def slot_acceptance(drafter: Drafter, target: torch.nn.Module, replies: TrainingSequences,
                    batch_size: int = 8) -> np.ndarray:
    """Per-slot acceptance on the target's own continuations: for every reply and slot k, the mean
    of 1 - TV(p_d,k, p_t,k) over blocks anchored at every position of the reply, with the true
    tokens before slot k (teacher-forced) and the target's distribution given that true prefix.
    Returns [replies, gamma]; NaN where a reply has no block whose slot k exists.

    This is where suffix decay lives: no block is dropped because an earlier slot was
    rejected, unlike the conditional acceptance of decoding, which averages slot k over the
    rounds that survived slots 1..k-1 only."""
    out = [(accept.sum(1) / mask.sum(1)).cpu().numpy()  # [B, gamma]; 0/0 -> NaN
           for accept, mask, _ in _slot_blocks(drafter, target, replies, batch_size)]
    return np.concatenate(out)


@torch.no_grad()
def slot_acceptance_split(drafter: Drafter, target: torch.nn.Module, replies: TrainingSequences,
                          branch_entropy: float, batch_size: int = 8) -> dict[str, np.ndarray]:
    """`slot_acceptance` split by what came earlier in the block. Slot k of a block is *after a
    branch point* when the target's distribution at some earlier slot j < k had an entropy above
    `branch_entropy` nats: the world chose there, and slot k's right answer depends on the choice,
    which a parallel slot cannot see and a drafter sampling in order can. Otherwise it is *clean*
    (slot 1 always is). Returns {"all" | "clean" | "branched" | "branched_share": [replies, gamma]}:
    each reply's mean 1 - TV over all its slots k (`slot_acceptance`), its clean and its branched
    ones (NaN where it has none), and the share of its slots k that are branched."""
    if not branch_entropy > 0:
        raise ValueError(f"branch_entropy is a threshold in nats > 0, got {branch_entropy}")
    parts: dict[str, list[np.ndarray]] = {"all": [], "clean": [], "branched": [], "branched_share": []}
    for accept, mask, probs in _slot_blocks(drafter, target, replies, batch_size):
        entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1)  # [B, A, gamma] the target's, per slot
        chose = (entropy > branch_entropy) & mask
        earlier = torch.cat([torch.zeros_like(chose[..., :1]), chose[..., :-1].cummax(-1).values], dim=-1)  # any j < k
        branched, clean = mask & earlier, mask & ~earlier
        parts["all"].append((accept.sum(1) / mask.sum(1)).cpu().numpy())
        parts["clean"].append(((accept * clean).sum(1) / clean.sum(1)).cpu().numpy())
        parts["branched"].append(((accept * branched).sum(1) / branched.sum(1)).cpu().numpy())
        parts["branched_share"].append((branched.sum(1) / mask.sum(1)).cpu().numpy())
    return {name: np.concatenate(arrays) for name, arrays in parts.items()}
