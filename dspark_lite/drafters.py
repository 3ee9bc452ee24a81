"""Drafters that read the target's hidden states (chapter 03).

Two drafters implement the `speculative.Drafter` protocol:

* `DFlashDrafter`, the parallel backbone (paper section 2.2) with DSpark's anchor-first
  change: the block is the anchor followed by gamma - 1 mask tokens, and ONE forward pass
  gives gamma base logits; slot k (k = 1..gamma) predicts the token at position p + k,
  where p is the anchor's position. Context features H_ctx = RMSNorm(W_c [H(l_1); ...])
  (Eq. 2) are injected into every draft layer as extra keys and values (Eq. 3).
* `EagleDrafter`, the EAGLE-3 style autoregressive baseline: it fuses the target's features
  with the embedding of the next token, drafts token by token (up to gamma passes), feeding
  its own hidden state back in place of the target's features beyond the anchor; given end
  ids it stops the chain at the first one it drafts, as DeepSpec's Eagle3 evaluator does.

Both share the target's FROZEN embedding and LM head: they hold references to the target's
modules (not copies), which are neither registered as drafter parameters nor saved in the
drafter's state_dict. Module names follow DeepSpec (deepseek-ai/DeepSpec,
deepspec/modeling/dspark/qwen3/modeling.py and deepspec/modeling/eagle3/qwen3/modeling.py)
so that their released weights load into ours once `embed_tokens.*` and `lm_head.*` (the
target's copies) are dropped from the checkpoint. An EagleDrafter built with
`EagleConfig(own_embeddings=True)` holds its own frozen `embed_tokens` and `lm_head` instead,
DeepSpec's Qwen3Eagle3Model layout key for key (chapter 07 loads a released Eagle3 that way
when asked to use the checkpoint's copies).

Training goes through `train_logits(AnchorBatch)` (used by `training.train_drafter`):
a batch of sequences, their target hidden states and a set of anchor positions per
sequence in, block logits [B, A, gamma, V] out.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm, Qwen3RotaryEmbedding

from .sampling import gumbel_perturbed, probs_from_logits
from .speculative import Draft, end_ids as as_end_ids

KVPair = tuple[Tensor, Tensor]


# ----------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DFlashConfig:
    """The parallel drafter's shape (chapter 03).

    target_layer_ids: 0-based target decoder layers whose outputs form the context
        (`speculative` hidden-state convention); strictly increasing.
    mask_token_id: the token that fills block slots 2..gamma (the tokenizer's mask token).
    block_size: gamma, the number of slots one forward predicts (anchor + gamma - 1 masks).
    num_layers: draft decoder layers. The hidden size is the target's (shared embedding and
        LM head); heads, head_dim and MLP width default to the target's (None).
    """

    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    block_size: int = 8
    num_layers: int = 1
    intermediate_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None


@dataclass(frozen=True)
class EagleConfig:
    """The EAGLE-3 style baseline's shape (chapter 03).

    ttt_length: the training-time-test horizon, gamma steps unrolled during training (the
        drafter can still draft any number of tokens at inference).
    own_embeddings: hold an own frozen token embedding and full-vocabulary LM head
        (`embed_tokens`, `lm_head`: copies of the target's at construction, in the state_dict,
        as in DeepSpec's Qwen3Eagle3Model) instead of sharing the target's (False, the toy world).
    Other fields as in `DFlashConfig`.
    """

    target_layer_ids: tuple[int, ...]
    ttt_length: int = 8
    num_layers: int = 1
    intermediate_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    own_embeddings: bool = False


@dataclass
class AnchorBatch:
    """What a drafter's `train_logits` reads (chapter 03).

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
    """A drafter's training output (chapter 03): logits [B, A, gamma, V] and optionally the
    confidence head's logits [B, A, gamma] (chapter 04), trained against 1 - TV."""

    logits: Tensor
    confidence_logits: Tensor | None = None


# ----------------------------------------------------------------------------------------
# Validation and shared pieces
# ----------------------------------------------------------------------------------------


def check_target_layer_ids(layer_ids: Sequence[int], num_target_layers: int) -> tuple[int, ...]:
    """Return `layer_ids` as a tuple, or raise ValueError unless they are non-empty, strictly
    increasing, 0-based ids of the target's decoder layers (chapter 03)."""
    ids = tuple(int(i) for i in layer_ids)
    if not ids:
        raise ValueError("target_layer_ids is empty; expected at least one target decoder layer id")
    out_of_range = [i for i in ids if not 0 <= i < num_target_layers]
    if out_of_range:
        raise ValueError(
            f"target_layer_ids {ids}: {out_of_range} out of range for a target with "
            f"{num_target_layers} decoder layers; expected 0-based ids in [0, {num_target_layers - 1}]"
        )
    if any(b <= a for a, b in zip(ids, ids[1:])):
        raise ValueError(f"target_layer_ids {ids} must be strictly increasing (DeepSpec's convention)")
    return ids


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def draft_qwen3_config(target_config, num_layers: int, intermediate_size: int | None,
                       num_heads: int | None, num_kv_heads: int | None, head_dim: int | None):
    """The drafter's Qwen3Config: a copy of the target's with the drafter's overrides
    (DeepSpec builds its draft config the same way). The hidden size stays the target's."""
    _check_positive("num_layers", num_layers)
    config = copy.deepcopy(target_config)
    config.num_hidden_layers = num_layers
    config.layer_types = ["full_attention"] * num_layers
    overrides = {"intermediate_size": intermediate_size, "num_attention_heads": num_heads,
                 "num_key_value_heads": num_kv_heads, "head_dim": head_dim}
    for name, value in overrides.items():
        if value is not None:
            _check_positive(name, value)
            setattr(config, name, value)
    if config.num_attention_heads % config.num_key_value_heads:
        raise ValueError(
            f"num_heads {config.num_attention_heads} must be a multiple of num_kv_heads {config.num_key_value_heads}"
        )
    return config


@dataclass
class SharedTargetWeights:
    """References to the target's embedding and LM head (chapter 03). A plain dataclass, not
    an nn.Module, so the drafter neither registers, trains nor saves them; weights are
    detached on use, so no gradient ever reaches the target."""

    embed_tokens: nn.Module
    lm_head: nn.Module

    @classmethod
    def of(cls, target: PreTrainedModel) -> "SharedTargetWeights":
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        if embed is None or head is None:
            raise ValueError("the target must expose an input embedding and an LM head to share")
        return cls(embed, head)

    def embed(self, token_ids: Tensor, dtype: torch.dtype) -> Tensor:
        return F.embedding(token_ids, self.embed_tokens.weight.detach()).to(dtype)

    def logits(self, hidden: Tensor) -> Tensor:
        weight = self.lm_head.weight.detach()
        return F.linear(hidden.to(weight.dtype), weight)


class RMSNorm(Qwen3RMSNorm):
    """Qwen3's RMSNorm (statistics in float32, cast back to the input's dtype, then scaled by
    the weight) through torch's `F.rms_norm`: the same weights and maths in one call instead
    of six elementwise ones. A toy drafter's time goes mostly to per-call overhead, not to
    arithmetic; on a 2-core CPU this norm takes about 40% less time."""

    def forward(self, hidden_states: Tensor) -> Tensor:
        normed = F.rms_norm(hidden_states.float(), hidden_states.shape[-1:], eps=self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE on x [B, heads, L, D] with cos/sin [B, L, D] (the half-split convention of Qwen3)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


def attend(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None) -> Tensor:
    """Scaled dot-product attention, q [B, Hq, Q, D], k/v [B, Hkv, K, D] (grouped-query:
    each key head serves Hq / Hkv query heads), `allowed` [B, Q, K] bool (True = may
    attend) or None for full attention. Returns [B, Hq, Q, D]."""
    mask = None if allowed is None else allowed[:, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=q.shape[1] != k.shape[1])


class DraftAttention(nn.Module):
    """Qwen3-style attention (q/k RMSNorm per head, RoPE, grouped-query) whose keys and
    values are the cached `past` ones followed by the new positions' own (chapter 03).
    Parameter names match DeepSpec: q_proj, k_proj, v_proj, o_proj, q_norm, k_norm."""

    def __init__(self, input_size: int, config) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        bias = bool(getattr(config, "attention_bias", False))
        self.q_proj = nn.Linear(input_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(input_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(input_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def _heads(self, x: Tensor, n_heads: int) -> Tensor:
        return x.view(*x.shape[:2], n_heads, self.head_dim)

    def project_kv(self, x: Tensor, cos: Tensor, sin: Tensor) -> KVPair:
        """Keys (normed, rotated) and values [B, Hkv, L, D] of inputs x [B, L, input_size]."""
        k = self.k_norm(self._heads(self.k_proj(x), self.num_kv_heads)).transpose(1, 2)
        v = self._heads(self.v_proj(x), self.num_kv_heads).transpose(1, 2)
        return rotate_pairs(k, cos, sin), v

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past: KVPair | None,
                allowed: Tensor | None, fresh: Tensor | None = None) -> tuple[Tensor, KVPair]:
        """Queries from x [B, Q, input_size] over keys [past; fresh; x]; returns the output
        [B, Q, hidden] and the (k, v) of [fresh; x] for the caller to cache. `fresh`
        [B, F, input_size] (inference, chapter 03) are context rows not yet cached: keys and
        values only, projected in the same call as x's; cos/sin then cover the F + Q positions."""
        n_fresh = 0 if fresh is None else fresh.shape[1]
        q = self.q_norm(self._heads(self.q_proj(x), self.num_heads)).transpose(1, 2)
        q = rotate_pairs(q, cos[:, n_fresh:], sin[:, n_fresh:])
        own = self.project_kv(x if fresh is None else torch.cat([fresh, x], 1), cos, sin)
        k, v = own if past is None else (torch.cat([past[0], own[0]], 2), torch.cat([past[1], own[1]], 2))
        out = attend(q, k, v, allowed).transpose(1, 2).reshape(*x.shape[:2], -1)
        return self.o_proj(out), own


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
    (argmax at T = 0); the Draft holds the exact float32 distributions (chapter 03)."""
    tokens = gumbel_perturbed(logits, temperature, generator).argmax(-1)
    return Draft(tokens, probs_from_logits(logits, temperature))


class HiddenStateDrafter(nn.Module):
    """What both drafters share (chapter 03): the target's frozen embedding and LM head,
    the context projection `fc` (no bias), the final `norm`, RoPE, and the protocol's
    `vocab_size` / `target_layer_ids` / `block_size` attributes."""

    def __init__(self, target: PreTrainedModel, cfg: "DFlashConfig | EagleConfig", block_size: int) -> None:
        super().__init__()
        config = draft_qwen3_config(target.config, cfg.num_layers, cfg.intermediate_size, cfg.num_heads,
                                    cfg.num_kv_heads, cfg.head_dim)
        _check_positive("gamma (block size)", block_size)
        self.target_layer_ids = check_target_layer_ids(cfg.target_layer_ids, target.config.num_hidden_layers)
        self.vocab_size: int = int(target.config.vocab_size)
        self.block_size = int(block_size)
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

    def _check_hidden(self, target_hidden: Tensor | None, leading: int) -> Tensor:
        width = len(self.target_layer_ids) * self.hidden_size
        if target_hidden is None or target_hidden.dim() != leading + 1 or target_hidden.shape[-1] != width:
            shape = None if target_hidden is None else tuple(target_hidden.shape)
            raise ValueError(
                f"target hidden states must have {leading + 1} axes ending in len(target_layer_ids) * "
                f"hidden_size = {width}, got {shape}"
            )
        return target_hidden.to(self.device, self.dtype)

    def _finish_init(self, seed: int) -> None:
        init_linear_weights(self, float(getattr(self.layer_config, "initializer_range", 0.02)), seed)
        target_device = self.shared.embed_tokens.weight.device
        self.to(target_device)
        self.eval()


def _anchor_shapes(block: Tensor, anchor_pos: Tensor) -> tuple[Tensor, Tensor, bool]:
    """Accept [B, G] with [B] (one anchor per row) or [B, A, G] with [B, A]; return the
    [B, A, G] / [B, A] forms and whether the input had a single anchor per row."""
    single = block.dim() == 2
    if single:
        block, anchor_pos = block[:, None], anchor_pos[:, None]
    if block.dim() != 3 or anchor_pos.shape != block.shape[:2]:
        raise ValueError(
            f"block ids must be [B, gamma] with anchor_pos [B], or [B, A, gamma] with [B, A]; got "
            f"{tuple(block.shape)} and {tuple(anchor_pos.shape)}"
        )
    return block, anchor_pos.long(), single


# ----------------------------------------------------------------------------------------
# DFlash: the parallel block drafter
# ----------------------------------------------------------------------------------------


class DFlashDecoderLayer(nn.Module):
    """One draft layer (chapter 03): pre-norm attention whose keys/values are
    [W_K H_ctx ; W_K H_block] (Eq. 3; the context is already normed by `hidden_norm`),
    then a SwiGLU MLP. Names as DeepSpec's Qwen3DSparkDecoderLayer."""

    def __init__(self, config) -> None:
        super().__init__()
        self.self_attn = DraftAttention(config.hidden_size, config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, context_kv: KVPair, allowed: Tensor | None,
                fresh: Tensor | None = None) -> tuple[Tensor, KVPair]:
        """The block's output and the keys/values of [fresh; block] (see DraftAttention)."""
        attended, own = self.self_attn(self.input_layernorm(x), cos, sin, context_kv, allowed, fresh)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), own


class DFlashDrafter(HiddenStateDrafter):
    """The parallel block drafter with DSpark's anchor-first block (chapter 03).

    The block at anchor position p holds the anchor and block_size - 1 mask tokens at
    positions p..p+block_size-1; it attends bidirectionally to itself and to every context
    position < p (RoPE positions 0..p-1). One forward gives block_size base logits; slot k
    predicts the token at p + k. `draft` runs the full trained block and returns its first
    gamma <= block_size slots, each sampled independently.

    state_dict keys (DeepSpec's): fc, hidden_norm, layers.N.{input_layernorm,
    post_attention_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
    mlp.{gate,up,down}_proj}, norm.
    """

    def __init__(self, target: PreTrainedModel, cfg: DFlashConfig, seed: int = 0) -> None:
        super().__init__(target, cfg, cfg.block_size)
        if not 0 <= cfg.mask_token_id < self.vocab_size:
            raise ValueError(
                f"mask_token_id {cfg.mask_token_id} is outside the target's vocabulary [0, {self.vocab_size})"
            )
        self.cfg = cfg
        self.mask_token_id = int(cfg.mask_token_id)
        self.hidden_norm = RMSNorm(self.hidden_size, eps=self.layer_config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashDecoderLayer(self.layer_config) for _ in range(cfg.num_layers))
        self._finish_init(seed)
        # Inference state: each layer's cached context keys/values, and the target hidden
        # states accepted since the last draft (projected inside the next draft's forward).
        self._context_kv: list[KVPair] | None = None
        self._pending: Tensor | None = None

    # -- the backbone -------------------------------------------------------------------

    def context_features(self, target_hidden: Tensor) -> Tensor:
        """H_ctx = RMSNorm(W_c [H(l_1); ...; H(l_m)]) (Eq. 2), [..., T, hidden]."""
        return self.hidden_norm(self.fc(target_hidden))

    def _context_kv_of(self, target_hidden: Tensor, positions: Tensor) -> list[KVPair]:
        """Each layer's context keys/values [B, Hkv, T, D] for hidden [B, T, m*H] at positions [B, T]."""
        context = self.context_features(target_hidden)
        cos, sin = self.rotary_emb(context, positions)
        return [layer.self_attn.project_kv(context, cos, sin) for layer in self.layers]

    def _run_block(self, block_ids: Tensor, positions: Tensor, context_kv: list[KVPair],
                   allowed: Tensor | None) -> Tensor:
        x = self.embed(block_ids)
        cos, sin = self.rotary_emb(x, positions)
        for layer, kv in zip(self.layers, context_kv):
            x, _ = layer(x, cos, sin, kv, allowed)
        return self.norm(x)

    def make_block_ids(self, anchor_ids: Tensor, block_size: int | None = None) -> Tensor:
        """[..., block_size] blocks: each anchor id followed by block_size - 1 mask ids."""
        size = self.block_size if block_size is None else block_size
        masks = torch.full((*anchor_ids.shape, size - 1), self.mask_token_id, dtype=torch.long,
                           device=anchor_ids.device)
        return torch.cat([anchor_ids.long()[..., None], masks], dim=-1)

    def block_hidden(self, context_hidden: Tensor, block_ids: Tensor, anchor_pos: Tensor) -> Tensor:
        """Final-normed hidden states of blocks (chapter 03), for a batch of anchors.

        context_hidden [B, T, m*H]: the target's selected layers at positions 0..T-1.
        block_ids [B, G] with anchor_pos [B] (or [B, A, G] with [B, A]: A anchors per row).
        Block b (a) sits at positions anchor_pos..anchor_pos+G-1 and sees only context
        positions < anchor_pos and its own block. Returns [B, G, H] (or [B, A, G, H]).
        """
        hidden = self._check_hidden(context_hidden, 2)
        blocks, anchors, single = _anchor_shapes(block_ids.to(self.device), anchor_pos.to(self.device))
        batch, n_anchors, size = blocks.shape
        length = hidden.shape[1]
        if bool((anchors < 0).any()) or bool((anchors > length).any()):
            raise ValueError(f"anchor_pos must lie in [0, {length}] (the context length), got {anchors.tolist()}")
        context_positions = torch.arange(length, device=self.device).expand(batch, -1)
        offsets = torch.arange(size, device=self.device)
        block_positions = (anchors[..., None] + offsets).reshape(batch, n_anchors * size)
        allowed = self._block_mask(anchors, length, size)
        out = self._run_block(blocks.reshape(batch, -1), block_positions,
                              self._context_kv_of(hidden, context_positions), allowed)
        out = out.reshape(batch, n_anchors, size, -1)
        return out[:, 0] if single else out

    @staticmethod
    def _block_mask(anchors: Tensor, length: int, size: int) -> Tensor:
        """[B, A*G, T + A*G]: a query of block a sees context j < anchor_a and block a only."""
        batch, n_anchors = anchors.shape
        query_anchor = anchors.repeat_interleave(size, dim=1)
        sees_context = torch.arange(length, device=anchors.device) < query_anchor[..., None]
        block_of = torch.arange(n_anchors * size, device=anchors.device) // size
        sees_block = (block_of[:, None] == block_of[None, :]).expand(batch, -1, -1)
        return torch.cat([sees_context, sees_block], dim=-1)

    def block_logits(self, context_hidden: Tensor, block_ids: Tensor, anchor_pos: Tensor) -> Tensor:
        """Base logits [B, G, V] (or [B, A, G, V]) of `block_hidden` (chapter 03); slot k
        predicts the token at anchor_pos + k."""
        return self.logits_from_hidden(self.block_hidden(context_hidden, block_ids, anchor_pos))

    def train_logits(self, batch: AnchorBatch) -> BlockOutput:
        """Training forward for `training.train_drafter` (chapter 03): one block per anchor."""
        anchor_ids = batch.input_ids.to(self.device).gather(1, batch.anchor_pos.to(self.device))
        return BlockOutput(self.block_logits(batch.target_hidden, self.make_block_ids(anchor_ids), batch.anchor_pos))

    # -- the Drafter protocol -----------------------------------------------------------

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None) -> None:
        """Take the prompt's target hidden states; the first draft projects them into every
        layer's context keys/values, in the same forward as its block."""
        hidden = self._check_hidden(target_hidden, 1)
        empty = hidden.new_zeros(1, self.layer_config.num_key_value_heads, 0, self.layer_config.head_dim)
        self._context_kv = [(empty, empty) for _ in self.layers]
        self._pending = hidden

    @torch.inference_mode()
    def draft(self, anchor_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Run one block at the anchor (the last of `anchor_ids`) and sample its first gamma slots."""
        hidden = self.anchor_block_hidden(anchor_ids, gamma)
        return sample_slots(self.logits_from_hidden(hidden[:gamma]), temperature, generator)

    def anchor_block_hidden(self, anchor_ids: Tensor, gamma: int) -> Tensor:
        """Final-normed hidden states [block_size, H] of the block at the anchor (the last of
        `anchor_ids`) over the context; checks that the drafter is in step with the loop.

        The context accepted since the last call is projected to keys/values in the same
        forward (each layer's key/value projection runs once over [new context; block]), and
        cached for the next call: the block equals `block_hidden` over the whole context."""
        self._check_ready(anchor_ids, gamma)
        fresh = self._pending
        anchor_position = anchor_ids.shape[0] - 1
        positions = torch.arange(anchor_position - fresh.shape[0], anchor_position + self.block_size,
                                 device=self.device)
        x = self.embed(self.make_block_ids(anchor_ids[-1:].to(self.device)))
        features = self.context_features(fresh[None])
        cos, sin = self.rotary_emb(x, positions[None])
        n_fresh, cache = fresh.shape[0], []
        for layer, (k, v) in zip(self.layers, self._context_kv):
            x, (own_k, own_v) = layer(x, cos, sin, (k, v), None, features)
            cache.append((torch.cat([k, own_k[:, :, :n_fresh]], 2), torch.cat([v, own_v[:, :, :n_fresh]], 2)))
        self._context_kv, self._pending = cache, fresh[:0]
        return self.norm(x)[0]

    @property
    def _context_length(self) -> int:
        """Context positions the drafter holds, cached or pending."""
        return self._context_kv[0][0].shape[2] + self._pending.shape[0]

    def _check_ready(self, anchor_ids: Tensor, gamma: int) -> None:
        if self._context_kv is None:
            raise ValueError("DFlashDrafter.draft called before start(); call start(prompt_ids, target_hidden)")
        if not 1 <= gamma <= self.block_size:
            raise ValueError(f"gamma must be in [1, block_size = {self.block_size}] for this drafter, got {gamma}")
        if anchor_ids.shape[0] - 1 != self._context_length:
            raise ValueError(
                f"the drafter holds context for {self._context_length} positions but the anchor sits at "
                f"position {anchor_ids.shape[0] - 1}; expected equal (did the loop skip accept()?)"
            )

    @torch.inference_mode()
    def accept(self, n_accepted: int, new_target_hidden: Tensor | None) -> None:
        """Queue the anchor's and the accepted drafts' hidden states for the next draft."""
        if self._context_kv is None:
            raise ValueError("DFlashDrafter.accept called before start(); call start(prompt_ids, target_hidden)")
        hidden = self._check_hidden(new_target_hidden, 1)
        if hidden.shape[0] != n_accepted + 1:
            raise ValueError(f"expected hidden states for n_accepted + 1 = {n_accepted + 1} positions, got {hidden.shape[0]}")
        self._pending = torch.cat([self._pending, hidden])


# ----------------------------------------------------------------------------------------
# EAGLE-3 style autoregressive baseline
# ----------------------------------------------------------------------------------------


class EagleDecoderLayer(nn.Module):
    """One EAGLE-3 layer (chapter 03): attention over cat(RMSNorm(token embedding),
    RMSNorm(feature)) (2H inputs), the feature as the residual stream, then a SwiGLU MLP.
    Names as DeepSpec's Qwen3Eagle3DecoderLayer (hidden_norm lives in the layer)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.self_attn = DraftAttention(2 * config.hidden_size, config)
        self.mlp = Qwen3MLP(config)
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, embeds: Tensor, hidden: Tensor, cos: Tensor, sin: Tensor, past: KVPair | None,
                allowed: Tensor | None) -> tuple[Tensor, KVPair]:
        fused = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        attended, own_kv = self.self_attn(fused, cos, sin, past, allowed)
        hidden = hidden + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), own_kv


class EagleDrafter(HiddenStateDrafter):
    """EAGLE-3 style autoregressive drafter, the baseline (chapter 03).

    Entry t pairs a feature with the NEXT token: (g_t, x_{t+1}). For the target's committed
    positions t < p (p = the anchor's position) g_t = fc(target layers at t); these entries
    attend causally to each other and are cached. Draft step 1 is the entry (g_{p-1}, x_p):
    its output h_1 gives the logits of x_{p+1}. Step k >= 2 appends the entry (h_{k-1},
    x_{p+k-1}) at position p+k-2 (the drafter's own hidden state in place of the target's
    features, its own sampled token) that sees all cached entries and the earlier steps.
    Training unrolls `ttt_length` steps the same way (training-time test) with the true
    tokens and the drafter's own hidden states.

    Early stop (`end_ids`, empty by default): the chain stops after the first drafted token
    that is an end id, which stays in the draft, so a draft may hold fewer than gamma tokens;
    the engine verifies what was drafted (`speculative.speculative_generate`). That is the
    chain of DeepSpec's deepspec/eval/eagle3/evaluator.py, `Qwen3Eagle3Evaluator._propose`:
    `for _ in range(ttt_length)`: logits, sample, append, `if has_stop_token(...): break`.
    The end ids are the drafter's (set at construction or later through `end_ids`), not passed
    per call, so the Drafter protocol, every other drafter and the toy chapters are unchanged;
    a chapter that stops generation at end ids gives the drafter the same ones (DeepSpec uses
    the target's generation-config end ids for both).

    state_dict keys (DeepSpec's Qwen3Eagle3Model): fc, layers.N.{hidden_norm, input_layernorm,
    post_attention_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
    mlp.{gate,up,down}_proj}, norm; with `EagleConfig.own_embeddings` also embed_tokens and
    lm_head (frozen, full vocabulary).
    """

    def __init__(self, target: PreTrainedModel, cfg: EagleConfig, seed: int = 0,
                 end_ids: int | Sequence[int] | None = None) -> None:
        super().__init__(target, cfg, cfg.ttt_length)
        self.cfg = cfg
        self.layers = nn.ModuleList(EagleDecoderLayer(self.layer_config) for _ in range(cfg.num_layers))
        if cfg.own_embeddings:
            self.embed_tokens = nn.Embedding(self.vocab_size, self.hidden_size)
            self.lm_head = nn.Linear(self.hidden_size, self.vocab_size, bias=False)
        self._finish_init(seed)
        if cfg.own_embeddings:  # copies of the target's, frozen (DeepSpec's trainer freezes them too)
            with torch.no_grad():
                self.embed_tokens.weight.copy_(self.shared.embed_tokens.weight)
                self.lm_head.weight.copy_(self.shared.lm_head.weight)
            self.embed_tokens.requires_grad_(False)
            self.lm_head.requires_grad_(False)
        self.end_ids = end_ids
        self._entry_kv: list[KVPair] | None = None
        self._pending: Tensor | None = None
        self._num_entries = 0

    @property
    def end_ids(self) -> tuple[int, ...]:
        """The ids that stop a draft's chain (the stopping id is kept); () never stops early."""
        return self._end_ids

    @end_ids.setter
    def end_ids(self, ids: int | Sequence[int] | None) -> None:
        self._end_ids = () if isinstance(ids, (tuple, list)) and not ids else as_end_ids(ids)

    def embed(self, token_ids: Tensor) -> Tensor:
        """The token embedding in the drafter's dtype: its own with `own_embeddings`, else the target's."""
        if not self.cfg.own_embeddings:
            return super().embed(token_ids)
        return F.embedding(token_ids.to(self.device), self.embed_tokens.weight).to(self.dtype)

    def logits_from_hidden(self, hidden: Tensor) -> Tensor:
        """Logits of final-normed hidden states: its own LM head with `own_embeddings`, else the target's."""
        if not self.cfg.own_embeddings:
            return super().logits_from_hidden(hidden)
        weight = self.lm_head.weight
        return F.linear(hidden.to(weight.dtype), weight)

    def _run_layers(self, hidden: Tensor, token_ids: Tensor, positions: Tensor, past: list[KVPair] | None,
                    allowed: Tensor | None) -> tuple[Tensor, list[KVPair]]:
        """Entries (hidden [B, Q, H], next tokens [B, Q]) at positions [B, Q] through every
        layer; returns the top layer's output (before `norm`) and each layer's new (k, v)."""
        embeds = self.embed(token_ids)
        cos, sin = self.rotary_emb(hidden, positions)
        own_kv = []
        for index, layer in enumerate(self.layers):
            hidden, kv = layer(embeds, hidden, cos, sin, None if past is None else past[index], allowed)
            own_kv.append(kv)
        return hidden, own_kv

    def _logits(self, hidden: Tensor) -> Tensor:
        return self.logits_from_hidden(self.norm(hidden))

    # -- training: training-time test over a batch of anchors ---------------------------

    def train_logits(self, batch: AnchorBatch) -> BlockOutput:
        """Logits [B, A, ttt_length, V] for anchors [B, A] (chapter 03): one causal pass over
        all target entries, then ttt_length - 1 unrolled steps per anchor, each step's query
        seeing the entries before the anchor and its own earlier steps only."""
        hidden = self._check_hidden(batch.target_hidden, 2)
        ids = batch.input_ids.to(self.device)
        anchors = batch.anchor_pos.to(self.device).long()
        batch_size, length = ids.shape
        if bool((anchors < 1).any()) or bool((anchors >= length).any()):
            raise ValueError(f"anchor_pos must lie in [1, {length - 1}] for the EAGLE drafter, got {anchors.tolist()}")
        next_ids = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)
        positions = torch.arange(length, device=self.device).expand(batch_size, -1)
        causal = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()
        entries, entry_kv = self._run_layers(self.fc(hidden), next_ids, positions, None, causal.expand(batch_size, -1, -1))
        step_hidden = entries.gather(1, (anchors - 1)[..., None].expand(-1, -1, entries.shape[-1]))
        logits = [self._logits(step_hidden)]
        sees_entry = torch.arange(length, device=self.device) < anchors[..., None]
        own_anchor = torch.eye(anchors.shape[1], dtype=torch.bool, device=self.device).expand(batch_size, -1, -1)
        past = entry_kv
        for step in range(1, self.block_size):
            tokens = ids.gather(1, (anchors + step).clamp(max=length - 1))
            allowed = torch.cat([sees_entry] + [own_anchor] * step, dim=-1)
            step_hidden, step_kv = self._run_layers(step_hidden, tokens, anchors - 1 + step, past, allowed)
            past = [(torch.cat([k, sk], 2), torch.cat([v, sv], 2)) for (k, v), (sk, sv) in zip(past, step_kv)]
            logits.append(self._logits(step_hidden))
        return BlockOutput(torch.stack(logits, dim=2))

    # -- the Drafter protocol -----------------------------------------------------------

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None) -> None:
        """Hold the prompt's projected features; entries are built once their next token is known."""
        self._pending = self.fc(self._check_hidden(target_hidden, 1))[None]
        self._entry_kv, self._num_entries = None, 0

    @torch.inference_mode()
    def accept(self, n_accepted: int, new_target_hidden: Tensor | None) -> None:
        """Queue the anchor's and the accepted drafts' projected features."""
        hidden = self._check_hidden(new_target_hidden, 1)
        if hidden.shape[0] != n_accepted + 1:
            raise ValueError(f"expected hidden states for n_accepted + 1 = {n_accepted + 1} positions, got {hidden.shape[0]}")
        self._pending = torch.cat([self._pending, self.fc(hidden)[None]], dim=1)

    @torch.inference_mode()
    def draft(self, anchor_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Commit the queued entries, then draft gamma tokens one by one (gamma passes), or
        fewer: the chain stops after the first drafted end id (`end_ids`), which it keeps."""
        step_hidden = self._commit_entries(anchor_ids, gamma)
        anchor_position = anchor_ids.shape[0] - 1
        past = self._entry_kv
        tokens, probs = [], []
        for step in range(1, gamma + 1):
            slot = sample_slots(self._logits(step_hidden)[0], temperature, generator)
            tokens.append(slot.tokens[0])
            probs.append(slot.probs[0])
            # (one host sync a step, only when there are end ids to stop at)
            if step == gamma or (self._end_ids and int(slot.tokens[0]) in self._end_ids):
                break
            position = torch.tensor([[anchor_position - 1 + step]], device=self.device)
            step_hidden, step_kv = self._run_layers(step_hidden, slot.tokens[None], position, past, None)
            past = [(torch.cat([k, sk], 2), torch.cat([v, sv], 2)) for (k, v), (sk, sv) in zip(past, step_kv)]
        return Draft(torch.stack(tokens), torch.stack(probs))

    def _commit_entries(self, anchor_ids: Tensor, gamma: int) -> Tensor:
        """Turn queued features into cached entries (g_t, x_{t+1}); return step 1's hidden [1, 1, H]."""
        if self._pending is None:
            raise ValueError("EagleDrafter.draft called before start(); call start(prompt_ids, target_hidden)")
        _check_positive("gamma", gamma)
        anchor_position = anchor_ids.shape[0] - 1
        n_new = self._pending.shape[1]
        if n_new == 0 or self._num_entries + n_new != anchor_position:
            raise ValueError(
                f"the drafter holds features for {self._num_entries + n_new} positions but the anchor sits "
                f"at position {anchor_position}; expected equal (did the loop skip accept()?)"
            )
        rows = torch.arange(self._num_entries, anchor_position, device=self.device)
        next_ids = anchor_ids.to(self.device)[rows + 1]
        allowed = torch.ones(n_new, self._num_entries + n_new, dtype=torch.bool, device=self.device)
        allowed[:, self._num_entries:] = torch.ones(n_new, n_new, dtype=torch.bool, device=self.device).tril()
        out, new_kv = self._run_layers(self._pending, next_ids[None], rows[None], self._entry_kv, allowed[None])
        self._entry_kv = new_kv if self._entry_kv is None else [
            (torch.cat([k, nk], 2), torch.cat([v, nv], 2)) for (k, v), (nk, nv) in zip(self._entry_kv, new_kv)]
        self._num_entries = anchor_position
        self._pending = self._pending[:, :0]
        return out[:, -1:]
