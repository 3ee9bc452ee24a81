"""The draft layers' attention (chapter 03, paper section 2.2, Eq. 3): queries from the block,
keys and values from the projected context followed by the block's own,

    K = [W_K H_ctx ; W_K H_block],   V = [W_V H_ctx ; W_V H_block]   (Eq. 3)

with Qwen3's per-head q/k RMSNorm, RoPE and grouped-query heads. `DraftAttention.forward` is
Eq. 3 as written: the context's keys/values arrive already projected (`project_kv`, run once
when the context is accepted, as DFlash's `spec_generate` does after each verification).

Parameter names match DeepSpec (q_proj, k_proj, v_proj, o_proj, q_norm, k_norm), so its
released weights load.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

KVPair = tuple[Tensor, Tensor]  # keys, values: [B, Hkv, L, D] each


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


def cat_kv(past: KVPair | None, new: KVPair) -> KVPair:
    """Keys and values [past; new] along the position axis (`new` alone when there is no past)."""
    if past is None:
        return new
    return torch.cat([past[0], new[0]], dim=2), torch.cat([past[1], new[1]], dim=2)


class DraftAttention(nn.Module):
    """Qwen3-style attention whose keys and values are the cached `past` ones followed by the
    queries' own (Eq. 3): q/k RMSNorm per head, RoPE, grouped-query heads."""

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
        return x.view(*x.shape[:2], n_heads, self.head_dim).transpose(1, 2)  # [B, heads, L, D]

    def project_q(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Queries (normed, rotated) [B, Hq, L, D] of inputs x [B, L, input_size]."""
        return rotate_pairs(self.q_norm(self._heads(self.q_proj(x), self.num_heads)), cos, sin)

    def project_kv(self, x: Tensor, cos: Tensor, sin: Tensor) -> KVPair:
        """Keys (normed, rotated) and values [B, Hkv, L, D] of inputs x [B, L, input_size]."""
        k = self.k_norm(self._heads(self.k_proj(x), self.num_kv_heads))
        v = self._heads(self.v_proj(x), self.num_kv_heads)
        return rotate_pairs(k, cos, sin), v

    def _output(self, q: Tensor, kv: KVPair, allowed: Tensor | None) -> Tensor:
        out = attend(q, kv[0], kv[1], allowed)  # [B, Hq, Q, D]
        return self.o_proj(out.transpose(1, 2).flatten(2))  # [B, Q, hidden]

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past: KVPair | None,
                allowed: Tensor | None) -> tuple[Tensor, KVPair]:
        """Eq. 3: queries from x [B, Q, input_size] (cos/sin [B, Q, D]) over keys and values
        [past; x's own]; `allowed` [B, Q, P + Q] or None (all). Returns the output [B, Q, hidden]
        and x's own (k, v), for a caller that caches them."""
        own = self.project_kv(x, cos, sin)
        return self._output(self.project_q(x, cos, sin), cat_kv(past, own), allowed), own
