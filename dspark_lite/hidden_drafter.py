"""What the drafters that read the target's hidden states share (chapter 03, paper section
2.2): the context projection of Eq. 2, H_ctx = RMSNorm(W_c [H(l_1); ...; H(l_m)]) (its `fc`;
the norm is DFlash's `hidden_norm`), the target's frozen embedding and LM head, the draft
layers' Qwen3 config and initialisation, the training interface (`AnchorBatch` in,
`BlockOutput` out), and the Drafter protocol's invariants these drafters check at their doors
(`drafter_started`, `accepted_rows`, `anchor_positions`, and `drafter_round`: the context a
drafter holds is as long as the anchor's position).

Both drafters share the target's FROZEN embedding and LM head: they hold references to the
target's modules (not copies), which are neither registered as drafter parameters nor saved
in the drafter's state_dict. Module names follow DeepSpec (deepseek-ai/DeepSpec,
deepspec/modeling/dspark/qwen3/modeling.py and deepspec/modeling/eagle3/qwen3/modeling.py),
so that their released weights load into ours once `embed_tokens.*` and `lm_head.*` (the
target's copies) are dropped from the checkpoint.

The two drafters built on `HiddenStateDrafter`: `dflash.DFlashDrafter` (the parallel
backbone, Eq. 2-3) and `eagle.EagleDrafter` (the EAGLE-3 style autoregressive baseline).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

from . import checks
from .attention import RMSNorm
from .sampling import gumbel_perturbed, probs_from_logits
from .speculative import Draft


@dataclass
class AnchorBatch:
    """What a drafter's `train_logits` reads.

    input_ids [B, T]: target-generated sequences (right-padded); target_hidden [B, T, m * H]:
    the target's selected layers on them (or None for a drafter without target_layer_ids);
    anchor_pos [B, A]: anchor positions. Slot k of the block at anchor p predicts
    input_ids[p + k]; the drafter may only read context positions < p (and, for the
    teacher-forced prefix of a sequential head, the tokens input_ids[p .. p + k - 1]).
    """

    input_ids: Tensor
    target_hidden: Tensor | None
    anchor_pos: Tensor


@dataclass
class BlockOutput:
    """A drafter's training output: logits [B, A, gamma, V] and optionally the confidence
    head's logits [B, A, gamma], trained against 1 - TV."""

    logits: Tensor
    confidence_logits: Tensor | None = None


def draft_qwen3_config(target_config, num_layers: int, intermediate_size: int | None,
                       num_heads: int | None, num_kv_heads: int | None, head_dim: int | None):
    """The drafter's Qwen3Config: a copy of the target's with the drafter's overrides
    (DeepSpec builds its draft config the same way). The hidden size stays the target's."""
    config = copy.deepcopy(target_config)
    config.num_hidden_layers = checks.positive_int(num_layers, "num_layers")
    config.layer_types = ["full_attention"] * num_layers
    overrides = {"intermediate_size": intermediate_size, "num_attention_heads": num_heads,
                 "num_key_value_heads": num_kv_heads, "head_dim": head_dim}
    for name, value in overrides.items():
        if value is not None:
            setattr(config, name, checks.positive_int(value, name))
    _head_counts(config.num_attention_heads, config.num_key_value_heads)
    return config


@dataclass
class SharedTargetWeights:
    """References to the target's embedding and LM head. A plain dataclass, not an nn.Module,
    so the drafter neither registers, trains nor saves them; weights are detached on use, so
    no gradient ever reaches the target."""

    embed_tokens: nn.Module
    lm_head: nn.Module

    @classmethod
    def of(cls, target: PreTrainedModel) -> "SharedTargetWeights":
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        _shareable(embed, head)
        return cls(embed, head)

    def embed(self, token_ids: Tensor, dtype: torch.dtype) -> Tensor:
        return F.embedding(token_ids, self.embed_tokens.weight.detach()).to(dtype)

    def logits(self, hidden: Tensor) -> Tensor:
        weight = self.lm_head.weight.detach()
        return F.linear(hidden.to(weight.dtype), weight)


def init_linear_weights(module: nn.Module, std: float, seed: int) -> None:
    """Normal(0, std) linear weights and zero biases, as transformers initialises Qwen3."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.Linear):
                sub.weight.copy_(torch.randn(sub.weight.shape, generator=generator) * std)
                if sub.bias is not None:
                    sub.bias.zero_()


def sample_slots(logits: Tensor, temperature: float, generator: torch.Generator | None) -> Draft:
    """Sample each slot of `logits` [gamma, V] independently from softmax(logits / T)
    (argmax at T = 0); the Draft holds the exact float32 distributions."""
    tokens = gumbel_perturbed(logits, temperature, generator).argmax(-1)
    return Draft(tokens, probs_from_logits(logits, temperature))


@dataclass(frozen=True)
class DrafterConfig:
    """The one config of every drafter (DFlash, DSpark and the EAGLE-style baseline), as
    nanoGPT's GPTConfig: the target supplies the rest (hidden size, vocabulary, RMSNorm eps, RoPE).

    target_layer_ids: 0-based target decoder layers whose outputs form the context
        (`speculative` hidden-state convention); strictly increasing.
    gamma: the block the drafter is trained on, the paper's gamma: DFlash and DSpark predict
        gamma slots in one forward (the anchor + gamma - 1 masks), the EAGLE-style drafter
        unrolls gamma steps in training; a round may draft fewer.
    num_layers: draft decoder layers. Heads, head_dim and MLP width default to the target's (None).
    mask_token_id: DFlash and DSpark: the token that fills block slots 2..gamma.
    head_type / head_rank / confidence_head: DSpark: "markov" (Eq. 5) or "rnn" (Eq. 6); r, the
        width of W1 / W2 (and the RNN state; 256 for Qwen3-4B); the confidence head of Eq. 7.
    own_embeddings: the EAGLE-style drafter holds its own frozen copies of the target's embedding
        and LM head (as DeepSpec's Qwen3Eagle3Model) instead of sharing the target's.
    """

    target_layer_ids: tuple[int, ...]
    gamma: int = 8
    mask_token_id: int | None = None
    num_layers: int = 1
    intermediate_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    head_type: str = "markov"
    head_rank: int = 64
    confidence_head: bool = False
    own_embeddings: bool = False


class HiddenStateDrafter(nn.Module):
    """What both drafters share: the target's frozen embedding and LM head, the context
    projection `fc` (no bias), the final `norm`, RoPE, and the protocol's `vocab_size` /
    `target_layer_ids` / `gamma` attributes. `gamma` is the block the drafter was trained on;
    a round may draft fewer."""

    def __init__(self, target: PreTrainedModel, cfg: DrafterConfig) -> None:
        super().__init__()
        config = draft_qwen3_config(target.config, cfg.num_layers, cfg.intermediate_size, cfg.num_heads,
                                    cfg.num_kv_heads, cfg.head_dim)
        self.cfg = cfg
        self.gamma = checks.positive_int(cfg.gamma, "gamma")
        self.target_layer_ids = checks.layer_ids(cfg.target_layer_ids, target.config.num_hidden_layers)
        self.vocab_size: int = int(target.config.vocab_size)
        self.hidden_size = int(target.config.hidden_size)
        self.layer_config = config
        self.shared = SharedTargetWeights.of(target)
        self.fc = nn.Linear(len(self.target_layer_ids) * self.hidden_size, self.hidden_size, bias=False)
        self.norm = RMSNorm(self.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def embed(self, token_ids: Tensor) -> Tensor:
        """The target's (frozen) token embedding, in the drafter's dtype."""
        return self.shared.embed(token_ids.to(self.device), self.dtype)

    def logits_from_hidden(self, hidden: Tensor) -> Tensor:
        """Logits of final-normed hidden states through the target's (frozen) LM head."""
        return self.shared.logits(hidden)

    def checked_hidden(self, target_hidden: Tensor | None, axes: int) -> Tensor:
        """`target_hidden` [..., m * H] with `axes` axes, checked, on the drafter's device and dtype."""
        _target_hidden(target_hidden, axes, len(self.target_layer_ids) * self.hidden_size)
        return target_hidden.to(self.device, self.dtype)

    def finish_init(self, seed: int) -> None:
        """Initialise every linear layer from `seed`, move to the target's device, evaluation mode."""
        init_linear_weights(self, float(getattr(self.layer_config, "initializer_range", 0.02)), seed)
        self.to(self.shared.embed_tokens.weight.device)
        self.eval()


# --- checks (this module's door)


def _head_counts(num_heads: int, num_kv_heads: int) -> None:
    """ValueError unless the query heads split evenly over the key/value heads (grouped-query)."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")


def _shareable(embed: nn.Module | None, lm_head: nn.Module | None) -> None:
    """ValueError unless the target has an input embedding and an LM head for a drafter to share."""
    if embed is None or lm_head is None:
        raise ValueError("the target must expose an input embedding and an LM head to share")


def _target_hidden(hidden: Tensor | None, axes: int, width: int) -> None:
    """ValueError unless the target's selected hidden states have `axes` axes, the last `width`
    (= len(target_layer_ids) * hidden_size)."""
    if hidden is None or hidden.dim() != axes or hidden.shape[-1] != width:
        shape = None if hidden is None else tuple(hidden.shape)
        raise ValueError(f"target hidden states must have {axes} axes ending in len(target_layer_ids) * "
                         f"hidden_size = {width}, got {shape}")


# --- the Drafter protocol's invariants, checked by the drafters' `accept`, `draft` and training
# forwards (dflash.py, eagle.py, dspark.py)


def anchor_positions(anchors: Tensor, low: int, high: int, who: str) -> None:
    """ValueError unless every anchor position lies in [low, high]."""
    if bool((anchors < low).any()) or bool((anchors > high).any()):
        raise ValueError(f"anchor_pos must lie in [{low}, {high}] for {who}, got {anchors.tolist()}")


def drafter_started(context_length: int | None, who: str) -> None:
    """ValueError when a drafter is used before `start` (it then holds no context: None)."""
    if context_length is None:
        raise ValueError(f"{who} used before start(); call start(prompt_ids, target_hidden) first")


def drafter_round(context_length: int | None, context_ids: Tensor, gamma: int, block_gamma: int | None,
                  who: str) -> None:
    """ValueError unless the drafter was started, holds context for every position before the
    anchor (the last of `context_ids`), and 1 <= gamma (<= the gamma of its block, when it drafts
    in blocks)."""
    drafter_started(context_length, who)
    if block_gamma is None:
        checks.positive_int(gamma, "gamma")
    elif not 1 <= gamma <= block_gamma:
        raise ValueError(f"gamma must be in [1, {block_gamma}] for this drafter (the block it was built with), "
                         f"got {gamma}")
    anchor_position = context_ids.shape[0] - 1
    if context_length != anchor_position:
        raise ValueError(f"the drafter holds context for {context_length} positions but the anchor sits at "
                         f"position {anchor_position}; expected equal (did the loop skip accept()?)")


def accepted_rows(n_accepted: int, rows: int) -> None:
    """ValueError unless `accept` got hidden states for the anchor and each accepted draft."""
    if rows != n_accepted + 1:
        raise ValueError(f"expected hidden states for n_accepted + 1 = {n_accepted + 1} positions, got {rows}")
