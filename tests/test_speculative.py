"""Tests for dspark_lite.speculative (chapter 02).

Statistical tests use fixed seeds, so they are deterministic; each is designed so that a
correct implementation would fail it with probability below SIGNIFICANCE = 1e-3 for a
random seed (chi-square p-values, and a TV bound with a McDiarmid margin).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from engine_check import noisy_copy
from reference import SIGNIFICANCE, chi_square_p_value
from transformers import Qwen3Config, Qwen3ForCausalLM

from dspark_lite import checks
from dspark_lite.sampling import gumbel_perturbed, probs_from_logits, sample_from_probs, total_variation
from dspark_lite.record import Rounds, conditional_acceptance, expected_tau_from_conditional, prefix_survival, tau
from dspark_lite.baselines import ModelDrafter, autoregressive_generate, sample_autoregressive
from dspark_lite.speculative import (Draft, Drafter, latency_per_token, rejection_sample, speculative_generate,
                                     verify_block)



pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def tiny_qwen3(seed: int, vocab_size: int = 16, num_layers: int = 2, logit_scale: float = 1.0) -> Qwen3ForCausalLM:
    """A random tiny Qwen3; `logit_scale` multiplies the LM head so the output
    distributions are neither uniform nor one-hot."""
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=num_layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    return model


def random_distributions(generator: torch.Generator, rows: int, vocab: int, zeros: int = 0) -> torch.Tensor:
    """Random categorical rows; `zeros` entries per row forced to probability 0."""
    logits = 1.5 * torch.randn(rows, vocab, generator=generator)
    for row in range(rows):
        logits[row, torch.randperm(vocab, generator=generator)[:zeros]] = -math.inf
    return torch.softmax(logits, dim=-1)


def counts_of(codes: torch.Tensor, cells: int) -> np.ndarray:
    return torch.bincount(codes, minlength=cells).numpy()


# ----------------------------------------------------------------------------------------
# Verification is lossless (vectorised over a batch of independent blocks)
# ----------------------------------------------------------------------------------------

VOCAB, GAMMA, SAMPLES = 8, 3, 200_000


@pytest.mark.parametrize("case", range(5))
def test_first_emitted_token_follows_target(case):
    generator = torch.Generator().manual_seed(100 + case)
    zeros_target, zeros_draft = [(0, 0), (2, 0), (0, 3), (2, 2), (0, 0)][case]
    target = random_distributions(generator, GAMMA + 1, VOCAB, zeros_target)
    draft = target[:GAMMA].clone() if case == 4 else random_distributions(generator, GAMMA, VOCAB, zeros_draft)
    draft_probs = draft.expand(SAMPLES, GAMMA, VOCAB)
    tokens = sample_from_probs(draft_probs, generator)
    n_accepted, next_token = rejection_sample(target.expand(SAMPLES, -1, -1), tokens, draft_probs, generator)
    first = torch.where(n_accepted >= 1, tokens[:, 0], next_token)
    assert chi_square_p_value(counts_of(first, VOCAB), target[0].numpy()) > SIGNIFICANCE
    if case == 4:
        assert bool((n_accepted == GAMMA).all()), "identical draft and target must accept everything"


def simulate_markov_speculation(target_table, draft_table, gamma, samples, length, generator):
    """Speculative decoding of a first-order Markov target with a Markov drafter, fully
    vectorised: returns the first `length` emitted tokens of each of `samples` runs."""
    vocab = target_table.shape[0]
    out = torch.full((samples, length), -1, dtype=torch.long)
    count = torch.zeros(samples, dtype=torch.long)
    anchor = torch.zeros(samples, dtype=torch.long)
    while bool((count < length).any()):
        previous, drafts, draft_probs = anchor, [], []
        for _ in range(gamma):
            draft_probs.append(draft_table[previous])
            previous = sample_from_probs(draft_probs[-1], generator)
            drafts.append(previous)
        drafts = torch.stack(drafts, dim=1)
        target_probs = target_table[torch.cat([anchor[:, None], drafts], dim=1)]
        n_accepted, next_token = rejection_sample(target_probs, drafts, torch.stack(draft_probs, 1), generator)
        emitted = torch.cat([drafts, next_token[:, None]], dim=1)
        emitted[torch.arange(samples), n_accepted] = next_token
        for j in range(gamma + 1):
            position = count + j
            write = (j <= n_accepted) & (position < length)
            out[write, position[write]] = emitted[write, j]
        count += n_accepted + 1
        anchor = next_token
    assert vocab > 0 and bool((out >= 0).all())
    return out


@pytest.mark.parametrize("case, gamma", [(0, 3), (1, 2), (2, 1)])
def test_first_three_tokens_follow_target_markov_chain(case, gamma):
    """The joint of the first three emitted tokens (so the second given the first, and the
    third given both) matches the target chain, across round boundaries; gamma <= 2 puts
    bonus tokens among them."""
    generator = torch.Generator().manual_seed(200 + case)
    target_table = random_distributions(generator, VOCAB, VOCAB, zeros=[0, 2, 0][case])
    draft_table = random_distributions(generator, VOCAB, VOCAB, zeros=[0, 0, 3][case])
    tokens = simulate_markov_speculation(target_table, draft_table, gamma, SAMPLES, 3, generator)
    codes = tokens[:, 0] * VOCAB**2 + tokens[:, 1] * VOCAB + tokens[:, 2]
    first = target_table[0]
    exact = first[:, None, None] * target_table[:, :, None] * target_table[None, :, :]
    assert chi_square_p_value(counts_of(codes, VOCAB**3), exact.numpy()) > SIGNIFICANCE


def test_greedy_verify_accepts_matching_prefix():
    logits = torch.full((4, 5), -1.0)
    logits[0, 2] = logits[1, 3] = logits[2, 1] = logits[3, 4] = 1.0  # target argmax: 2, 3, 1, 4
    probs = torch.eye(5)
    for tokens, expected in [([2, 3, 1], (3, 4)), ([2, 3, 0], (2, 1)), ([0, 3, 1], (0, 2))]:
        draft = Draft(torch.tensor(tokens), probs[tokens])
        assert verify_block(logits, draft, 0.0, None) == expected


def test_probs_from_logits_is_greedy_at_zero_temperature():
    logits = torch.tensor([[0.5, 2.0, -1.0]])
    assert torch.equal(probs_from_logits(logits, 0.0), torch.tensor([[0.0, 1.0, 0.0]]))
    assert torch.allclose(probs_from_logits(logits, 2.0), torch.softmax(logits / 2.0, -1))


def test_total_variation_is_half_the_l1_distance_and_one_minus_the_acceptance():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)  # [2, V]
    q = torch.tensor([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]], dtype=torch.float64)
    tv = total_variation(p, q)
    assert tv.dtype == torch.float32 and tv.tolist() == [0.5, 0.0]
    torch.testing.assert_close(1 - tv, torch.minimum(p, q).sum(-1).float())  # the rejection rule's acceptance
    assert total_variation(p[:, None].expand(2, 4, 3), q[:, None].expand(2, 4, 3)).shape == (2, 4)


# ----------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------


def good_block(gamma: int = 2, vocab: int = 4):
    probs = torch.full((gamma, vocab), 1.0 / vocab)
    return torch.zeros(gamma + 1, vocab), Draft(torch.zeros(gamma, dtype=torch.long), probs)


@pytest.mark.parametrize(
    "breakage, message",
    [
        (lambda logits, draft: (logits, Draft(draft.tokens, draft.probs[:1])), "shape"),
        (lambda logits, draft: (logits, Draft(draft.tokens, torch.full((2, 5), 0.2))), "vocabulary size"),
        (lambda logits, draft: (logits, Draft(draft.tokens, draft.probs.index_fill(1, torch.tensor([1]), math.nan))), "non-finite"),
        (lambda logits, draft: (logits, Draft(draft.tokens, torch.tensor([[0.5, 0.7, -0.2, 0.0]] * 2))), "negative"),
        (lambda logits, draft: (logits, Draft(draft.tokens, torch.tensor([[0.0, 0.5, 0.5, 0.0]] * 2))), "zero draft probability"),
        (lambda logits, draft: (logits, Draft(draft.tokens, draft.probs * 2)), "sum to 1"),
        (lambda logits, draft: (logits[:2], draft), "rows; expected gamma"),
        (lambda logits, draft: (logits, Draft(torch.tensor([0, 9]), draft.probs)), "ids in"),
        (lambda logits, draft: (logits, Draft(draft.tokens.int(), draft.probs)), "int64 ids, got dtype"),
    ],
)
def test_the_draft_check_rejects_bad_drafts(breakage, message):
    """`checks.validate_draft`, which the engine runs before `verify_block` with validate=True (the
    engine test below runs it end to end); `verify_block` itself trusts its input."""
    logits, draft = breakage(*good_block())
    with pytest.raises(ValueError, match=message):
        checks.validate_draft(draft, logits)


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(0, logit_scale=20.0)


@pytest.fixture(scope="module")
def close_drafter(target):
    return noisy_copy(target, seed=1, noise=0.3)


def test_speculative_generate_rejects_bad_arguments(target, close_drafter):
    prompt = torch.tensor([1, 2, 3])
    drafter = ModelDrafter(close_drafter)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative_generate(target, drafter, prompt, 0, 3, 0.0, None)
    with pytest.raises(ValueError, match="empty"):
        speculative_generate(target, drafter, torch.tensor([], dtype=torch.long), 5, 3, 0.0, None)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, drafter, prompt, 5, 0, 0.0, None)
    with pytest.raises(ValueError, match="temperature"):
        speculative_generate(target, drafter, prompt, 5, 3, -1.0, None)
    with pytest.raises(ValueError, match="vocab_size"):
        speculative_generate(target, ModelDrafter(tiny_qwen3(5, vocab_size=20)), prompt, 5, 3, 0.0, None)
    with pytest.raises(ValueError, match="max_new_tokens"):
        autoregressive_generate(target, prompt, 0, 0.0, None)
    with pytest.raises(ValueError, match="empty"):
        autoregressive_generate(target, torch.tensor([], dtype=torch.long), 3, 0.0, None)


# ----------------------------------------------------------------------------------------
# Rollouts on tiny Qwen3 models
# ----------------------------------------------------------------------------------------

PROMPTS = [[1, 2, 3, 4, 5], [7], [3, 14, 15, 9, 2, 6, 5, 3]]
TEMPERATURE = 0.8


def test_model_drafter_satisfies_the_protocol(close_drafter):
    assert isinstance(ModelDrafter(close_drafter), Drafter)


def test_cached_equals_uncached_greedy(target):
    for prompt in PROMPTS:
        prompt = torch.tensor(prompt)
        cached = autoregressive_generate(target, prompt, 30, 0.0, None, use_cache=True)
        uncached = autoregressive_generate(target, prompt, 30, 0.0, None, use_cache=False)
        assert cached.shape == (30,) and torch.equal(cached, uncached)


@pytest.mark.parametrize("use_cache", [True, False])
def test_left_padded_rows_sample_what_each_prompt_samples_alone(target, use_cache):
    """The one batched loop serves padded prompts (training replies) too: with the attention
    mask and positions counted from each row's first token, a left-padded row continues as its
    prompt does alone; after an end id the row repeats ends[0]."""
    width = max(len(p) for p in PROMPTS)
    batch = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    alone = [autoregressive_generate(target, torch.tensor(p), 12, 0.0, None) for p in PROMPTS]
    end = int(alone[0][3])
    with torch.inference_mode():
        rows = sample_autoregressive(target, batch, 12, 0.0, None, (), use_cache, attention_mask=mask)
        ended = sample_autoregressive(target, batch, 12, 0.0, None, (end,), use_cache, attention_mask=mask)
    for row, expected, stopped in zip(rows, alone, ended):
        assert torch.equal(row, expected)
        cut = next((i + 1 for i, t in enumerate(expected.tolist()) if t == end), len(expected))
        assert torch.equal(stopped[:cut], expected[:cut]) and bool((stopped[cut:] == end).all())


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculation_reproduces_target(target, close_drafter, gamma):
    far_drafter = tiny_qwen3(2, num_layers=1, logit_scale=20.0)
    generator = torch.Generator().manual_seed(0)
    accepted_any = False
    for prompt, max_new_tokens in zip(PROMPTS, [20, 33, 40]):
        prompt = torch.tensor(prompt)
        expected = autoregressive_generate(target, prompt, max_new_tokens, 0.0, None)
        for drafter_model in (close_drafter, far_drafter):
            rollout = speculative_generate(target, ModelDrafter(drafter_model), prompt, max_new_tokens, gamma, 0.0, generator)
            assert torch.equal(rollout.tokens, expected)
            # Every round proposes gamma; the last may overshoot max_new_tokens (cut), no round is wasted.
            assert 1 + int((rollout.rounds[:-1].accepted + 1).sum()) < max_new_tokens == len(rollout.tokens)
            assert 1 + int((rollout.rounds.accepted + 1).sum()) >= max_new_tokens
            assert bool((rollout.rounds.proposed == gamma).all())
            accepted_any |= bool((rollout.rounds.accepted > 0).any())
    assert accepted_any, "the close drafter should get some drafts accepted"


class EarlyStopDrafter(ModelDrafter):
    """A ModelDrafter whose chain stops after the first drafted token in `stop_ids` (kept), as
    DeepSpec's Eagle3 chain stops at an end id: its drafts may be shorter than gamma. The cut
    is made after sampling all gamma tokens; the tokens kept have the same law as a chain that
    stopped there (later samples never change earlier ones). `lengths` records every draft's."""

    def __init__(self, model, stop_ids) -> None:
        super().__init__(model)
        self.stop_ids, self.lengths = set(stop_ids), []

    def draft(self, context_ids, gamma, temperature, generator):
        draft = super().draft(context_ids, gamma, temperature, generator)
        tokens = draft.tokens.tolist()
        cut = next((i + 1 for i, token in enumerate(tokens) if token in self.stop_ids), len(tokens))
        self.lengths.append(cut)
        return Draft(draft.tokens[:cut], draft.probs[:cut])


@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_speculation_reproduces_target_with_early_stopping_drafts(target, close_drafter, gamma):
    """Issue 31, item 6: drafts shorter than gamma (the chain stopped at an id that does not end
    generation) are verified as drafted, the target's cache is cropped by the draft's own length,
    and the output is still the target's greedy output; each round records its draft's length."""
    accepted_short = False
    for prompt, max_new_tokens in zip(PROMPTS, [20, 33, 40]):
        prompt = torch.tensor(prompt)
        expected = autoregressive_generate(target, prompt, max_new_tokens, 0.0, None)
        drafter = EarlyStopDrafter(close_drafter, stop_ids=range(0, 16, 3))
        rollout = speculative_generate(target, drafter, prompt, max_new_tokens, gamma, 0.0, None)
        assert torch.equal(rollout.tokens, expected)
        assert rollout.rounds.proposed.tolist() == drafter.lengths
        short = rollout.rounds.proposed < gamma
        accepted_short |= bool((rollout.rounds.accepted[short] > 0).any())
    assert accepted_short, "the test needs short drafts with accepted tokens (the cache crop depends on them)"


@pytest.mark.parametrize("temperature", [0.0, TEMPERATURE])
def test_target_as_its_own_drafter_accepts_everything(target, temperature):
    """Drafting with the target itself: every proposed token survives, so tau = gamma + 1
    on every round; this checks the drafter's cache bookkeeping. Every round proposes gamma,
    the last one too (DeepSpec's protocol): 1 + 4 * 5 = 21 tokens after four rounds, and the
    fifth round's 5 tokens overshoot 25, cut to 25."""
    rollout = speculative_generate(target, ModelDrafter(target), torch.tensor(PROMPTS[0]), 25, 4, temperature,
                                   torch.Generator().manual_seed(1))
    assert len(rollout.tokens) == 25
    assert bool((rollout.rounds.accepted == rollout.rounds.proposed).all())
    assert rollout.rounds.proposed.tolist() == [4, 4, 4, 4, 4]
    assert tau(rollout.rounds) == 5.0


class HiddenRecordingDrafter(ModelDrafter):
    """A ModelDrafter that asks for target layers and keeps what it is given."""

    target_layer_ids = (0, 1)

    def start(self, prompt_ids, target_hidden=None):
        self.received = [target_hidden]
        super().start(prompt_ids, target_hidden)

    def accept(self, n_accepted, new_target_hidden=None):
        assert new_target_hidden.shape[0] == n_accepted + 1
        self.received.append(new_target_hidden)
        super().accept(n_accepted, new_target_hidden)


@pytest.mark.parametrize("temperature", [0.0, TEMPERATURE])
def test_drafter_receives_target_hidden_states_of_committed_positions(target, close_drafter, temperature):
    """start + accept hand the drafter exactly the hidden states a full forward computes for
    every position committed before its next draft (the prompt, then each round's anchor and
    accepted drafts; the last round is not handed over, as no draft follows it), layer id i
    meaning hidden_states[i + 1]."""
    prompt, drafter = torch.tensor(PROMPTS[0]), HiddenRecordingDrafter(close_drafter)
    rollout = speculative_generate(target, drafter, prompt, 20, 3, temperature, torch.Generator().manual_seed(2))
    received = torch.cat(drafter.received)
    sequence = torch.cat([prompt, rollout.tokens])
    with torch.inference_mode():
        hidden_states = target(sequence[None], output_hidden_states=True).hidden_states
    expected = torch.cat([hidden_states[1][0], hidden_states[2][0]], dim=-1)
    committed = len(prompt) + int((rollout.rounds[:-1].accepted + 1).sum())
    assert len(rollout.rounds) >= 3 and len(drafter.received) == len(rollout.rounds)
    assert received.shape == (committed, 2 * target.config.hidden_size)
    torch.testing.assert_close(received, expected[:committed], atol=1e-4, rtol=1e-4)


def test_eos_stops_generation(target, close_drafter):
    prompt = torch.tensor(PROMPTS[0])
    full = autoregressive_generate(target, prompt, 30, 0.0, None)
    eos = int(full[7])
    cut = full[: full.tolist().index(eos) + 1]
    assert torch.equal(autoregressive_generate(target, prompt, 30, 0.0, None, eos_token_id=eos), cut)
    rollout = speculative_generate(target, ModelDrafter(close_drafter), prompt, 30, 4, 0.0, None, eos_token_id=eos)
    assert torch.equal(rollout.tokens, cut)


# ----------------------------------------------------------------------------------------
# The protocol of DeepSpec's evaluation (issue 19): gamma drafts every round, several end
# ids, the end round's accounting, opt-in timing and validation, crops on every transformers
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_new_tokens", [1, 2, 6, 7, 9, 30])
def test_every_round_proposes_gamma_and_the_output_is_cut(target, close_drafter, max_new_tokens):
    """No short or zero-draft rounds near max_new_tokens: the last round proposes gamma too
    and may overshoot; the output is cut, and no round runs once max_new_tokens are there."""
    prompt, gamma = torch.tensor(PROMPTS[2]), 4
    rollout = speculative_generate(target, ModelDrafter(close_drafter), prompt, max_new_tokens, gamma, 0.0, None)
    assert torch.equal(rollout.tokens, autoregressive_generate(target, prompt, max_new_tokens, 0.0, None))
    assert rollout.rounds.proposed.tolist() == [gamma] * len(rollout.rounds)
    assert len(rollout.rounds) == 0 if max_new_tokens == 1 else len(rollout.rounds) >= 1
    assert 1 + int((rollout.rounds[:-1].accepted + 1).sum()) < max_new_tokens or not rollout.rounds


def first_occurrences(tokens: list[int]) -> dict[int, int]:
    """Index of each token's first occurrence."""
    first = {}
    for index, token in enumerate(tokens):
        first.setdefault(token, index)
    return first


def test_generation_stops_at_any_of_several_end_ids(target, close_drafter):
    """eos_token_id may list several ids (Qwen3: 151645 and 151643): generation stops after the
    first of them, in both decoders; one id still works."""
    prompt = torch.tensor(PROMPTS[0])
    full = autoregressive_generate(target, prompt, 30, 0.0, None).tolist()
    (early_index, early_id), (late_index, late_id) = sorted((i, t) for t, i in first_occurrences(full).items())[-2:]
    assert 3 <= early_index < late_index
    for ends, stop in [((late_id, early_id), early_index), ([late_id], late_index), (late_id, late_index)]:
        expected = torch.tensor(full[: stop + 1])
        assert torch.equal(autoregressive_generate(target, prompt, 30, 0.0, None, eos_token_id=ends), expected)
        rollout = speculative_generate(target, ModelDrafter(close_drafter), prompt, 30, 4, 0.0, None, eos_token_id=ends)
        assert torch.equal(rollout.tokens, expected), ends
    batch = autoregressive_generate(target, prompt.expand(2, -1), 30, 0.0, None, eos_token_id=(late_id, early_id))
    assert batch[0, early_index] == early_id and bool((batch[0, early_index + 1:] == late_id).all())


@pytest.mark.parametrize("slot", [0, 2, 3, 4])
def test_a_round_ended_by_an_accepted_end_token_counts_as_deepspec_counts_it(target, slot):
    """DeepSpec (deepspec/eval/base_evaluator.py, verify_draft_tokens): an end token among the
    accepted drafts ends the round there, proposed = accepted = drafts up to and including it,
    and the round adds no bonus to tau. An end token sampled as the bonus counts as usual.
    The target drafting for itself at temperature 0 accepts everything, so round r covers the
    generated indices 5r-4 .. 5r (four drafts, then the bonus at slot 4)."""
    prompt, gamma = torch.tensor(PROMPTS[0]), 4
    full = autoregressive_generate(target, prompt, 40, 0.0, None).tolist()
    candidates = [i for t, i in first_occurrences(full).items() if i >= 6 and (i - 1) % 5 == slot]
    assert candidates, "the greedy continuation needs a token first seen at this slot"
    index = candidates[0]
    rollout = speculative_generate(target, ModelDrafter(target), prompt, 40, gamma, 0.0, None,
                                   eos_token_id=full[index])
    assert rollout.tokens.tolist() == full[: index + 1]
    full_rounds, ended = (index - 1) // 5, slot < gamma
    counts = list(zip(rollout.rounds.proposed.tolist(), rollout.rounds.accepted.tolist()))
    assert counts == [(gamma, gamma)] * full_rounds + [(slot + 1, slot + 1) if ended else (gamma, gamma)]
    acceptance_lengths = [gamma + 1] * full_rounds + [slot + 1 if ended else gamma + 1]  # DeepSpec's
    assert tau(rollout.rounds) == pytest.approx(np.mean(acceptance_lengths))
    assert rollout.rounds.ended_in_draft.tolist() == [False] * full_rounds + [ended]


def test_phase_seconds_are_measured_only_when_timed(target, close_drafter):
    """Untimed rollouts (the default) report no seconds, and say so; timed=True measures
    every phase, and the tokens are the same."""
    prompt = torch.tensor(PROMPTS[0])
    plain = speculative_generate(target, ModelDrafter(close_drafter), prompt, 20, 3, 0.0, None)
    phases = ("prefill", "draft", "verify", "overhead")
    assert all(getattr(plain, f"{phase}_seconds") is None for phase in phases)
    with pytest.raises(ValueError, match="timed=True"):
        plain.total_seconds
    timed = speculative_generate(target, ModelDrafter(close_drafter), prompt, 20, 3, 0.0, None, timed=True)
    seconds = [getattr(timed, f"{phase}_seconds") for phase in phases]
    assert all(s > 0 for s in seconds) and timed.total_seconds == pytest.approx(sum(seconds))
    assert torch.equal(timed.tokens, plain.tokens)


def test_latency_per_token_is_eq_1():
    assert latency_per_token(0.02, 0.06, 4.0) == pytest.approx(0.02)  # (T_draft + T_verify) / tau
    assert latency_per_token(0.02, 0.06, 4, t_overhead=0.04) == pytest.approx(0.03)
    assert isinstance(latency_per_token(1, 1, 1), float)
    np.testing.assert_allclose(latency_per_token(np.array([1.0, 2.0]), 2.0, np.array([1.0, 4.0])), [3.0, 1.0])
    assert latency_per_token(0.0, 0.0, 1.0) == 0.0
    for args, message in [((-0.1, 1.0, 2.0), "t_draft must be finite and >= 0"),
                          ((0.1, math.nan, 2.0), "t_verify must be finite and >= 0"),
                          ((0.1, 1.0, 0.5), "tau must be finite and >= 1"),
                          ((0.1, 1.0, math.inf), "tau must be finite and >= 1"),
                          ((0.1, np.array([1.0, -1.0]), 2.0), "t_verify must be finite and >= 0"),
                          (("x", 1.0, 2.0), "t_draft must be numeric")]:
        with pytest.raises(ValueError, match=message):
            latency_per_token(*args)
    with pytest.raises(ValueError, match="t_overhead must be finite and >= 0"):
        latency_per_token(0.1, 0.1, 2.0, t_overhead=-1.0)


class DoubledProbsDrafter(ModelDrafter):
    """A ModelDrafter that reports its distributions doubled (rows summing to 2)."""

    def draft(self, context_ids, gamma, temperature, generator):
        draft = super().draft(context_ids, gamma, temperature, generator)
        return Draft(draft.tokens, 2 * draft.probs, draft.confidence_logits)


def test_draft_validation_is_opt_in(target, close_drafter, monkeypatch):
    """checks.validate_draft runs once a round with validate=True and never by default; a draft with
    bad distributions is caught only when asked (greedy verification compares tokens only)."""
    calls, real = [], checks.validate_draft
    monkeypatch.setattr(checks, "validate_draft", lambda draft, logits: calls.append(1) or real(draft, logits))
    prompt = torch.tensor(PROMPTS[0])
    expected = autoregressive_generate(target, prompt, 20, 0.0, None)
    assert torch.equal(speculative_generate(target, ModelDrafter(close_drafter), prompt, 20, 3, 0.0, None).tokens,
                       expected)
    assert calls == []
    checked = speculative_generate(target, ModelDrafter(close_drafter), prompt, 20, 3, 0.0, None, validate=True)
    assert len(calls) == len(checked.rounds) and torch.equal(checked.tokens, expected)
    with pytest.raises(ValueError, match="sum to 1"):
        speculative_generate(target, DoubledProbsDrafter(close_drafter), prompt, 20, 3, 0.0, None, validate=True)
    unchecked = speculative_generate(target, DoubledProbsDrafter(close_drafter), prompt, 20, 3, 0.0, None)
    assert torch.equal(unchecked.tokens, expected)


def crop_as_up_to_5_14(self, max_length: int) -> None:
    """DynamicCache.crop as transformers <= 5.14 reads its argument (cache_utils.py of 5.10.2):
    k >= 0 keeps the first k tokens, so crop(0) empties the cache; k < 0 removes -k."""
    length = self.get_seq_length()
    if max_length < 0:
        max_length = length - abs(max_length)
    if length <= max_length:
        return
    for layer in self.layers:
        layer.keys, layer.values = layer.keys[..., :max_length, :], layer.values[..., :max_length, :]


def test_engine_is_right_under_the_old_crop_semantics(target, monkeypatch):
    """With crop read as transformers 5.10-5.14 read it, a round that accepts every draft
    must not empty the target's cache (the engine removes nothing then, instead of crop(0))."""
    from transformers import DynamicCache

    monkeypatch.setattr(DynamicCache, "crop", crop_as_up_to_5_14)
    prompt = torch.tensor(PROMPTS[2])
    expected = autoregressive_generate(target, prompt, 30, 0.0, None)
    rollout = speculative_generate(target, ModelDrafter(target), prompt, 30, 4, 0.0, None)
    assert bool((rollout.rounds.accepted == rollout.rounds.proposed).all())
    assert torch.equal(rollout.tokens, expected)


def test_end_ids_accepts_one_id_or_several():
    from dspark_lite.checks import end_ids

    assert end_ids(None) == () and end_ids(7) == (7,) and end_ids(np.int64(7)) == (7,)
    assert end_ids([151645, 151643, 151645]) == (151645, 151643) and end_ids(torch.tensor([3, 4])) == (3, 4)
    for bad in ("7", [True], [-1], [], [1.5], 2.0):
        with pytest.raises(ValueError, match="eos_token_id"):
            end_ids(bad)


def test_ended_round_records_are_checked():
    records = Rounds.of([4, 3], [2, 3], ended_in_draft=[False, True])
    assert tau(records) == pytest.approx((3 + 3) / 2)
    with pytest.raises(ValueError, match="ended_in_draft"):
        Rounds.of([4], [2], ended_in_draft=[True])


def exact_joint(target, prompt: torch.Tensor, temperature: float, length: int) -> torch.Tensor:
    """P(t_1..t_length | prompt) of the target at `temperature`, flattened in row-major
    order, by scoring every prefix (vocab ** (length - 1) of them at the last step)."""
    vocab = target.config.vocab_size
    joint, prefixes = torch.ones(1), torch.empty(1, 0, dtype=torch.long)
    with torch.inference_mode():
        for _ in range(length):
            logits = target(torch.cat([prompt.expand(len(prefixes), -1), prefixes], dim=1)).logits[:, -1]
            joint = (joint[:, None] * probs_from_logits(logits, temperature)).reshape(-1)
            prefixes = torch.cat([prefixes.repeat_interleave(vocab, 0), torch.arange(vocab).repeat(len(prefixes))[:, None]], 1)
    return joint


def sequence_codes(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """Row-major index of each row of `tokens` [N, length] among vocab ** length cells."""
    powers = vocab ** torch.arange(tokens.shape[-1] - 1, -1, -1)
    return (tokens * powers).sum(-1)


def empirical_tv_bound(exact: np.ndarray, samples: int) -> float:
    """A TV threshold a correct sampler exceeds with probability <= SIGNIFICANCE:
    E[TV] <= 0.5 * sum_i sqrt(p_i (1 - p_i) / n) (Jensen), and TV moves by at most 1/n per
    sample, so P(TV > E[TV] + t) <= exp(-2 n t^2) (McDiarmid)."""
    mean_bound = 0.5 * np.sqrt(exact * (1 - exact) / samples).sum()
    return float(mean_bound + np.sqrt(np.log(1 / SIGNIFICANCE) / (2 * samples)))


SPECULATIVE_RUNS = 1000


@pytest.mark.parametrize("early_stop", [False, True], ids=["gamma_drafts", "early_stops"])
def test_speculative_sampling_matches_target_distribution(target, close_drafter, early_stop):
    """All four tokens of max_new_tokens=4 rollouts at temperature 0.8 with gamma = 2
    (token 1 from the prefill; tokens 2-4 from one block, or two or three rounds after
    rejections: accepted drafts, corrections, bonus tokens, a last round cut at 4 tokens)
    match the exact joint distribution of the target; so does plain batched sampling. With
    early stops (issue 31, item 6), a draft ends at its first token in a stop set, so rounds
    propose 1 or 2 drafts depending on what was drafted: still lossless."""
    prompt, length = torch.tensor(PROMPTS[0]), 4
    vocab = target.config.vocab_size
    exact = exact_joint(target, prompt, TEMPERATURE, length).numpy()
    generator = torch.Generator().manual_seed(7)
    drafter = EarlyStopDrafter(close_drafter, range(0, 16, 3)) if early_stop else ModelDrafter(close_drafter)
    tokens, rounds = [], []
    for _ in range(SPECULATIVE_RUNS):
        rollout = speculative_generate(target, drafter, prompt, length, 2, TEMPERATURE, generator)
        tokens.append(rollout.tokens)
        rounds.append(rollout.rounds)
    rounds = Rounds.concat(rounds)
    speculative_counts = counts_of(sequence_codes(torch.stack(tokens), vocab), vocab**length)
    assert 0.2 < prefix_survival(rounds)[0] < 0.95, "the test needs both acceptances and rejections"
    if early_stop:
        short = rounds.proposed == 1
        assert 0.1 < short.mean() < 0.9 and bool((rounds.accepted[short] == 1).any()), "the test needs short drafts"
    assert chi_square_p_value(speculative_counts, exact) > SIGNIFICANCE
    tv = 0.5 * np.abs(speculative_counts / SPECULATIVE_RUNS - exact).sum()
    assert tv < empirical_tv_bound(exact, SPECULATIVE_RUNS)
    if early_stop:
        return

    plain = autoregressive_generate(target, prompt.expand(20_000, -1), length, TEMPERATURE, generator)
    assert chi_square_p_value(counts_of(sequence_codes(plain, vocab), vocab**length), exact) > SIGNIFICANCE


def test_model_drafter_reports_the_distributions_it_samples_from(close_drafter):
    """Each Draft.probs row is the drafter's softmax at the temperature, given the context
    and the drafts before it; tokens have positive probability."""
    drafter, context = ModelDrafter(close_drafter), torch.tensor(PROMPTS[2])
    drafter.start(context[:-1], None)
    draft = drafter.draft(context, 3, TEMPERATURE, torch.Generator().manual_seed(3))
    with torch.inference_mode():
        logits = close_drafter(torch.cat([context, draft.tokens[:-1]])[None]).logits[0, -3:]
    torch.testing.assert_close(draft.probs, probs_from_logits(logits, TEMPERATURE), atol=1e-5, rtol=1e-4)
    assert bool((draft.probs.gather(1, draft.tokens[:, None]) > 0).all())


# ----------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------


def test_metrics_on_hand_made_records():
    # (proposed, accepted); the last round is short (near max_new_tokens).
    records = Rounds.of([3, 3, 3, 3, 2], [3, 0, 1, 2, 2])
    assert tau(records) == pytest.approx((4 + 1 + 2 + 3 + 3) / 5)
    # k=1: 4 of 5 rounds accepted >= 1; k=2: 3 of 5; k=3: only the 4 rounds that proposed 3
    # count, and 1 of them accepted all 3.
    np.testing.assert_allclose(prefix_survival(records), [4 / 5, 3 / 5, 1 / 4])
    # k=1: 4/5; k=2: among rounds with >= 1 accepted (all proposed >= 2): 3 of 4;
    # k=3: among rounds that proposed 3 and accepted >= 2: (3,3), (3,2) -> 1 of 2.
    alpha = conditional_acceptance(records)
    np.testing.assert_allclose(alpha, [4 / 5, 3 / 4, 1 / 2])
    assert expected_tau_from_conditional(alpha) == pytest.approx(1 + 0.8 + 0.8 * 0.75 + 0.8 * 0.75 * 0.5)
    np.testing.assert_allclose(prefix_survival(records, gamma=4), [4 / 5, 3 / 5, 1 / 4, math.nan])


def test_expected_tau_matches_tau_when_every_round_proposes_gamma():
    rng = np.random.default_rng(0)
    records = Rounds.of(np.full(200, 5), rng.integers(0, 6, size=200))
    assert expected_tau_from_conditional(conditional_acceptance(records)) == pytest.approx(tau(records))


def test_conditional_acceptance_is_nan_without_denominator():
    records = Rounds.of([3, 3], [0, 0])
    alpha = conditional_acceptance(records)
    assert alpha[0] == 0 and np.isnan(alpha[1:]).all()
    assert expected_tau_from_conditional(alpha) == 1.0


def test_metrics_reject_bad_records():
    with pytest.raises(ValueError, match="no rounds"):
        tau(Rounds.of([], []))
    with pytest.raises(ValueError, match="accepted <= proposed"):
        Rounds.of([2], [3])
    with pytest.raises(ValueError, match="probability"):
        expected_tau_from_conditional([0.5, 1.5])


def test_gumbel_max_draws_from_the_tempered_softmax():
    """argmax(logits / T + G) over many rows has softmax(logits / T)'s frequencies, and not
    softmax(logits)'s: the temperature is applied before the noise."""
    generator = torch.Generator().manual_seed(11)
    logits = 1.5 * torch.randn(6, generator=generator)
    tokens = gumbel_perturbed(logits.expand(60_000, 6), 0.6, generator).argmax(-1)
    counts = counts_of(tokens, 6)
    assert chi_square_p_value(counts, torch.softmax(logits / 0.6, -1).numpy()) > SIGNIFICANCE
    assert chi_square_p_value(counts, torch.softmax(logits, -1).numpy()) < SIGNIFICANCE
    assert torch.equal(gumbel_perturbed(logits, 0.0, None), logits.float())


def test_race_takes_turns_on_every_prompt_and_counts_tokens():
    from dspark_lite.harness.serving import benchmark

    calls = []

    def decoder(name, n_tokens):
        def decode(ids):
            calls.append((name, int(ids[0])))
            return torch.zeros(n_tokens, dtype=torch.long)
        return decode

    prompts = [torch.tensor([i]) for i in range(4)]
    result = benchmark.race({"a": decoder("a", 3), "b": decoder("b", 5)}, prompts, repeats=2)
    assert calls[:8] == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("b", 3), ("a", 3)]
    assert len(calls) == 16
    assert result["a"]["tokens"] == 12 and result["b"]["tokens"] == 20
    assert all(len(r["tokens_per_s_all"]) == 2 and r["tokens_per_s"] > 0 for r in result.values())
    with pytest.raises(ValueError, match="repeats"):
        benchmark.race({"a": decoder("a", 1)}, prompts, repeats=0)


def test_only_transformers_own_assistant_notice_is_dropped(caplog) -> None:
    """benchmark.assisted silences the one deprecation notice transformers raises about its own
    assistant call; any other warning of that logger still shows."""
    import logging

    from dspark_lite.harness.serving.benchmark import without_assistant_config_notice

    logger = logging.getLogger("transformers.generation.utils")
    with caplog.at_level(logging.WARNING, logger="transformers.generation.utils"):
        with without_assistant_config_notice():
            logger.warning("Passing `generation_config` together with generation-related arguments=({'x'})")
            logger.warning("something else went wrong")
        logger.warning("Passing `generation_config` together with generation-related arguments=({'y'})")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["something else went wrong",
                        "Passing `generation_config` together with generation-related arguments=({'y'})"]
