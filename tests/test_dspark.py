"""Tests for dspark_lite.dspark (chapter 04): the Markov and RNN heads on tiny random Qwen3
targets. Seconds in total; the statistical test uses a fixed seed and fails a correct
implementation with probability below 1e-3 (as in test_speculative)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_drafters import GAMMA, LAYER_IDS, MASK_ID, PAD_ID, dflash, hidden_of, random_ids, run_protocol, tiny_target
from reference import SIGNIFICANCE, chi_square_p_value
from test_speculative import counts_of, exact_joint, sequence_codes, tiny_qwen3

from dspark_lite import speculative
from dspark_lite.hidden_drafter import AnchorBatch, DrafterConfig
from dspark_lite.dspark import DSparkDrafter, MarkovHead, RNNHead, sample_chain
from dspark_lite.record import Rounds, prefix_survival
from dspark_lite.baselines import autoregressive_generate
from dspark_lite.speculative import Drafter, speculative_generate
from dspark_lite.harness.toy.replies import generate_training_sequences
from dspark_lite.training import DrafterTrainConfig, train_drafter

pytestmark = pytest.mark.usefixtures("one_thread")
HEADS = ["markov", "rnn"]


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def dspark(target, head_type: str = "markov", seed: int = 1, rank: int = 8, layer_ids=LAYER_IDS,
           mask_id: int = MASK_ID, head_scale: float = 50.0) -> DSparkDrafter:
    """A DSpark drafter whose head weights are scaled up, so the bias visibly moves the logits."""
    cfg = DrafterConfig(layer_ids, mask_token_id=mask_id, gamma=GAMMA, num_layers=2, head_type=head_type,
                       head_rank=rank)
    drafter = DSparkDrafter(target, cfg, seed=seed)
    with torch.no_grad():
        for param in drafter.head.parameters():
            param.mul_(head_scale)
    return drafter


def teacher_forced_probs(drafter, target, sequence: torch.Tensor, draft_tokens: torch.Tensor) -> torch.Tensor:
    """softmax of the training forward's corrected logits for the block at the last token of
    `sequence`, teacher-forced on `draft_tokens`."""
    teacher = torch.cat([sequence, draft_tokens])[None]
    batch = AnchorBatch(teacher, hidden_of(target, teacher), torch.tensor([[sequence.shape[0] - 1]]))
    logits = drafter.train_logits(batch).logits[0, 0, : draft_tokens.shape[0]]
    return torch.softmax(logits, -1)


# ----------------------------------------------------------------------------------------
# The sampling loop agrees with the teacher-forced training forward
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_type", HEADS)
def test_sampling_loop_probs_equal_teacher_forced_probs_of_the_sampled_chain(target, head_type):
    """The draft's probabilities are the corrected softmaxes given the tokens it actually
    sampled, not the base (parallel) ones."""
    drafter = dspark(target, head_type)
    assert isinstance(drafter, Drafter)
    sequence, draft = run_protocol(drafter, target, random_ids(6, 7), [2, 0, 3], GAMMA, seed=6)
    torch.testing.assert_close(draft.probs, teacher_forced_probs(drafter, target, sequence, draft.tokens),
                               atol=1e-5, rtol=1e-4)
    base = drafter.block_logits(hidden_of(target, sequence[None]), drafter.make_block_ids(sequence[-1:]),
                                torch.tensor([sequence.shape[0] - 1]))[0]
    assert (draft.probs - torch.softmax(base, -1)).abs().max() > 0.05, "the head must move the distribution"


@pytest.mark.parametrize("head_type", HEADS)
def test_zero_w2_reduces_exactly_to_the_backbone(target, head_type):
    drafter, backbone = dspark(target, head_type, seed=3), dflash(target, seed=3)
    with torch.no_grad():
        drafter.head.w2.weight.zero_()
    ids = random_ids(8, 2, 16)
    batch = AnchorBatch(ids, hidden_of(target, ids), torch.tensor([[0, 5, 11], [3, 9, 14]]))
    assert torch.equal(drafter.train_logits(batch).logits, backbone.train_logits(batch).logits)
    drafts = [run_protocol(d, target, random_ids(9, 6), [1, 2], GAMMA, seed=9)[1] for d in (drafter, backbone)]
    assert torch.equal(drafts[0].tokens, drafts[1].tokens) and torch.equal(drafts[0].probs, drafts[1].probs)


def test_markov_bias_reads_only_the_previous_token_and_rnn_reads_the_whole_prefix():
    """Changing x_0 changes slot 3's bias for the RNN head (Eq. 6) but not the Markov head's (Eq. 5)."""
    torch.manual_seed(0)
    hidden = torch.randn(1, 3, 16)
    for head, reads_prefix in ((MarkovHead(20, 4), False), (RNNHead(20, 4, 16), True)):
        with torch.no_grad():
            for param in head.parameters():
                param.normal_()
        first = head.block_bias(torch.tensor([[1, 2, 3]]), hidden)
        second = head.block_bias(torch.tensor([[7, 2, 3]]), hidden)
        assert bool((first[0, 0] != second[0, 0]).any())
        assert bool((first[0, 2] != second[0, 2]).any()) == reads_prefix


def test_greedy_sample_chain_feeds_the_argmax_forward():
    head = MarkovHead(10, 3)
    with torch.no_grad():
        head.w1.weight.normal_()
        head.w2.weight.normal_()
    base, hidden = torch.randn(4, 10), torch.randn(4, 6)
    draft = sample_chain(head, base, hidden, torch.tensor(2), 0.0, None)
    prev = torch.cat([torch.tensor([2]), draft.tokens[:-1]])
    assert torch.equal(draft.tokens, (base + head.block_bias(prev, hidden)).argmax(-1))
    assert torch.equal(draft.probs.argmax(-1), draft.tokens) and torch.equal(draft.probs.sum(-1), torch.ones(4))


# ----------------------------------------------------------------------------------------
# Lossless speculative decoding
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("head_type", HEADS)
def test_greedy_speculative_decoding_reproduces_the_target(target, head_type):
    drafter = dspark(target, head_type)
    for seed in range(3):
        prompt = random_ids(10 + seed, 5 + seed)
        expected = autoregressive_generate(target, prompt, 40, 0.0, None)
        assert torch.equal(speculative_generate(target, drafter, prompt, 40, GAMMA, 0.0, None).tokens, expected)


def test_verifier_receives_the_corrected_probabilities_of_the_sampled_chain(target, monkeypatch):
    """Spy on the engine's verify_block: every draft it judges is the one the drafter
    returned, and its probabilities are the teacher-forced corrected ones for its tokens."""
    drafter, judged = dspark(target, "markov"), []
    real_verify = speculative.verify_block

    def spy(logits, draft, temperature, generator):
        judged.append(draft)
        return real_verify(logits, draft, temperature, generator)

    monkeypatch.setattr(speculative, "verify_block", spy)
    prompt = random_ids(21, 6)
    rollout = speculative_generate(target, drafter, prompt, 24, GAMMA, 1.0, torch.Generator().manual_seed(2), validate=True)
    sequence = torch.cat([prompt, rollout.tokens])
    position = prompt.shape[0]  # the first anchor: the prefill's token
    assert len(judged) == len(rollout.rounds) >= 3
    for draft, accepted in zip(judged, rollout.rounds.accepted.tolist()):
        expected = teacher_forced_probs(drafter, target, sequence[: position + 1], draft.tokens)
        torch.testing.assert_close(draft.probs, expected, atol=1e-5, rtol=1e-4)
        position += accepted + 1


def train_tiny_dspark(target, head_type: str, steps: int) -> DSparkDrafter:
    """A DSpark drafter trained for a few steps on the target's own samples."""
    prompts = [torch.randint(0, 16, (3 + i % 4,), generator=torch.Generator().manual_seed(i)) for i in range(24)]
    tokenizer = SimpleNamespace(eos_token_id=None, pad_token_id=0)  # no EOS: replies run to full length
    data = generate_training_sequences(target, tokenizer, prompts, 12, 1.0, torch.Generator().manual_seed(0),
                                       batch_size=24)
    drafter = DSparkDrafter(target, DrafterConfig((0, 1), mask_token_id=15, gamma=2, num_layers=1,
                                                 head_type=head_type, head_rank=8), seed=0)
    cfg = DrafterTrainConfig(steps=steps, sequences_per_batch=8, anchors_per_sequence=4, lr=1e-2, warmup_steps=2)
    train_drafter(drafter, target, data, cfg, seed=0)
    return drafter.eval()


SPECULATIVE_RUNS = 1000


def test_speculative_sampling_with_a_markov_drafter_matches_the_target_distribution():
    """Chapter 02's statistical test with a trained DSpark-Markov drafter: the first four
    tokens of rollouts at temperature 0.8, gamma = 2, match the target's exact joint."""
    target = tiny_qwen3(0, logit_scale=20.0)
    drafter = train_tiny_dspark(target, "markov", steps=40)
    prompt, length, vocab, temperature = torch.tensor([3, 1, 4, 1, 5]), 4, 16, 0.8
    exact = exact_joint(target, prompt, temperature, length).numpy()
    generator = torch.Generator().manual_seed(7)
    tokens, rounds = [], []
    for _ in range(SPECULATIVE_RUNS):
        rollout = speculative_generate(target, drafter, prompt, length, 2, temperature, generator)
        tokens.append(rollout.tokens)
        rounds.append(rollout.rounds)
    assert 0.2 < prefix_survival(Rounds.concat(rounds))[0] < 0.95, "the test needs both acceptances and rejections"
    counts = counts_of(sequence_codes(torch.stack(tokens), vocab), vocab**length)
    assert chi_square_p_value(counts, exact) > SIGNIFICANCE


# ----------------------------------------------------------------------------------------
# DeepSpec names, and clear errors
# ----------------------------------------------------------------------------------------


def test_head_state_dict_holds_the_markov_and_rnn_weights_in_deepspecs_shapes(target):
    rank, vocab, hidden = 8, 48, 32
    markov = {k: tuple(v.shape) for k, v in dspark(target, "markov").state_dict().items() if k.startswith("head.")}
    assert markov == {"head.w1.weight": (vocab, rank), "head.w2.weight": (vocab, rank)}
    rnn = {k: tuple(v.shape) for k, v in dspark(target, "rnn").state_dict().items() if k.startswith("head.")}
    assert rnn == {**markov, "head.joint_proj.weight": (3 * rank, 2 * rank + hidden),
                   "head.joint_proj.bias": (3 * rank,)}
    released = {k: torch.randn(v.shape) for k, v in dspark(target, "markov").state_dict().items()}
    drafter = dspark(target, "markov", seed=5)
    drafter.load_state_dict(released)
    assert torch.equal(drafter.head.w1.weight, released["head.w1.weight"])


def test_rnn_gate_candidate_output_follow_the_joint_projection_order():
    head = RNNHead(12, 2, 3)
    with torch.no_grad():
        head.joint_proj.weight.zero_()
        head.joint_proj.bias.copy_(torch.tensor([50.0, 50.0, -50.0, -50.0, 0.0, 0.0]))  # gate ~1, candidate ~-1
        head.w2.weight.normal_()
    state, bias = head.step(torch.full((1, 2), 0.3), torch.tensor([1]), torch.zeros(1, 3))
    torch.testing.assert_close(state, torch.full((1, 2), 0.3))  # gate = 1 keeps the old state
    torch.testing.assert_close(bias, torch.zeros(1, 12))  # output tanh(0) = 0


@pytest.mark.parametrize("kwargs, message", [({"head_type": "lstm"}, "unknown head type"),
                                             ({"head_rank": 0}, "head_rank")])
def test_bad_head_configs_raise_clear_errors(target, kwargs, message):
    cfg = DrafterConfig(LAYER_IDS, mask_token_id=MASK_ID, gamma=GAMMA, **kwargs)
    with pytest.raises(ValueError, match=message):
        DSparkDrafter(target, cfg)


def test_draft_before_start_is_a_clear_error(target):
    with pytest.raises(ValueError, match="before start"):
        dspark(target).draft(random_ids(1, 5), GAMMA, 1.0, None)


@pytest.mark.parametrize("head_type", HEADS)
def test_load_backbone_starts_exactly_as_the_dflash_drafter(target, head_type):
    """Chapter 04 starts DSpark from the trained DFlash drafter: W2 = 0 afterwards, so its
    training forward and its drafts are DFlash's, bit for bit; a foreign drafter is refused."""
    backbone, drafter = dflash(target, seed=4), dspark(target, head_type, seed=7)
    drafter.load_backbone(backbone)
    assert not drafter.head.w2.weight.any()
    ids = random_ids(5, 2, 16)
    batch = AnchorBatch(ids, hidden_of(target, ids), torch.tensor([[1, 6], [2, 12]]))
    assert torch.equal(drafter.train_logits(batch).logits, backbone.train_logits(batch).logits)
    drafts = [run_protocol(d, target, random_ids(3, 6), [2, 1], GAMMA, seed=2)[1] for d in (drafter, backbone)]
    assert torch.equal(drafts[0].tokens, drafts[1].tokens) and torch.equal(drafts[0].probs, drafts[1].probs)
    other = DSparkDrafter(target, DrafterConfig(LAYER_IDS, mask_token_id=MASK_ID, gamma=GAMMA, num_layers=1))
    with pytest.raises(ValueError, match="not a DFlash backbone"):
        drafter.load_backbone(other)


# ----------------------------------------------------------------------------------------
# The confidence head (chapter 05)
# ----------------------------------------------------------------------------------------


def confident(target, seed: int = 1) -> DSparkDrafter:
    cfg = DrafterConfig(LAYER_IDS, mask_token_id=MASK_ID, gamma=GAMMA, num_layers=2, head_rank=8,
                       confidence_head=True)
    drafter = DSparkDrafter(target, cfg, seed=seed)
    with torch.no_grad():
        drafter.confidence_head.proj.weight.mul_(50.0)  # make the untrained head's output spread out
    return drafter


def test_confidence_head_keys_shapes_and_clear_error_without_it(target):
    drafter = confident(target)
    shapes = {k: tuple(v.shape) for k, v in drafter.state_dict().items() if k.startswith("confidence_head.")}
    assert shapes == {"confidence_head.proj.weight": (1, target.config.hidden_size + 8), "confidence_head.proj.bias": (1,)}
    with pytest.raises(ValueError, match="no confidence head"):
        dspark(target).confidence_logits(torch.zeros(2, target.config.hidden_size), torch.zeros(2, dtype=torch.long))


def test_draft_confidences_equal_the_teacher_forced_ones_of_the_sampled_chain(target):
    """z_k reads h_k and the token before slot k (the anchor for k = 1): the drafted block's
    confidence logits equal the training forward's confidence logits on that chain."""
    drafter = confident(target)
    sequence, draft = run_protocol(drafter, target, random_ids(4, 7), [1, 3], GAMMA, seed=5)
    assert draft.confidence_logits.shape == (GAMMA,) and draft.confidence_logits.dtype == torch.float32
    assert bool(torch.isfinite(draft.confidence_logits).all())
    teacher = torch.cat([sequence, draft.tokens])[None]
    batch = AnchorBatch(teacher, hidden_of(target, teacher), torch.tensor([[sequence.shape[0] - 1]]))
    forced = drafter.train_logits(batch).confidence_logits[0, 0, :GAMMA].float()
    torch.testing.assert_close(draft.confidence_logits, forced, atol=1e-5, rtol=1e-4)
    confidences = torch.sigmoid(draft.confidence_logits)
    assert float(confidences.max() - confidences.min()) > 0.05, "the head must depend on the slot"


def test_a_confidence_head_attached_to_a_frozen_drafter_trains_alone(target):
    drafter = dspark(target)
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    drafter.add_confidence_head(seed=3, freeze_drafter=True)
    assert [n for n, p in drafter.named_parameters() if p.requires_grad] == ["confidence_head.proj.weight",
                                                                            "confidence_head.proj.bias"]
    head_before = drafter.confidence_head.proj.weight.detach().clone()
    prompts = [random_ids(i, 4) for i in range(8)]
    data = generate_training_sequences(target, SimpleNamespace(eos_token_id=None, pad_token_id=PAD_ID), prompts, 12, 1.0,
                                       torch.Generator().manual_seed(1), batch_size=8)
    history = train_drafter(drafter, target, data, DrafterTrainConfig(steps=4, sequences_per_batch=4,
                                                                      anchors_per_sequence=2, lr=1e-2, warmup_steps=1))
    assert len(history.confidence_bce) == 4
    assert all(torch.equal(before[k], v) for k, v in drafter.state_dict().items() if k in before)
    assert not torch.equal(head_before, drafter.confidence_head.proj.weight)
