"""Speculative decoding: the drafter interface, lossless verification and the rollout loop
(chapter 02). The loop writes a `record.Rounds`; tau and the acceptance curves
are read from it there.

One round: the drafter proposes gamma tokens after the anchor (the last token the target
produced), or fewer when it stops early (an Eagle3 chain at an end id); the target scores
anchor + drafts in ONE forward pass on top of its KV cache;
rejection sampling keeps a prefix of the drafts and adds one correction (at the first
rejection) or bonus (when all are accepted) token. Paper section 2 (Leviathan et al. 2023,
Chen et al. 2023).

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
from typing import Iterable, Protocol, Sequence, runtime_checkable

import numpy as np
import torch
import transformers
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from . import checks
from .sampling import generator_device, probs_from_logits, sample_from_probs, sample_token
from .kvcache import CACHE_KEYWORD, cache_kwarg, new_cache, remove_tokens
from .record import Rounds
from .runtime import model_device

# ----------------------------------------------------------------------------------------
# The drafter interface
# ----------------------------------------------------------------------------------------


@dataclass
class Draft:
    """One round's proposal (chapter 02).

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
    """What the rollout loop needs from any drafter (chapter 02).

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
        self, anchor_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None
    ) -> Draft:
        """Propose `gamma` >= 1 tokens, or fewer (at least 1) when the drafter stops early
        (e.g. `drafters.EagleDrafter` after drafting an end id). `anchor_ids` [L] is every token
        so far (prompt and generated), ending with the anchor."""
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
    """Lossless rejection sampling for a batch of blocks (chapter 02).

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
    """Temperature 0 (chapter 02): accept drafts while they equal the target's argmax; the
    next token is the target's argmax after the accepted prefix."""
    target_choice = target_logits.argmax(-1)
    gamma = draft_tokens.shape[0]
    matches = draft_tokens.to(target_choice.device) == target_choice[:gamma]
    n_accepted = int(matches.long().cumprod(0).sum())
    return n_accepted, int(target_choice[n_accepted])


def verify_block(
    target_logits: Tensor, draft: Draft, temperature: float, generator: torch.Generator | None
) -> tuple[int, int]:
    """Verify one block (chapter 02). `target_logits` [gamma+1, V]: row k is the target's
    prediction after the anchor and drafts x_1..x_k. Returns (n_accepted, next_token).
    Checks the draft first (`checks.draft`)."""
    checks.temperature(temperature)
    checks.draft(draft, target_logits)
    return _verify_unchecked(target_logits, draft, temperature, generator)


def _verify_unchecked(
    target_logits: Tensor, draft: Draft, temperature: float, generator: torch.Generator | None
) -> tuple[int, int]:
    """`verify_block` without `checks.draft`: the engine's path unless it runs with
    validate=True (the check costs a host sync and a pass over [gamma, V] every round)."""
    if temperature == 0:
        return greedy_verify(target_logits, draft.tokens)
    target_probs = probs_from_logits(target_logits, temperature)
    tokens = draft.tokens.to(target_probs.device)
    draft_probs = draft.probs.to(target_probs.device, torch.float32)
    n_accepted, next_token = rejection_sample(target_probs[None], tokens[None], draft_probs[None], generator)
    return int(n_accepted[0]), int(next_token[0])


# ----------------------------------------------------------------------------------------
# Rollouts
# ----------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """One speculative generation (chapter 02). `tokens` are the generated ids only (no
    prompt), on the device of the prompt passed in; `rounds`, one row per verification round.
    The first token comes from the prefill, every later one from a round: len(tokens) =
    min(max_new_tokens, 1 + sum of `rounds.emitted`), since the last round may overshoot and the output is cut at max_new_tokens.
    Seconds, measured only with `speculative_generate(..., timed=True)` and None otherwise:
    prefill (target on the prompt), draft (all drafter calls), verify (target forwards in
    rounds), overhead (verification sampling, cache crops, bookkeeping)."""

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
        if any(seconds is None for seconds in phases):
            raise ValueError("this rollout's phase seconds were not measured; run speculative_generate(..., "
                             "timed=True) to time them")
        return sum(phases)


class _Stopwatch:
    """Accumulates perf_counter seconds per phase, synchronising CUDA so the split is real
    (about six synchronisations a round: only with timed=True)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {"prefill": 0.0, "draft": 0.0, "verify": 0.0, "overhead": 0.0}
        self._phase, self._since = "overhead", time.perf_counter()

    def switch(self, phase: str) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.seconds[self._phase] += now - self._since
        self._phase, self._since = phase, now


class _NoStopwatch:
    """The stopwatch of an untimed rollout: no synchronisation, no seconds."""

    seconds: dict[str, float | None] = {"prefill": None, "draft": None, "verify": None, "overhead": None}

    def switch(self, phase: str) -> None:
        pass


def end_ids(eos_token_id: int | Sequence[int] | None) -> tuple[int, ...]:
    """The end-of-sequence ids as a tuple (chapter 02): None gives (), an int (id,), a
    sequence of ints its ids in order without repeats. Qwen3's generation config lists two,
    151645 (<|im_end|>) and 151643 (<|endoftext|>); generation stops at either."""
    if eos_token_id is None:
        return ()
    values = eos_token_id.tolist() if isinstance(eos_token_id, Tensor) else eos_token_id
    values = [values] if isinstance(values, (int, np.integer)) else values
    values = [] if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) else list(values)
    is_id = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
    if not values or not all(is_id(v) for v in values):
        raise ValueError(f"eos_token_id must be None, a token id >= 0 or a non-empty sequence of them, "
                         f"got {eos_token_id!r}")
    return tuple(dict.fromkeys(int(v) for v in values))


def select_target_hidden(hidden_states: Sequence[Tensor], layer_ids: Sequence[int]) -> Tensor:
    """Concatenate the chosen decoder layers' outputs, `hidden_states[i + 1]` for 0-based
    layer id i, on the feature axis: [..., positions, len(layer_ids) * H] (chapter 02)."""
    return torch.cat([hidden_states[i + 1] for i in layer_ids], dim=-1)


@torch.inference_mode()
def target_hidden(target: PreTrainedModel, input_ids: Tensor, layer_ids: Sequence[int] | None) -> Tensor | None:
    """The target's selected hidden states [L, len(layer_ids) * H] for one sequence
    `input_ids` [L] (no cache), or None for a drafter that reads no target layers (chapter 03).
    Only the last position's logits are computed (they are not used)."""
    if layer_ids is None:
        return None
    states = target(input_ids=input_ids[None], output_hidden_states=True, logits_to_keep=1).hidden_states
    return select_target_hidden(states, layer_ids)[0]


def _target_forward(
    target: PreTrainedModel, input_ids: Tensor, cache: DynamicCache, layer_ids: Sequence[int] | None,
    last_only: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Logits [L, V] (or [1, V] for the last position only, as a prefill needs) and selected
    hidden states [L, n_layers * H] (or None) for `input_ids` [L] appended to the cache."""
    output = target(
        input_ids=input_ids[None], **cache_kwarg(cache), use_cache=True,
        output_hidden_states=layer_ids is not None, logits_to_keep=1 if last_only else 0,
    )
    hidden = None if layer_ids is None else select_target_hidden(output.hidden_states, layer_ids)[0]
    return output.logits[0], hidden


def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    prompt_ids: Tensor,
    max_new_tokens: int,
    gamma: int,
    temperature: float,
    generator: torch.Generator | None,
    eos_token_id: int | Sequence[int] | None = None,
    *,
    timed: bool = False,
    validate: bool = False,
) -> Rollout:
    """Generate up to `max_new_tokens` tokens with speculative decoding (chapter 02).

    Prefill the prompt (logits of its last position only) and sample the first token (the
    first anchor); then per round the drafter proposes gamma tokens, the target scores
    anchor + drafts in one forward on its KV cache, verification accepts a prefix, and the
    cache is cropped back to the committed positions. Every round asks for gamma drafts, the
    last one included: it may overshoot, and the output is cut at max_new_tokens, as in
    DeepSpec's evaluation (deepspec/eval/base_evaluator.py, `generate_decoding_sample`; its
    loop, `while start < max_length`, also runs one more round, all of whose tokens are cut,
    when the output lands exactly on max_new_tokens: ours stops there, and counts one round
    fewer). Stops after an end token (kept; `eos_token_id`: one id or
    several) or at max_new_tokens; a round whose accepted drafts hold an end token is counted
    as DeepSpec counts it (`Rounds.ended_in_draft`). A drafter may return fewer than gamma
    drafts (at least one): an Eagle3 chain stops at an end id. The round verifies what was
    drafted and records that many as proposed (`Rounds.proposed`), as DeepSpec does
    (`verify_draft_tokens` scores `draft_token_count + 1` positions; `proposal_lengths`
    records the count, and its per-position rates count a round at position k only when it
    proposed more than k drafts). Lossless: the output has the
    target's sampling distribution at `temperature` (its greedy output at 0).

    timed: measure the phase seconds (`Rollout.*_seconds`; about six CUDA synchronisations a
        round). validate: check every draft with `checks.draft` before verifying it (a
        host sync a round). Both off by default, so that a wall-clock race times the engine,
        not its instruments.
    """
    checks.generation(max_new_tokens, temperature)
    if gamma < 1:
        raise ValueError(f"gamma must be >= 1, got {gamma}")
    prompt_ids = checks.prompt(prompt_ids)
    vocab_size = target.config.vocab_size
    if drafter.vocab_size != vocab_size:
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} differs from the target's {vocab_size}")
    layer_ids = drafter.target_layer_ids
    checks.layer_ids(layer_ids, target.config.num_hidden_layers)
    ends = end_ids(eos_token_id)
    device = model_device(target)
    watch = _Stopwatch(device) if timed else _NoStopwatch()
    with torch.inference_mode():
        tokens, rounds = _speculative_loop(
            target, drafter, prompt_ids.to(device), max_new_tokens, gamma, temperature, generator, ends,
            layer_ids, watch, validate,
        )
    return Rollout(tokens.to(prompt_ids.device), rounds, **{f"{k}_seconds": v for k, v in watch.seconds.items()})


def _speculative_loop(
    target: PreTrainedModel,
    drafter: Drafter,
    prompt: Tensor,
    max_new_tokens: int,
    gamma: int,
    temperature: float,
    generator: torch.Generator | None,
    ends: tuple[int, ...],
    layer_ids: Sequence[int] | None,
    watch: _Stopwatch | _NoStopwatch,
    validate: bool,
) -> tuple[Tensor, Rounds]:
    cache = new_cache(target)
    watch.switch("prefill")
    logits, hidden = _target_forward(target, prompt, cache, layer_ids, last_only=True)
    generated = [int(sample_token(logits[-1], temperature, generator))]
    rows: list[tuple[int, int, bool, Tensor | None]] = []  # proposed, accepted, ended_in_draft, logits
    finished = generated[0] in ends or max_new_tokens == 1
    if not finished:
        watch.switch("draft")
        drafter.start(prompt, hidden)
    watch.switch("overhead")
    sequence = torch.cat([prompt, prompt.new_tensor(generated)])
    while not finished:
        watch.switch("draft")
        draft = drafter.draft(sequence, gamma, temperature, generator)
        if not 1 <= draft.gamma <= gamma:
            raise ValueError(f"drafter returned {draft.gamma} draft tokens; expected between 1 and the {gamma} "
                             "requested (fewer when it stops early, e.g. at an end id)")
        watch.switch("verify")
        block = torch.cat([sequence[-1:], draft.tokens.to(prompt.device)])
        logits, hidden = _target_forward(target, block, cache, layer_ids)
        watch.switch("overhead")
        verify = verify_block if validate else _verify_unchecked
        n_accepted, next_token = verify(logits, draft, temperature, generator)
        row, new_tokens = _settle_round(draft, n_accepted, next_token, ends)
        rows.append(row)
        generated += new_tokens
        finished = row[2] or new_tokens[-1] in ends or len(generated) >= max_new_tokens
        if not finished:  # after the last round nothing reads the cache or the drafter again
            # The block held the anchor and draft.gamma drafts (fewer than gamma after an early
            # stop); keep the anchor and the accepted ones.
            remove_tokens(cache, draft.gamma - n_accepted)
            watch.switch("draft")
            drafter.accept(n_accepted, None if hidden is None else hidden[: n_accepted + 1])
            watch.switch("overhead")
            sequence = torch.cat([sequence, prompt.new_tensor(new_tokens)])
    watch.switch("overhead")
    return torch.tensor(generated[:max_new_tokens], dtype=torch.long), _rounds(rows, gamma)


def _rounds(rows: list[tuple[int, int, bool, Tensor | None]], gamma: int) -> Rounds:
    """The record of a rollout's rounds; logits NaN where a round proposed fewer drafts or the
    drafter has no confidence head."""
    logits = np.full((len(rows), gamma), np.nan, dtype=np.float32)
    for i, (proposed, _, _, z) in enumerate(rows):
        if z is not None:
            logits[i, :proposed] = z[:proposed].numpy()
    return Rounds.of([r[0] for r in rows], [r[1] for r in rows], logits, [r[2] for r in rows])


def _settle_round(draft: Draft, n_accepted: int, next_token: int,
                  ends: tuple[int, ...]) -> tuple[tuple[int, int, bool, Tensor | None], list[int]]:
    """The round's row (proposed, accepted, ended_in_draft, confidence logits) and the tokens it
    emits: the accepted drafts and the correction or bonus token; or, when an end token is
    among the accepted drafts, the drafts up to and including it, with no correction/bonus,
    and proposed = accepted = their number. A draft shorter than gamma (an early stop) counts
    its own length as proposed: DeepSpec's `proposal_lengths` hold `draft_token_count`, and an
    Eagle3 chain that stopped at an end id has that id last, so when all of it is accepted the
    round is the ended one above (proposed = accepted = its length), and otherwise an ordinary
    round with a correction token. That is DeepSpec's accounting:
    deepspec/eval/base_evaluator.py, `verify_draft_tokens` (the `terminated_by_stop_token`
    branch sets accepted_draft_tokens and effective_proposal_length to eos_pos + 1) and
    `generate_decoding_sample` (such a round adds accepted_draft_tokens to acceptance_lengths,
    not accepted_draft_tokens + 1)."""
    accepted = draft.tokens[:n_accepted].tolist()
    logits = None if draft.confidence_logits is None else draft.confidence_logits.detach().float().cpu()
    for index, token in enumerate(accepted):
        if token in ends:
            return (index + 1, index + 1, True, logits), accepted[:index + 1]
    return (draft.gamma, n_accepted, False, logits), accepted + [next_token]


def _tv_distance(logits: Tensor, reference: Tensor) -> Tensor:
    """Total variation between the softmaxes of two [N, V] logit rows, per row (float32)."""
    return 0.5 * (torch.softmax(logits.float(), -1) - torch.softmax(reference.float(), -1)).abs().sum(-1)


# Largest total variation allowed between cached and uncached next-token distributions: a
# cache that works differs by rounding only; one that is ignored or emptied changes the
# context each position sees, which moves a trained model's distributions by far more.
KV_CHECK_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 0.05, torch.bfloat16: 0.1}


@torch.inference_mode()
def check_kv_cache(target: PreTrainedModel, prompt_ids: Tensor) -> float:
    """The KV cache self-check (chapter 07 runs it before any GPU measurement): score
    `prompt_ids` ([T] or [1, T], T >= 3) as the engine does, a prefill of all but the last
    (up to) three tokens followed by single-token steps, then a rollback of two positions
    (`kvcache.remove_tokens`, after a no-op removal of 0) and a two-token block, and compare
    every next-token distribution with one uncached forward of the whole prompt. Returns the
    largest total variation between them; RuntimeError naming the transformers version when it
    exceeds KV_CHECK_TOLERANCE for the target's dtype, or when the cache does not hold the
    prompt afterwards (a forward that ignored the cache keyword)."""
    ids = checks.prompt(prompt_ids).to(model_device(target))
    length = ids.shape[0]
    if length < 3:
        raise ValueError(f"check_kv_cache needs a prompt of at least 3 tokens, got {length}")
    dtype = next(target.parameters()).dtype
    reference = target(input_ids=ids[None]).logits[0]
    cache, prefix = new_cache(target), max(1, length - 3)
    rows = [target(input_ids=ids[None, :prefix], **cache_kwarg(cache), use_cache=True, logits_to_keep=1).logits[0]]
    for position in range(prefix, length):
        rows.append(target(input_ids=ids[None, position:position + 1], **cache_kwarg(cache), use_cache=True).logits[0])
    remove_tokens(cache, 0)
    remove_tokens(cache, 2)
    rows.append(target(input_ids=ids[None, length - 2:], **cache_kwarg(cache), use_cache=True).logits[0])
    cached = torch.cat(rows)
    expected = torch.cat([reference[prefix - 1:], reference[length - 2:]])
    tv = _tv_distance(cached, expected)
    worst, tolerance = float(tv.max()), KV_CHECK_TOLERANCE.get(dtype, 0.1)
    where = (f"transformers {transformers.__version__} (torch {torch.__version__}, {str(dtype).replace('torch.', '')}, "
             f"cache passed as `{CACHE_KEYWORD}=`)")
    held = cache.get_seq_length()
    if held != length:
        raise RuntimeError(f"KV cache self-check failed on {where}: after a {length}-token prompt the cache holds "
                           f"{held} positions; the forward did not use the cache it was given. dspark_lite "
                           "supports transformers 5.10.2 to 5.24.0 (see dspark_lite/kvcache.py)")
    if not worst <= tolerance:
        raise RuntimeError(f"KV cache self-check failed on {where}: cached and uncached next-token distributions "
                           f"differ by total variation {worst:.3g} (allowed {tolerance:g}); every tau measured "
                           "with this cache would be wrong. dspark_lite supports transformers 5.10.2 to 5.24.0 "
                           "(see dspark_lite/kvcache.py)")
    return worst


def autoregressive_generate(
    target: PreTrainedModel,
    prompt_ids: Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    eos_token_id: int | Sequence[int] | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Target-only sampling, the baseline (chapter 02). `prompt_ids` [T] returns the
    generated ids [<= max_new_tokens], truncated after an end token (`eos_token_id`: one id or
    several); a batch [B, T] (same length, no padding) returns [B, n] with the first end id
    repeated after a row's end. Greedy at temperature 0. Each forward computes the logits of
    the last position only. With use_cache=False the whole sequence is recomputed each step."""
    checks.generation(max_new_tokens, temperature)
    ends = end_ids(eos_token_id)
    single = prompt_ids.dim() == 1
    batch = checks.prompt(prompt_ids)[None] if single else prompt_ids.long()
    if batch.dim() != 2 or batch.shape[1] == 0:
        raise ValueError(f"prompt_ids must have shape [T] or [B, T] with T >= 1, got {tuple(prompt_ids.shape)}")
    with torch.inference_mode():
        generated = _autoregressive_loop(
            target, batch.to(model_device(target)), max_new_tokens, temperature, generator, ends, use_cache
        ).to(prompt_ids.device)
    if single:
        tokens = generated[0].tolist()
        cut = next((i + 1 for i, token in enumerate(tokens) if token in ends), len(tokens))
        return torch.tensor(tokens[:cut], dtype=torch.long, device=prompt_ids.device)
    return generated


def _autoregressive_loop(
    target: PreTrainedModel,
    batch: Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    ends: tuple[int, ...],
    use_cache: bool,
) -> Tensor:
    cache = new_cache(target) if use_cache else None
    end_tensor = torch.tensor(ends, dtype=torch.long, device=batch.device)
    sequence, step_input = batch, batch
    finished = torch.zeros(batch.shape[0], dtype=torch.bool, device=batch.device)
    for _ in range(max_new_tokens):
        logits = target(input_ids=step_input, **cache_kwarg(cache), use_cache=use_cache, logits_to_keep=1).logits[:, -1]
        token = sample_token(logits, temperature, generator)
        if ends:
            token = torch.where(finished, torch.full_like(token, ends[0]), token)
            finished |= torch.isin(token, end_tensor)
        sequence = torch.cat([sequence, token[:, None]], dim=1)
        step_input = token[:, None] if use_cache else sequence
        if bool(finished.all()):
            break
    return sequence[:, batch.shape[1]:]


# ----------------------------------------------------------------------------------------
# A classic drafter: a small causal LM with its own KV cache
# ----------------------------------------------------------------------------------------


class ModelDrafter:
    """Wrap a small causal LM (e.g. a tiny Qwen3ForCausalLM) with the target's vocabulary
    as a Drafter that samples gamma tokens one by one (chapter 02). Its KV cache holds the
    tokens it has read; `accept` crops it back to the committed prefix."""

    target_layer_ids: tuple[int, ...] | None = None

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model.eval()
        self.vocab_size: int = model.config.vocab_size
        self._cache: DynamicCache | None = None
        self._context_length = 0

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None = None) -> None:
        """Prefill the drafter's own cache with the prompt."""
        self._cache = new_cache(self.model)
        self.model(input_ids=prompt_ids[None].to(model_device(self.model)), **cache_kwarg(self._cache), use_cache=True,
                   logits_to_keep=1)
        self._context_length = prompt_ids.shape[0]

    @torch.inference_mode()
    def draft(self, anchor_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Read the tokens not yet cached (at least the anchor), then sample gamma tokens."""
        if self._cache is None:
            raise ValueError("ModelDrafter.draft called before start(); call start(prompt_ids, None) first")
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        cached = self._cache.get_seq_length()
        if cached >= anchor_ids.shape[0]:
            raise ValueError(
                f"drafter cache holds {cached} tokens but anchor_ids has {anchor_ids.shape[0]}; "
                "expected new tokens (did the loop skip accept()?)"
            )
        step_input = anchor_ids[cached:].to(model_device(self.model))
        tokens, probs = [], []
        for _ in range(gamma):
            logits = self.model(input_ids=step_input[None], **cache_kwarg(self._cache), use_cache=True,
                                logits_to_keep=1).logits[0, -1]
            probs.append(probs_from_logits(logits, temperature))
            tokens.append(sample_from_probs(probs[-1], generator))
            step_input = tokens[-1][None]
        self._context_length = anchor_ids.shape[0]
        return Draft(torch.stack(tokens), torch.stack(probs))

    def accept(self, n_accepted: int, new_target_hidden: Tensor | None = None) -> None:
        """Crop the cache to the anchor plus the accepted drafts."""
        keep = self._context_length + n_accepted
        remove_tokens(self._cache, max(0, self._cache.get_seq_length() - keep))

