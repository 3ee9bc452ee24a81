"""Speculative decoding (chapter 02): lossless verification and the rollout loop that Eq. 1 of
chapter 02 times, L = (T_draft + T_verify) / tau (`latency_per_token`), with the drafter
interface they share.
Paper section 2 (Leviathan et al. 2023, Chen et al. 2023).

One round: the drafter proposes gamma tokens after the anchor (the last committed token, the
block's first slot), or fewer when it stops early (an Eagle3 chain at an end id); the target
scores anchor + drafts in ONE forward pass on top of its KV cache; rejection sampling keeps a
prefix of the drafts and adds one correction (at the first rejection) or bonus (when all are
accepted) token. The loop writes a `record.Rounds`; tau and the acceptance curves are read
from it.

Rounds are counted as DeepSpec's evaluation counts them (deepspec/eval/base_evaluator.py):
every round asks for gamma drafts, the last one included, and the output is cut at
max_new_tokens (`generate_decoding_sample`; its loop, `while start < max_length`, also runs one
more round, all of whose tokens are cut, when the output lands exactly on max_new_tokens: ours
stops there, and counts one round fewer). A round verifies what was drafted and records that
many as proposed (`verify_draft_tokens` scores `draft_token_count + 1` positions;
`proposal_lengths` records the count). A round whose accepted drafts hold an end token emits
the drafts up to and including it and no correction/bonus token (the `terminated_by_stop_token`
branch; `Rounds.ended_in_draft`).

Hidden-state convention (shared with DeepSpec): a drafter's `target_layer_ids` are 0-based
indices of the target's decoder layers; layer id `i` selects `outputs.hidden_states[i + 1]`
of a transformers forward with `output_hidden_states=True` (index 0 there is the embedding
output). The selected layers are concatenated on the feature axis, giving one tensor of
shape [positions, len(target_layer_ids) * hidden_size]. The last decoder layer's entry is
the final-RMSNorm output (transformers ties it to `last_hidden_state`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from . import checks
from .checks import end_ids
from .kvcache import cache_kwarg, new_cache, remove_tokens
from .record import Rounds
from .runtime import model_device
from .sampling import generator_device, probs_from_logits, sample_from_probs, sample_token

# ----------------------------------------------------------------------------------------
# The drafter interface
# ----------------------------------------------------------------------------------------


@dataclass
class Draft:
    """One round's proposal.

    tokens: LongTensor [gamma], the proposed tokens x_1..x_gamma after the anchor; `gamma` here
        is the draft's own length, 1 <= gamma <= the gamma the engine asked for (a drafter
        may stop early, as an Eagle3 chain does at an end id).
    probs: FloatTensor [gamma, V], the full distribution each token was sampled from, at the
        sampling temperature (float32; at temperature 0 a one-hot or any distribution whose
        argmax is the token: greedy verification only compares tokens).
    confidence_logits: FloatTensor [gamma] or None, the confidence head's logits z_k: c_k =
        sigmoid(z_k) estimates that token k survives given that tokens < k survived (Eq. 7);
        recorded (`record.Rounds.logits`), never used by verification.
    """

    tokens: Tensor
    probs: Tensor
    confidence_logits: Tensor | None = None

    @property
    def gamma(self) -> int:
        return int(self.tokens.shape[0])


@runtime_checkable
class Drafter(Protocol):
    """What the rollout loop needs from any drafter.

    Call order per generation: `start` once after the target's prefill, then per round
    `draft` followed by `accept`. Hidden-state tensors follow the module convention:
    [positions, len(target_layer_ids) * hidden_size], no batch axis, or None when
    `target_layer_ids` is None (a classic drafter that reads only tokens).
    """

    vocab_size: int
    target_layer_ids: tuple[int, ...] | None

    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None) -> None:
        """Reset for a new generation. `prompt_ids` [T]; `target_hidden` covers the T prompt
        positions. The first anchor is the token the target sampled after the prompt."""
        ...

    def draft(
        self, context_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None
    ) -> Draft:
        """Propose `gamma` >= 1 tokens, or fewer (at least 1) when the drafter stops early
        (e.g. `eagle.EagleDrafter` after drafting an end id). `context_ids` [L] is every
        token so far (prompt and generated); its last is the anchor."""
        ...

    def accept(self, n_accepted: int, new_target_hidden: Tensor | None) -> None:
        """The target kept the first `n_accepted` drafts of the last `draft` call (the
        correction/bonus token arrives as the next anchor). `new_target_hidden` covers the
        n_accepted + 1 positions newly committed to the target's cache: the anchor and the
        accepted drafts."""
        ...


# ----------------------------------------------------------------------------------------
# Verification
# ----------------------------------------------------------------------------------------


def rejection_sample(
    target_probs: Tensor, draft_tokens: Tensor, draft_probs: Tensor, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Lossless rejection sampling for a batch of blocks.

    target_probs [B, gamma+1, V], draft_tokens [B, gamma], draft_probs [B, gamma, V], all
    valid distributions. Token k is accepted with probability min(1, p_t(x_k) / p_d(x_k)), one
    uniform draw per position; the first rejection k samples from norm(max(0, p_t - p_d)) at
    k, and a fully accepted block samples a bonus from p_t at position gamma.
    Returns (n_accepted [B], next_token [B]).
    """
    batch, gamma = draft_tokens.shape
    device = target_probs.device
    target_at_draft = target_probs[:, :gamma].gather(-1, draft_tokens[..., None]).squeeze(-1)
    draft_at_draft = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    accept_prob = (target_at_draft / draft_at_draft).clamp(max=1.0)
    uniforms = torch.rand(batch, gamma, generator=generator, device=generator_device(generator, device))
    accepted = uniforms.to(device) < accept_prob
    n_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)

    rows = torch.arange(batch, device=device)
    target_next = target_probs[rows, n_accepted]
    padded_draft = torch.cat([draft_probs, draft_probs.new_zeros(batch, 1, draft_probs.shape[-1])], dim=1)
    residual = (target_next - padded_draft[rows, n_accepted]).clamp(min=0.0)
    residual_mass = residual.sum(-1, keepdim=True)
    # A zero residual only happens when p_t == p_d, where rejection has probability 0;
    # falling back to p_t guards against rounding.
    next_probs = torch.where(residual_mass > 0, residual / residual_mass.clamp(min=1e-30), target_next)
    return n_accepted, sample_from_probs(next_probs, generator)


def greedy_verify(target_logits: Tensor, draft_tokens: Tensor) -> tuple[int, int]:
    """Temperature 0: accept drafts while they equal the target's argmax; the next token is the
    target's argmax after the accepted prefix."""
    target_choice = target_logits.argmax(-1)
    gamma = draft_tokens.shape[0]
    matches = draft_tokens.to(target_choice.device) == target_choice[:gamma]
    n_accepted = int(matches.long().cumprod(0).sum())
    return n_accepted, int(target_choice[n_accepted])


def verify_block(
    target_logits: Tensor, draft: Draft, temperature: float, generator: torch.Generator | None
) -> tuple[int, int]:
    """Verify one block: `target_logits` [gamma+1, V], row k the target's prediction after the
    anchor and drafts x_1..x_k. Greedy at temperature 0, rejection sampling otherwise. Returns
    (n_accepted, next_token). Trusts its input: `checks.validate_draft` says whether a draft fits."""
    if temperature == 0:
        return greedy_verify(target_logits, draft.tokens)
    target_probs = probs_from_logits(target_logits, temperature)  # [gamma+1, V]
    tokens = draft.tokens.to(target_probs.device)
    draft_probs = draft.probs.to(target_probs.device, torch.float32)
    n_accepted, next_token = rejection_sample(target_probs[None], tokens[None], draft_probs[None], generator)
    return int(n_accepted[0]), int(next_token[0])


# ----------------------------------------------------------------------------------------
# The target's forward
# ----------------------------------------------------------------------------------------


def select_target_hidden(hidden_states: Sequence[Tensor], layer_ids: Sequence[int]) -> Tensor:
    """Concatenate the chosen decoder layers' outputs, `hidden_states[i + 1]` for 0-based
    layer id i, on the feature axis: [..., positions, len(layer_ids) * H]."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


@torch.inference_mode()
def target_hidden(target: PreTrainedModel, input_ids: Tensor, layer_ids: Sequence[int] | None) -> Tensor | None:
    """The target's selected hidden states [L, len(layer_ids) * H] for one sequence
    `input_ids` [L] (no cache), or None for a drafter that reads no target layers. Only the
    last position's logits are computed (they are not used)."""
    if layer_ids is None:
        return None
    states = target(input_ids=input_ids[None], output_hidden_states=True, logits_to_keep=1).hidden_states
    return select_target_hidden(states, layer_ids)[0]


def target_forward(
    target: PreTrainedModel, input_ids: Tensor, cache: DynamicCache, layer_ids: Sequence[int] | None,
    last_only: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Logits [L, V] (or [1, V] for the last position only, as a prefill needs) and selected
    hidden states [L, len(layer_ids) * H] (or None) for `input_ids` [L] appended to the cache."""
    output = target(
        input_ids=input_ids[None], **cache_kwarg(cache), use_cache=True,
        output_hidden_states=layer_ids is not None, logits_to_keep=1 if last_only else 0,
    )
    hidden = None if layer_ids is None else select_target_hidden(output.hidden_states, layer_ids)[0]
    return output.logits[0], hidden


# ----------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """One speculative generation. `tokens` are the generated ids only (no prompt), on the
    device of the prompt passed in; `rounds`, one row per verification round. The first token
    comes from the prefill, every later one from a round: len(tokens) = min(max_new_tokens,
    1 + sum of `rounds.emitted`), since the last round may overshoot and the output is cut at
    max_new_tokens. Seconds, measured only with `speculative_generate(..., timed=True)` and
    None otherwise: prefill (target on the prompt), draft (all drafter calls), verify (target
    forwards in rounds), overhead (verification sampling, cache crops, bookkeeping)."""

    tokens: Tensor
    rounds: Rounds = field(default_factory=lambda: Rounds.of([], []))
    prefill_seconds: float | None = None
    draft_seconds: float | None = None
    verify_seconds: float | None = None
    overhead_seconds: float | None = None

    @property
    def total_seconds(self) -> float:
        """The four phases' seconds summed; ValueError when they were not measured."""
        phases = (self.prefill_seconds, self.draft_seconds, self.verify_seconds, self.overhead_seconds)
        return sum(checks.measured_seconds(phases))


class RoundRow(NamedTuple):
    """One verification round as the record holds it (`record.Rounds`)."""

    proposed: int
    accepted: int
    ended_in_draft: bool
    confidence_logits: Tensor | None  # [proposed] on the CPU, or None without a confidence head


@torch.inference_mode()
def speculative_generate(target: PreTrainedModel, drafter: Drafter, prompt_ids: Tensor, max_new_tokens: int,
                         gamma: int, temperature: float, generator: torch.Generator | None,
                         eos_token_id: int | Sequence[int] | None = None, *, timed: bool = False,
                         validate: bool = False) -> Rollout:
    """Generate up to `max_new_tokens` tokens after `prompt_ids` [T], losslessly: the output has
    the target's sampling distribution at `temperature` (its greedy output at 0). Stops after an
    end token (kept; `eos_token_id`: one id or several) or at max_new_tokens; rounds are counted
    as DeepSpec counts them (module doc). timed: measure the phase seconds (`PhaseTimer`, about
    six CUDA synchronisations a round); validate: `checks.validate_draft` on every draft (a host sync a
    round). Both off by default, so that a wall-clock race times the engine, not its instruments."""
    prompt = checks.speculation_prompt(target.config, drafter, prompt_ids, max_new_tokens, gamma, temperature)
    ends, layer_ids, device = end_ids(eos_token_id), drafter.target_layer_ids, model_device(target)
    timer = PhaseTimer(device, enabled=timed)
    drafter = timer.drafter(drafter)  # start, draft and accept: the "draft" phase
    prefill, score = timer.wrap(target_forward, "prefill"), timer.wrap(target_forward, "verify")

    # prefill: the target reads the prompt and samples the first token, the first anchor
    prompt, cache = prompt.to(device), new_cache(target)
    logits, hidden = prefill(target, prompt, cache, layer_ids, last_only=True)  # [1, V], [T, F] or None
    generated, rows = [int(sample_token(logits[-1], temperature, generator))], []
    finished = generated[0] in ends or max_new_tokens == 1
    if not finished:
        drafter.start(prompt, hidden)
    context = torch.cat([prompt, prompt.new_tensor(generated)])  # [T + 1]: the context ids, the anchor last

    # decode: draft a block, score anchor + drafts in one target forward, keep a prefix
    while not finished:
        draft = drafter.draft(context, gamma, temperature, generator)  # draft.gamma <= gamma tokens
        checks.validate_draft_length(draft.gamma, gamma)
        block = torch.cat([context[-1:], draft.tokens.to(device)])  # [1 + draft.gamma]: anchor, drafts
        logits, hidden = score(target, block, cache, layer_ids)  # [1 + draft.gamma, V]
        if validate:
            checks.validate_draft(draft, logits)
        n_accepted, next_token = verify_block(logits, draft, temperature, generator)
        row, new_tokens = settle_round(draft, n_accepted, next_token, ends)
        rows.append(row)
        generated += new_tokens
        finished = row.ended_in_draft or new_tokens[-1] in ends or len(generated) >= max_new_tokens
        if not finished:  # after the last round nothing reads the cache or the drafter again
            remove_tokens(cache, draft.gamma - n_accepted)  # keep the anchor and the accepted drafts
            drafter.accept(n_accepted, None if hidden is None else hidden[: n_accepted + 1])
            context = torch.cat([context, prompt.new_tensor(new_tokens)])
    tokens = torch.tensor(generated[:max_new_tokens], dtype=torch.long, device=prompt_ids.device)
    return Rollout(tokens, rounds_record(rows, gamma), **timer.phase_seconds())


def settle_round(draft: Draft, n_accepted: int, next_token: int, ends: tuple[int, ...]) -> tuple[RoundRow, list[int]]:
    """The round's row and the tokens it emits: the accepted drafts and the correction or bonus
    token; or, when an end token is among the accepted drafts, the drafts up to and including
    it, with no correction/bonus, and proposed = accepted = their number. A draft shorter than
    gamma (an early stop) counts its own length as proposed; an Eagle3 chain that stopped at an
    end id has that id last, so when all of it is accepted the round is the ended one above,
    and otherwise an ordinary round with a correction token (DeepSpec's accounting, see the
    module doc)."""
    accepted = draft.tokens[:n_accepted].tolist()
    logits = None if draft.confidence_logits is None else draft.confidence_logits.detach().float().cpu()
    for index, token in enumerate(accepted):
        if token in ends:
            return RoundRow(index + 1, index + 1, True, logits), accepted[:index + 1]
    return RoundRow(draft.gamma, n_accepted, False, logits), accepted + [next_token]


def rounds_record(rows: Sequence[RoundRow], width: int) -> Rounds:
    """The record of a rollout's rounds, `width` logit columns (the gamma the engine asked for,
    the widest a round can be); logits NaN where a round proposed fewer drafts or the drafter
    has no confidence head."""
    logits = np.full((len(rows), width), np.nan, dtype=np.float32)  # [N, width]
    for i, row in enumerate(rows):
        if row.confidence_logits is not None:
            logits[i, :row.proposed] = row.confidence_logits[:row.proposed].numpy()
    return Rounds.of([r.proposed for r in rows], [r.accepted for r in rows], logits,
                     [r.ended_in_draft for r in rows])


# ----------------------------------------------------------------------------------------
# Eq. 1, and the phase timing that measures its terms around the drafter and the target forward
# ----------------------------------------------------------------------------------------


def latency_per_token(t_draft: Any, t_verify: Any, tau: Any, *, t_overhead: Any = 0.0) -> float | np.ndarray:
    """Eq. 1, L = (T_draft + T_verify) / tau: the time per generated token of rounds that draft
    for T_draft and verify for T_verify (per round, any one unit) and produce tau tokens each
    (the correction or bonus token counted, so tau >= 1). `t_overhead`, the rest of a round
    (`PhaseTimer`'s overhead), joins the numerator when given. Numbers or numpy arrays
    (broadcast together); a float back when all are numbers. ValueError unless every time is
    finite and >= 0 and every tau finite and >= 1."""
    draft, verify, overhead = (checks.finite_at_least(t, name, 0.0) for t, name in
                               ((t_draft, "t_draft"), (t_verify, "t_verify"), (t_overhead, "t_overhead")))
    latency = (draft + verify + overhead) / checks.finite_at_least(tau, "tau", 1.0)
    return float(latency) if np.ndim(latency) == 0 else latency


class PhaseTimer:
    """The seconds of a timed rollout by phase: prefill (the target on the prompt), draft (every
    drafter call, Eq. 1's T_draft), verify (the target forwards of the rounds, T_verify) and
    overhead (the rest). It wraps the calls it times, synchronising CUDA before and after each
    so the split is real; a disabled timer wraps nothing and measures nothing (None)."""

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.device, self.enabled = device, enabled
        self.seconds = {"prefill": 0.0, "draft": 0.0, "verify": 0.0}
        self.started = self.now() if enabled else 0.0

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def wrap(self, function: Callable[..., Any], phase: str) -> Callable[..., Any]:
        """`function` with its seconds added to `phase` (itself when disabled)."""
        if not self.enabled:
            return function

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self.now()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += self.now() - start
        return timed

    def drafter(self, drafter: Drafter) -> Drafter:
        """`drafter` with its start, draft and accept timed as "draft" (itself when disabled)."""
        return TimedDrafter(drafter, self) if self.enabled else drafter

    def phase_seconds(self) -> dict[str, float | None]:
        """{"prefill_seconds": ..., "overhead_seconds": ...}, as `Rollout` takes them."""
        if not self.enabled:
            return dict.fromkeys(("prefill_seconds", "draft_seconds", "verify_seconds", "overhead_seconds"))
        overhead = self.now() - self.started - sum(self.seconds.values())
        return {f"{phase}_seconds": s for phase, s in {**self.seconds, "overhead": overhead}.items()}


class TimedDrafter:
    """A drafter whose calls a `PhaseTimer` times as the "draft" phase."""

    def __init__(self, drafter: Drafter, timer: PhaseTimer) -> None:
        self.vocab_size, self.target_layer_ids = drafter.vocab_size, drafter.target_layer_ids
        self.start = timer.wrap(drafter.start, "draft")
        self.draft = timer.wrap(drafter.draft, "draft")
        self.accept = timer.wrap(drafter.accept, "draft")
