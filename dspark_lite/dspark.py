"""DSpark's semi-autoregressive drafter (chapter 04, paper section 3.1, Eq. 4-6; the confidence
head of Eq. 7-8 is chapter 05's): the parallel backbone of chapter 03 (`dflash`) plus a light
sequential head that adds a prefix-dependent bias to each slot's base logits
(paper section 3.1, Eq. 4; `sample_chain` draws the block slot by slot):

    p_k(v | x_0, x_<k) = softmax_v( U_k(v) + B_k(x_0, x_<k, v) )

* `MarkovHead` (Eq. 5): B_k = W1[x_{k-1}] W2, a rank-r correction that depends on the
  previous token only.
* `RNNHead` (Eq. 6): z_k = [s_{k-1}; W1[x_{k-1}]; h_k]; one linear layer gives a gate, a
  candidate and an output; s_k = g * s_{k-1} + (1 - g) * tanh(c); B_k = W2 tanh(o); s_0 = 0.

Training is teacher-forced: x_{k-1} is the true token (x_0 is the anchor), so the Markov
bias of a whole block is one batched lookup. Drafting is a left-to-right loop over the
gamma slots: sample x_k from the corrected softmax, feed it to slot k + 1. The `Draft`
carries exactly those corrected distributions, so verification stays lossless.

Shapes follow DeepSpec (deepspec/modeling/dspark/markov_head.py): head.w1.weight [V, r],
head.w2.weight [V, r] and, for the RNN head, head.joint_proj.{weight [3r, 2r + H], bias [3r]},
whose output rows are the gate, candidate and output blocks in that order. DeepSpec names the
head `markov_head` and its tables `markov_w1` / `markov_w2` whichever head it is; the
checkpoint reader (`harness.gpu.released_config.KEY_MAP`) maps those names to ours.

Chapter 05 adds the `ConfidenceHead` (Eq. 7): c_k = sigmoid(w . [h_k; W1[x_{k-1}]] + b), trained
jointly against 1 - TV (Eq. 8) or attached to a frozen drafter; the Draft carries c_1..c_gamma.
The paper writes Eq. 7 without the bias b; DeepSpec's head, whose weights load here, has it.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import PreTrainedModel

from . import checks
from .dflash import DFlashDrafter
from .hidden_drafter import AnchorBatch, BlockOutput, DrafterConfig, drafter_round
from .sampling import gumbel_perturbed, probs_from_logits
from .speculative import Draft

HEAD_TYPES = ("markov", "rnn")


class MarkovHead(nn.Module):
    """B_k = W1[x_{k-1}] W2 (Eq. 5): an embedding table V x r and a bias-free map r -> V."""

    def __init__(self, vocab_size: int, rank: int) -> None:
        super().__init__()
        self.rank = checks.positive_int(rank, "head_rank")
        self.w1 = nn.Embedding(vocab_size, rank)
        self.w2 = nn.Linear(rank, vocab_size, bias=False)

    def prev_embedding(self, prev_tokens: Tensor) -> Tensor:
        """W1[x_{k-1}], [..., r]."""
        return self.w1(prev_tokens.long())

    def initial_state(self, hidden: Tensor) -> Tensor | None:
        """The state before slot 1 for slot hidden states [..., H]; the Markov head has none."""
        return None

    def step(self, state: Tensor | None, prev_tokens: Tensor, hidden: Tensor) -> tuple[Tensor | None, Tensor]:
        """One slot: (next state, bias [..., V]) from the previous token [...] and the slot's
        backbone hidden state [..., H]. (The functional calls skip module overhead: this runs
        once per drafted token.)"""
        return None, F.linear(F.embedding(prev_tokens.long(), self.w1.weight), self.w2.weight)

    def block_bias(self, prev_tokens: Tensor, hidden: Tensor) -> Tensor:
        """Teacher-forced biases [..., G, V] for previous tokens [..., G] (slot k reads
        x_{k-1}; slot 1 reads the anchor) and slot hidden states [..., G, H]: one lookup."""
        return self.w2(self.prev_embedding(prev_tokens))


class RNNHead(MarkovHead):
    """The gated recurrent head (Eq. 6): the bias of slot k sees the whole prefix through s_k."""

    def __init__(self, vocab_size: int, rank: int, hidden_size: int) -> None:
        super().__init__(vocab_size, rank)
        self.joint_proj = nn.Linear(2 * rank + hidden_size, 3 * rank)

    def initial_state(self, hidden: Tensor) -> Tensor:
        return hidden.new_zeros(*hidden.shape[:-1], self.rank)

    def advance(self, state: Tensor, prev_embedding: Tensor, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """The recurrence of one slot: (s_k, tanh(o_k)) from s_{k-1}, W1[x_{k-1}] and h_k."""
        z = torch.cat([state, prev_embedding.to(hidden.dtype), hidden], dim=-1)
        gate, candidate, output = self.joint_proj(z).chunk(3, dim=-1)
        gate = torch.sigmoid(gate)
        return gate * state + (1 - gate) * torch.tanh(candidate), torch.tanh(output)

    def step(self, state: Tensor, prev_tokens: Tensor, hidden: Tensor) -> tuple[Tensor, Tensor]:
        state, output = self.advance(state, self.prev_embedding(prev_tokens), hidden)
        return state, self.w2(output)

    def block_bias(self, prev_tokens: Tensor, hidden: Tensor) -> Tensor:
        """Teacher-forced biases: only the state is unrolled over the block's slots; the
        r -> V map W2 then runs once on all of them."""
        embeddings = self.prev_embedding(prev_tokens)
        state, outputs = self.initial_state(hidden[..., 0, :]), []
        for k in range(prev_tokens.shape[-1]):
            state, output = self.advance(state, embeddings[..., k, :], hidden[..., k, :])
            outputs.append(output)
        return self.w2(torch.stack(outputs, dim=-2))


class ConfidenceHead(nn.Module):
    """c_k = sigmoid(w . [h_k ; W1[x_{k-1}]] + b) (Eq. 7): one linear layer on the
    slot's backbone hidden state and the Markov head's embedding of the token before the slot.
    It predicts whether x_k will survive verification, before x_k is sampled. Key names follow
    DeepSpec: confidence_head.proj.{weight [1, H + r], bias [1]}."""

    def __init__(self, hidden_size: int, rank: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size + rank, 1)

    def forward(self, hidden: Tensor, prev_embedding: Tensor) -> Tensor:
        """Confidence logits [...] for slot hidden states [..., H] and W1[x_{k-1}] [..., r]."""
        return self.proj(torch.cat([hidden, prev_embedding.to(hidden.dtype)], dim=-1)).squeeze(-1)


def make_head(head_type: str, vocab_size: int, rank: int, hidden_size: int) -> MarkovHead:
    """A fresh head of `head_type` ("markov" or "rnn")."""
    _one_of(head_type, HEAD_TYPES, "head type")
    return MarkovHead(vocab_size, rank) if head_type == "markov" else RNNHead(vocab_size, rank, hidden_size)


def sample_chain(head: MarkovHead, base_logits: Tensor, hidden: Tensor, anchor_token: Tensor,
                 temperature: float, generator: torch.Generator | None) -> Draft:
    """Draft gamma tokens left to right: slot k samples from
    softmax((U_k + B_k(x_{k-1})) / T), with x_0 the anchor (argmax at T = 0). base_logits
    [gamma, V], hidden [gamma, H]. The Draft holds the corrected distribution each token was
    actually sampled from, which is what the verifier must see.

    The loop does only what must be sequential: the head's step and an argmax. Sampling uses
    the Gumbel-max trick with the noise of all slots drawn up front, and the softmaxes of the
    corrected logits are taken once, after the loop."""
    base = base_logits.float()
    scale = 1.0 if temperature == 0 else 1.0 / temperature
    perturbed = gumbel_perturbed(base, temperature, generator)
    state = head.initial_state(hidden[:1])
    prev = anchor_token.reshape(1).to(base.device)
    tokens, biases = [], []
    for k in range(base.shape[0]):
        state, bias = head.step(state, prev, hidden[k : k + 1])
        bias = bias.float()
        prev = (perturbed[k : k + 1] + (bias if scale == 1.0 else bias * scale)).argmax(-1)
        tokens.append(prev)
        biases.append(bias)
    return Draft(torch.cat(tokens), probs_from_logits(base + torch.cat(biases), temperature))


class DSparkDrafter(DFlashDrafter):
    """The semi-autoregressive drafter: one parallel forward gives the base logits
    U_1..U_gamma and the slot hidden states h_1..h_gamma; the head then walks the block left
    to right. It plugs into the engine (`speculative`) and the trainer (`training`).

    Its config is the backbone's `DrafterConfig` with head_type ("markov", Eq. 5, the paper's
    default, or "rnn", Eq. 6), head_rank r and confidence_head (Eq. 7, trained jointly).
    state_dict keys: DFlashDrafter's, plus head.w1.weight, head.w2.weight (and
    head.joint_proj.{weight,bias} for the RNN head). With the same seed, the backbone starts from
    the same weights as a DFlashDrafter.
    """

    def __init__(self, target: PreTrainedModel, cfg: DrafterConfig, seed: int = 0) -> None:
        super().__init__(target, cfg, seed)
        self.head = make_head(cfg.head_type, self.vocab_size, cfg.head_rank, self.hidden_size)
        self._init_head(self.head, seed + 1)
        self.confidence_head: ConfidenceHead | None = None
        if cfg.confidence_head:
            self.add_confidence_head(seed)

    def _init_head(self, head: nn.Module, seed: int) -> None:
        """Normal(0, initializer_range) weights, zero biases, as Qwen3 initialises its layers."""
        std = float(getattr(self.layer_config, "initializer_range", 0.02))
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in head.named_parameters():
                noise = torch.randn(param.shape, generator=generator) * std
                param.copy_(torch.zeros_like(param) if name.endswith("bias") else noise)
        head.to(self.device)

    def add_confidence_head(self, seed: int = 0, freeze_drafter: bool = False) -> ConfidenceHead:
        """Attach a fresh confidence head (Eq. 7). With freeze_drafter, every other weight
        stops training, so the trainer fits the head alone on a trained drafter."""
        if freeze_drafter:
            self.requires_grad_(False)
        self.confidence_head = ConfidenceHead(self.hidden_size, self.head.rank)
        self._init_head(self.confidence_head, seed + 2)
        return self.confidence_head

    def confidence_logits(self, hidden: Tensor, prev_tokens: Tensor) -> Tensor:
        """The confidence logits z_k [..., G] (float32; c_k = sigmoid(z_k)) for slot hidden states
        [..., G, H] and the tokens before the slots [..., G]."""
        _confidence_head(self.confidence_head)
        return self.confidence_head(hidden, self.head.prev_embedding(prev_tokens)).float()

    def load_backbone(self, backbone: DFlashDrafter) -> "DSparkDrafter":
        """Start from a trained DFlash drafter: copy its weights into the backbone
        and zero W2, so that this drafter drafts exactly as `backbone` until it trains further."""
        heads = ("head.", "confidence_head.")
        ours = {k: v.shape for k, v in self.state_dict().items() if not k.startswith(heads)}
        theirs = {k: v.shape for k, v in backbone.state_dict().items()}
        _same_shapes(ours, theirs, f"{type(backbone).__name__} is not a DFlash backbone of this drafter")
        self.load_state_dict(backbone.state_dict(), strict=False)
        with torch.no_grad():
            self.head.w2.weight.zero_()
        return self

    def previous_tokens(self, input_ids: Tensor, anchor_pos: Tensor) -> Tensor:
        """Teacher-forced x_{k-1} for slots k = 1..gamma of anchors [B, A]: the tokens at
        anchor + 0 .. anchor + gamma - 1 (clamped at the end; those slots are masked)."""
        offsets = torch.arange(self.gamma, device=input_ids.device)
        positions = (anchor_pos[..., None] + offsets).clamp(max=input_ids.shape[1] - 1)
        return input_ids.gather(1, positions.flatten(1)).view(positions.shape)

    def train_logits(self, batch: AnchorBatch) -> BlockOutput:
        """Teacher-forced corrected logits [B, A, gamma, V]: U_k + B_k(true prefix)."""
        ids, anchors = batch.input_ids.to(self.device), batch.anchor_pos.to(self.device).long()
        prev = self.previous_tokens(ids, anchors)
        hidden = self.block_hidden(batch.target_hidden, self.make_block_ids(prev[..., 0]), anchors)
        base = self.logits_from_hidden(hidden)
        confidence_logits = None
        if self.confidence_head is not None:
            confidence_logits = self.confidence_head(hidden, self.head.prev_embedding(prev))
        return BlockOutput(base + self.head.block_bias(prev, hidden).to(base.dtype), confidence_logits)

    @torch.inference_mode()
    def draft(self, context_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """One parallel block forward at the anchor (the last of `context_ids`, every token so
        far), then the head's left-to-right sampling loop over gamma slots."""
        drafter_round(self.context_length, context_ids, gamma, self.gamma, type(self).__name__)
        hidden = self.next_block_hidden(context_ids)[:gamma]  # [gamma, H]
        draft = sample_chain(self.head, self.logits_from_hidden(hidden), hidden, context_ids[-1],
                             temperature, generator)
        if self.confidence_head is not None:
            prev = torch.cat([context_ids[-1:].to(draft.tokens.device), draft.tokens[:-1]])
            draft.confidence_logits = self.confidence_logits(hidden, prev)
        return draft


# --- checks (this module's door)


def _one_of(value: str, choices: tuple[str, ...], what: str) -> None:
    """ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(choices)}")


def _confidence_head(head: nn.Module | None) -> None:
    """ValueError when a DSpark drafter without a confidence head is asked for confidences."""
    if head is None:
        raise ValueError("this DSpark drafter has no confidence head; build it with confidence_head=True "
                         "or call add_confidence_head()")


def _same_shapes(ours: dict[str, torch.Size], theirs: dict[str, torch.Size], what: str) -> None:
    """ValueError unless two state_dicts' key -> shape maps agree; names the first keys that differ."""
    if ours != theirs:
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        raise ValueError(f"{what}: keys {differ[:4]} differ in name or shape")
