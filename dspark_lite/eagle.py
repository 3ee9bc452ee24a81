"""The EAGLE-3 style autoregressive baseline (chapter 03; the paper's Eagle3 row, section 4):
it fuses the target's features (Eq. 2's projection `fc`) with the embedding of the next
token, drafts token by token (up to gamma passes), feeding its own hidden state back in
place of the target's features beyond the anchor. Given end ids it stops the chain at the
first one it drafts, as DeepSpec's Eagle3 evaluator does.

Training unrolls gamma steps (training-time test; DeepSpec's `ttt_length`) with the true
tokens and the drafter's own hidden states; drafting may run any number of steps. An
EagleDrafter built with `DrafterConfig(own_embeddings=True)` holds its own frozen `embed_tokens` and `lm_head`
instead of sharing the target's, DeepSpec's Qwen3Eagle3Model layout key for key (chapter 07
loads a released Eagle3 that way when asked to use the checkpoint's copies).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP

from .attention import DraftAttention, KVPair, RMSNorm, cat_kv
from .checks import end_ids as as_end_ids
from .hidden_drafter import (AnchorBatch, BlockOutput, DrafterConfig, HiddenStateDrafter, accepted_rows,
                             anchor_positions, drafter_round, drafter_started, sample_slots)
from .speculative import Draft


class EagleDecoderLayer(nn.Module):
    """One EAGLE-3 layer: attention over cat(RMSNorm(token embedding), RMSNorm(feature)) (2H
    inputs), the feature as the residual stream, then a SwiGLU MLP. Names as DeepSpec's
    Qwen3Eagle3DecoderLayer (hidden_norm lives in the layer)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.self_attn = DraftAttention(2 * config.hidden_size, config)
        self.mlp = Qwen3MLP(config)
        self.hidden_norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, embeds: Tensor, hidden: Tensor, cos: Tensor, sin: Tensor, past: KVPair | None,
                allowed: Tensor | None) -> tuple[Tensor, KVPair]:
        fused = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)  # [B, Q, 2H]
        attended, own_kv = self.self_attn(fused, cos, sin, past, allowed)
        hidden = hidden + attended
        return hidden + self.mlp(self.post_attention_layernorm(hidden)), own_kv


class EagleDrafter(HiddenStateDrafter):
    """EAGLE-3 style autoregressive drafter, the baseline.

    Entry t pairs a feature with the NEXT token: (g_t, x_{t+1}). For the target's committed
    positions t < p (p = the anchor's position) g_t = fc(target layers at t); these entries
    attend causally to each other and are cached. Draft step 1 is the entry (g_{p-1}, x_p):
    its output h_1 gives the logits of x_{p+1}. Step k >= 2 appends the entry (h_{k-1},
    x_{p+k-1}) at position p+k-2 (the drafter's own hidden state in place of the target's
    features, its own sampled token) that sees all cached entries and the earlier steps.

    Early stop (`end_ids`, empty by default): the chain stops after the first drafted token
    that is an end id, which stays in the draft, so a draft may hold fewer than gamma tokens;
    the engine verifies what was drafted (`speculative.speculative_generate`). That is the
    chain of DeepSpec's deepspec/eval/eagle3/evaluator.py, `Qwen3Eagle3Evaluator._propose`:
    `for _ in range(ttt_length)` (our gamma): logits, sample, append, `if has_stop_token(...): break`.
    The end ids are the drafter's (set at construction or later through `end_ids`), not passed
    per call, so the Drafter protocol and every other drafter are unchanged; a caller that
    stops generation at end ids gives the drafter the same ones (DeepSpec uses the target's
    generation-config end ids for both).

    state_dict keys (DeepSpec's Qwen3Eagle3Model): fc, layers.N.{hidden_norm, input_layernorm,
    post_attention_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
    mlp.{gate,up,down}_proj}, norm; with `DrafterConfig.own_embeddings` also embed_tokens and
    lm_head (frozen, full vocabulary).
    """

    def __init__(self, target: PreTrainedModel, cfg: DrafterConfig, seed: int = 0,
                 end_ids: int | Sequence[int] | None = None) -> None:
        super().__init__(target, cfg)
        self.layers = nn.ModuleList(EagleDecoderLayer(self.layer_config) for _ in range(cfg.num_layers))
        if cfg.own_embeddings:
            self.embed_tokens = nn.Embedding(self.vocab_size, self.hidden_size)
            self.lm_head = nn.Linear(self.hidden_size, self.vocab_size, bias=False)
        self.finish_init(seed)
        if cfg.own_embeddings:
            self._copy_target_embeddings()
        self.end_ids = end_ids
        # Decoding state: each layer's cached entries' keys/values, the projected features of
        # committed positions not yet entries [1, F, H], and the last entry's output [1, 1, H].
        self._entry_kv: list[KVPair | None] = []
        self._pending: Tensor | None = None
        self._last_entry: Tensor | None = None
        self._num_entries = 0

    def _copy_target_embeddings(self) -> None:
        """Own embedding and LM head: copies of the target's, frozen (DeepSpec's trainer freezes them too)."""
        with torch.no_grad():
            self.embed_tokens.weight.copy_(self.shared.embed_tokens.weight)
            self.lm_head.weight.copy_(self.shared.lm_head.weight)
        self.embed_tokens.requires_grad_(False)
        self.lm_head.requires_grad_(False)

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

    def run_layers(self, hidden: Tensor, token_ids: Tensor, positions: Tensor, past: list[KVPair | None],
                   allowed: Tensor | None) -> tuple[Tensor, list[KVPair]]:
        """Entries (hidden [B, Q, H], next tokens [B, Q]) at positions [B, Q] through every
        layer over each layer's `past` keys/values (None: none yet); returns the top layer's
        output (before `norm`) and each layer's new (k, v)."""
        embeds = self.embed(token_ids)  # [B, Q, H]
        cos, sin = self.rotary_emb(hidden, positions)
        own_kv = []
        for layer, layer_past in zip(self.layers, past):
            hidden, kv = layer(embeds, hidden, cos, sin, layer_past, allowed)
            own_kv.append(kv)
        return hidden, own_kv

    def step_logits(self, hidden: Tensor) -> Tensor:
        """Logits [..., V] of a step's output [..., H] (final norm, then the LM head)."""
        return self.logits_from_hidden(self.norm(hidden))

    # -- training: training-time test over a batch of anchors -----------------------------

    def train_logits(self, batch: AnchorBatch) -> BlockOutput:
        """Logits [B, A, gamma, V] for anchors [B, A]: one causal pass over all target
        entries, then gamma - 1 unrolled steps per anchor, each step's query seeing the
        entries before the anchor and its own earlier steps only."""
        hidden = self.checked_hidden(batch.target_hidden, 3)
        ids, anchors = batch.input_ids.to(self.device), batch.anchor_pos.to(self.device).long()
        batch_size, length = ids.shape
        anchor_positions(anchors, low=1, high=length - 1, who="the EAGLE drafter")
        next_ids = torch.cat([ids[:, 1:], ids[:, -1:]], dim=1)  # entry t pairs g_t with x_{t+1}
        positions = torch.arange(length, device=self.device).expand(batch_size, -1)
        causal = torch.ones(length, length, dtype=torch.bool, device=self.device).tril()
        no_past = [None] * len(self.layers)
        entries, past = self.run_layers(self.fc(hidden), next_ids, positions, no_past, causal.expand(batch_size, -1, -1))
        step_hidden = entries.gather(1, (anchors - 1)[..., None].expand(-1, -1, entries.shape[-1]))  # [B, A, H]
        logits = [self.step_logits(step_hidden)]
        sees_entry = torch.arange(length, device=self.device) < anchors[..., None]  # [B, A, T]
        own_anchor = torch.eye(anchors.shape[1], dtype=torch.bool, device=self.device).expand(batch_size, -1, -1)
        for step in range(1, self.gamma):
            tokens = ids.gather(1, (anchors + step).clamp(max=length - 1))
            allowed = torch.cat([sees_entry] + [own_anchor] * step, dim=-1)  # [B, A, T + A * step]
            step_hidden, step_kv = self.run_layers(step_hidden, tokens, anchors - 1 + step, past, allowed)
            past = [cat_kv(kv, new) for kv, new in zip(past, step_kv)]
            logits.append(self.step_logits(step_hidden))
        return BlockOutput(torch.stack(logits, dim=2))

    # -- the Drafter protocol -------------------------------------------------------------

    @property
    def context_length(self) -> int | None:
        """Committed positions the drafter holds features for, as entries or pending (None before `start`)."""
        if self._pending is None:
            return None
        return self._num_entries + self._pending.shape[1]

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None) -> None:
        """Hold the prompt's projected features; entries are built once their next token is known."""
        self._pending = self.fc(self.checked_hidden(target_hidden, 2))[None]  # [1, T, H]
        self._entry_kv, self._last_entry, self._num_entries = [None] * len(self.layers), None, 0

    @torch.inference_mode()
    def accept(self, n_accepted: int, new_target_hidden: Tensor | None) -> None:
        """Queue the anchor's and the accepted drafts' projected features."""
        drafter_started(self.context_length, type(self).__name__)
        hidden = self.checked_hidden(new_target_hidden, 2)
        accepted_rows(n_accepted, hidden.shape[0])
        self._pending = torch.cat([self._pending, self.fc(hidden)[None]], dim=1)

    @torch.inference_mode()
    def draft(self, context_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Commit the queued entries, then draft gamma tokens one by one (gamma passes), or
        fewer: the chain stops after the first drafted end id (`end_ids`), which it keeps."""
        drafter_round(self.context_length, context_ids, gamma, None, type(self).__name__)
        step_hidden = self.commit_entries(context_ids)
        anchor_position = context_ids.shape[0] - 1
        past = self._entry_kv
        tokens, probs = [], []
        for step in range(1, gamma + 1):
            slot = sample_slots(self.step_logits(step_hidden)[0], temperature, generator)
            tokens.append(slot.tokens[0])
            probs.append(slot.probs[0])
            # (one host sync a step, only when there are end ids to stop at)
            if step == gamma or (self._end_ids and int(slot.tokens[0]) in self._end_ids):
                break
            position = torch.tensor([[anchor_position - 1 + step]], device=self.device)
            step_hidden, step_kv = self.run_layers(step_hidden, slot.tokens[None], position, past, None)
            past = [cat_kv(kv, new) for kv, new in zip(past, step_kv)]
        return Draft(torch.stack(tokens), torch.stack(probs))

    def commit_entries(self, context_ids: Tensor) -> Tensor:
        """Turn queued features into cached entries (g_t, x_{t+1}), t < the anchor's position;
        return the last entry's output [1, 1, H], step 1's hidden state."""
        anchor_position = context_ids.shape[0] - 1
        n_new = self._pending.shape[1]
        if n_new == 0:  # drafting again without accept: the same step 1
            return self._last_entry
        rows = torch.arange(self._num_entries, anchor_position, device=self.device)  # [F]
        next_ids = context_ids.to(self.device)[rows + 1]
        allowed = torch.ones(n_new, self._num_entries + n_new, dtype=torch.bool, device=self.device)
        allowed[:, self._num_entries:] = torch.ones(n_new, n_new, dtype=torch.bool, device=self.device).tril()
        out, new_kv = self.run_layers(self._pending, next_ids[None], rows[None], self._entry_kv, allowed[None])
        self._entry_kv = [cat_kv(kv, new) for kv, new in zip(self._entry_kv, new_kv)]
        self._num_entries, self._pending, self._last_entry = anchor_position, self._pending[:, :0], out[:, -1:]
        return self._last_entry
