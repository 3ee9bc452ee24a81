"""DFlash, the parallel block drafter (chapter 03, paper section 2.2, Eq. 2-3), with DSpark's
anchor-first block (section 3): the block is the anchor (the last committed token) followed
by gamma - 1 mask tokens, and ONE forward gives gamma base logits; slot k
(k = 1..gamma) predicts the token at position p + k, where p is the anchor's position.
Context features H_ctx = RMSNorm(W_c [H(l_1); ...; H(l_m)]) (Eq. 2, `DFlashDrafter.context_features`)
are injected into every draft layer as extra keys and values (Eq. 3, `attention.DraftAttention`).

Two ways through the same layers:
* training and teaching (`block_hidden`): a batch of sequences and anchors; each layer's
  context keys/values are projected from the target's hidden states (`context_kv`), and a
  mask (`block_mask`) lets block a see the context before its anchor and itself.
* decoding (the `speculative.Drafter` protocol): the context's keys/values are cached across
  rounds; the hidden states accepted in a round are projected once, when accepted
  (`extend_context`), as DFlash's `spec_generate` does.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP

from .attention import DraftAttention, KVPair, RMSNorm, cat_kv
from .hidden_drafter import (AnchorBatch, BlockOutput, DrafterConfig, HiddenStateDrafter, accepted_rows,
                             anchor_positions, drafter_round, drafter_started, sample_slots)
from .speculative import Draft


class DFlashDecoderLayer(nn.Module):
    """One draft layer: pre-norm attention whose keys/values are [W_K H_ctx ; W_K H_block]
    (Eq. 3; the context is already normed by `hidden_norm`), then a SwiGLU MLP. Names as
    DeepSpec's Qwen3DSparkDecoderLayer."""

    def __init__(self, config) -> None:
        super().__init__()
        self.self_attn = DraftAttention(config.hidden_size, config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def feed_forward(self, x: Tensor) -> Tensor:
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, context_kv: KVPair, allowed: Tensor | None) -> Tensor:
        """The block x [B, Q, H] through the layer, over the projected context `context_kv`."""
        attended, _ = self.self_attn(self.input_layernorm(x), cos, sin, context_kv, allowed)
        return self.feed_forward(x + attended)


class DFlashDrafter(HiddenStateDrafter):
    """The parallel block drafter with DSpark's anchor-first block.

    The block at anchor position p holds the anchor and gamma - 1 mask tokens at
    positions p..p+gamma-1; it attends bidirectionally to itself and to every context
    position < p (RoPE positions 0..p-1). One forward gives gamma base logits; slot k
    predicts the token at p + k. `draft` runs the full trained block and returns the first
    slots a round asks for (at most the block's gamma), each sampled independently.

    state_dict keys (DeepSpec's): fc, hidden_norm, layers.N.{input_layernorm,
    post_attention_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
    mlp.{gate,up,down}_proj}, norm.
    """

    def __init__(self, target: PreTrainedModel, cfg: DrafterConfig, seed: int = 0) -> None:
        super().__init__(target, cfg)
        self.mask_token_id = _token_id(cfg.mask_token_id, self.vocab_size, "mask_token_id")
        self.hidden_norm = RMSNorm(self.hidden_size, eps=self.layer_config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashDecoderLayer(self.layer_config) for _ in range(cfg.num_layers))
        self.finish_init(seed)
        # Decoding state: each layer's context keys/values [1, Hkv, L, D].
        self._context_kv: list[KVPair] | None = None

    # -- the backbone (Eq. 2-3) -----------------------------------------------------------

    def context_features(self, target_hidden: Tensor) -> Tensor:
        """H_ctx = RMSNorm(W_c [H(l_1); ...; H(l_m)]) (Eq. 2), [..., T, hidden]."""
        return self.hidden_norm(self.fc(target_hidden))

    def context_kv(self, target_hidden: Tensor, positions: Tensor) -> list[KVPair]:
        """Each layer's context keys/values [B, Hkv, T, D] (Eq. 3's W_K H_ctx, W_V H_ctx) for
        target hidden states [B, T, m*H] at positions [B, T]."""
        context = self.context_features(target_hidden)  # [B, T, H]
        cos, sin = self.rotary_emb(context, positions)
        return [layer.self_attn.project_kv(context, cos, sin) for layer in self.layers]

    def run_block(self, block_ids: Tensor, positions: Tensor, context_kv: list[KVPair],
                  allowed: Tensor | None) -> Tensor:
        """Final-normed hidden states [B, Q, H] of block tokens [B, Q] at positions [B, Q]."""
        x = self.embed(block_ids)  # [B, Q, H]
        cos, sin = self.rotary_emb(x, positions)
        for layer, kv in zip(self.layers, context_kv):
            x = layer(x, cos, sin, kv, allowed)
        return self.norm(x)

    def make_block_ids(self, anchor_tokens: Tensor) -> Tensor:
        """Blocks [..., gamma]: each anchor token followed by gamma - 1 mask ids."""
        masks = torch.full((*anchor_tokens.shape, self.gamma - 1), self.mask_token_id, dtype=torch.long,
                           device=anchor_tokens.device)
        return torch.cat([anchor_tokens.long()[..., None], masks], dim=-1)

    def block_hidden(self, context_hidden: Tensor, block_ids: Tensor, anchor_pos: Tensor) -> Tensor:
        """Final-normed hidden states of blocks, for a batch of anchors.

        context_hidden [B, T, m*H]: the target's selected layers at positions 0..T-1.
        block_ids [B, G] with anchor_pos [B] (or [B, A, G] with [B, A]: A anchors per row).
        Block b (a) sits at positions anchor_pos..anchor_pos+G-1 and sees only context
        positions < anchor_pos and its own block. Returns [B, G, H] (or [B, A, G, H]).
        """
        hidden = self.checked_hidden(context_hidden, 3)
        _anchor_batch(block_ids, anchor_pos, low=0, high=hidden.shape[1])
        single = block_ids.dim() == 2
        blocks = block_ids.to(self.device).reshape(block_ids.shape[0], -1, block_ids.shape[-1])  # [B, A, G]
        anchors = anchor_pos.to(self.device).long().reshape(blocks.shape[:2])  # [B, A]
        batch, n_anchors, size = blocks.shape
        length = hidden.shape[1]
        context_positions = torch.arange(length, device=self.device).expand(batch, -1)  # [B, T]
        block_positions = (anchors[..., None] + torch.arange(size, device=self.device)).flatten(1)  # [B, A*G]
        out = self.run_block(blocks.flatten(1), block_positions, self.context_kv(hidden, context_positions),
                             self.block_mask(anchors, length, size))
        out = out.reshape(batch, n_anchors, size, -1)  # [B, A, G, H]
        return out[:, 0] if single else out

    @staticmethod
    def block_mask(anchors: Tensor, length: int, size: int) -> Tensor:
        """[B, A*G, T + A*G]: a query of block a sees context j < anchor_a and block a only."""
        batch, n_anchors = anchors.shape
        query_anchor = anchors.repeat_interleave(size, dim=1)  # [B, A*G]
        sees_context = torch.arange(length, device=anchors.device) < query_anchor[..., None]  # [B, A*G, T]
        block_of = torch.arange(n_anchors * size, device=anchors.device) // size
        sees_block = (block_of[:, None] == block_of[None, :]).expand(batch, -1, -1)  # [B, A*G, A*G]
        return torch.cat([sees_context, sees_block], dim=-1)

    def block_logits(self, context_hidden: Tensor, block_ids: Tensor, anchor_pos: Tensor) -> Tensor:
        """Base logits [B, G, V] (or [B, A, G, V]) of `block_hidden`; slot k predicts the token
        at anchor_pos + k."""
        return self.logits_from_hidden(self.block_hidden(context_hidden, block_ids, anchor_pos))

    def train_logits(self, batch: AnchorBatch) -> BlockOutput:
        """Training forward for `training.train_drafter`: one block per anchor."""
        anchor_tokens = batch.input_ids.to(self.device).gather(1, batch.anchor_pos.to(self.device))
        return BlockOutput(self.block_logits(batch.target_hidden, self.make_block_ids(anchor_tokens),
                                             batch.anchor_pos))

    # -- the Drafter protocol -------------------------------------------------------------

    @property
    def context_length(self) -> int | None:
        """Context positions the drafter holds (None before `start`)."""
        return None if self._context_kv is None else self._context_kv[0][0].shape[2]

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None) -> None:
        """Take the prompt's target hidden states [T, m*H] as the context."""
        hidden = self.checked_hidden(target_hidden, 2)
        empty = hidden.new_zeros(1, self.layer_config.num_key_value_heads, 0, self.layer_config.head_dim)
        self._context_kv = [(empty, empty) for _ in self.layers]
        self.extend_context(hidden)

    @torch.inference_mode()
    def accept(self, n_accepted: int, new_target_hidden: Tensor | None) -> None:
        """Add the anchor's and the accepted drafts' hidden states [n_accepted + 1, m*H] to the context."""
        drafter_started(self.context_length, type(self).__name__)
        hidden = self.checked_hidden(new_target_hidden, 2)
        accepted_rows(n_accepted, hidden.shape[0])
        self.extend_context(hidden)

    def extend_context(self, hidden: Tensor) -> None:
        """Project target hidden states [F, m*H] into each layer's context keys/values, once,
        at the positions after those held."""
        start = self._context_kv[0][0].shape[2]
        positions = torch.arange(start, start + hidden.shape[0], device=self.device)[None]  # [1, F]
        new = self.context_kv(hidden[None], positions)
        self._context_kv = [cat_kv(kv, new_kv) for kv, new_kv in zip(self._context_kv, new)]

    @torch.inference_mode()
    def draft(self, context_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Run one block at the anchor (the last of `context_ids`, every token so far) and
        sample its first gamma slots."""
        drafter_round(self.context_length, context_ids, gamma, self.gamma, type(self).__name__)
        hidden = self.next_block_hidden(context_ids)
        return sample_slots(self.logits_from_hidden(hidden[:gamma]), temperature, generator)

    def next_block_hidden(self, context_ids: Tensor) -> Tensor:
        """Final-normed hidden states [gamma, H] of the block at the anchor (the last of
        `context_ids`) over the whole context: `block_hidden` at the anchor, from the cache."""
        anchor_position = context_ids.shape[0] - 1
        block_ids = self.make_block_ids(context_ids[-1:].to(self.device))  # [1, G]
        positions = torch.arange(anchor_position, anchor_position + self.gamma, device=self.device)[None]
        return self.run_block(block_ids, positions, self._context_kv, None)[0]


# --- checks (this module's door)


def _token_id(value: int | None, vocab_size: int, name: str) -> int:
    """`value` as an int; ValueError unless it is an id of the target's vocabulary."""
    if value is None:
        raise ValueError(f"a block drafter needs a {name} (DrafterConfig.{name}): the token of the block's slots 2..gamma")
    if not 0 <= int(value) < vocab_size:
        raise ValueError(f"{name} {value} is outside the target's vocabulary [0, {vocab_size})")
    return int(value)


def _anchor_batch(block_ids: Tensor, anchor_pos: Tensor, low: int, high: int) -> None:
    """ValueError unless blocks [B, G] come with anchors [B], or [B, A, G] with [B, A], each in [low, high]."""
    if block_ids.dim() not in (2, 3) or tuple(anchor_pos.shape) != tuple(block_ids.shape[:-1]):
        raise ValueError(f"block ids must be [B, gamma] with anchor_pos [B], or [B, A, gamma] with [B, A]; got "
                         f"{tuple(block_ids.shape)} and {tuple(anchor_pos.shape)}")
    anchor_positions(anchor_pos, low, high, "this context")
