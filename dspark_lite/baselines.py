"""The baselines of chapter 02: target-only sampling and the classic drafter.

Speculative decoding is judged against the target decoding alone, one token per forward
(`autoregressive_generate`, on the one batched loop `sample_autoregressive`, which also samples
the training replies of chapter 03), and against the classic drafter of Leviathan et al. (2023)
and Chen et al. (2023): a small causal LM that samples its gamma drafts one by one
(`ModelDrafter`, a `speculative.Drafter`).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor
from transformers import DynamicCache, PreTrainedModel

from . import checks
from .kvcache import cache_kwarg, new_cache, remove_tokens
from .runtime import model_device
from .sampling import probs_from_logits, sample_from_probs, sample_token
from .speculative import Draft

# ----------------------------------------------------------------------------------------
# Target-only sampling
# ----------------------------------------------------------------------------------------


def sample_autoregressive(
    target: PreTrainedModel,
    prompt_batch: Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    ends: tuple[int, ...],
    use_cache: bool = True,
    attention_mask: Tensor | None = None,
) -> Tensor:
    """Sample up to `max_new_tokens` tokens after each row of `prompt_batch` [B, T] (on the
    target's device); returns [B, n], n <= max_new_tokens. One forward a step, logits of the
    last position only; greedy at temperature 0. A row that sampled one of `ends` repeats
    ends[0] after it, and the loop stops when every row has ended. `attention_mask` [B, T]
    (0 on padding) serves left-padded prompts: positions count from each row's first token.
    With use_cache=False every step recomputes the whole sequence."""
    cache = new_cache(target) if use_cache else None
    end_tensor = torch.tensor(ends, dtype=torch.long, device=prompt_batch.device)
    sequence, step_input, mask = prompt_batch, prompt_batch, attention_mask
    finished = torch.zeros(prompt_batch.shape[0], dtype=torch.bool, device=prompt_batch.device)
    for _ in range(max_new_tokens):
        padding = {} if mask is None else padding_kwargs(mask, step_input.shape[1])
        logits = target(input_ids=step_input, **padding, **cache_kwarg(cache), use_cache=use_cache,
                        logits_to_keep=1).logits[:, -1]  # [B, V]
        token = sample_token(logits, temperature, generator)  # [B]
        if ends:
            token = torch.where(finished, torch.full_like(token, ends[0]), token)
            finished |= torch.isin(token, end_tensor)
        sequence = torch.cat([sequence, token[:, None]], dim=1)  # [B, T + step]
        step_input = token[:, None] if use_cache else sequence
        mask = None if mask is None else torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        if bool(finished.all()):
            break
    return sequence[:, prompt_batch.shape[1]:]


def padding_kwargs(attention_mask: Tensor, new_positions: int) -> dict[str, Tensor]:
    """The attention mask [B, L] of a left-padded batch and the position ids [B, new_positions]
    of its last `new_positions` tokens, counted from each row's first real token."""
    positions = (attention_mask.cumsum(1) - 1).clamp(min=0)
    return {"attention_mask": attention_mask, "position_ids": positions[:, -new_positions:]}


def autoregressive_generate(
    target: PreTrainedModel,
    prompt_ids: Tensor,
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
    eos_token_id: int | Sequence[int] | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Target-only sampling, the baseline. `prompt_ids` [T] returns the generated ids
    [<= max_new_tokens], cut after an end token (`eos_token_id`: one id or several); a batch
    [B, T] (same length, no padding) returns [B, n] with the first end id repeated after a
    row's end (`sample_autoregressive`). Greedy at temperature 0."""
    checks.validate_generation(max_new_tokens, temperature)
    batch, ends = _prompt_batch(prompt_ids), checks.end_ids(eos_token_id)
    with torch.inference_mode():
        generated = sample_autoregressive(target, batch.to(model_device(target)), max_new_tokens, temperature,
                                          generator, ends, use_cache).to(prompt_ids.device)
    if prompt_ids.dim() > 1:
        return generated
    tokens = generated[0].tolist()
    cut = next((i + 1 for i, token in enumerate(tokens) if token in ends), len(tokens))
    return generated[0, :cut]


# ----------------------------------------------------------------------------------------
# The classic drafter: a small causal LM with its own KV cache
# ----------------------------------------------------------------------------------------


class ModelDrafter:
    """A small causal LM (e.g. a tiny Qwen3ForCausalLM) with the target's vocabulary as a
    `speculative.Drafter` that samples gamma tokens one by one. Its KV cache holds the tokens
    it has read; `accept` crops it back to the committed prefix."""

    target_layer_ids: tuple[int, ...] | None = None

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model.eval()
        self.vocab_size: int = model.config.vocab_size
        self.cache: DynamicCache | None = None
        self.context_length = 0  # tokens committed before the last draft: the context ids

    @torch.inference_mode()
    def start(self, prompt_ids: Tensor, target_hidden: Tensor | None = None) -> None:
        """Prefill the drafter's own cache with the prompt [T]."""
        self.cache = new_cache(self.model)
        self.model(input_ids=prompt_ids[None].to(model_device(self.model)), **cache_kwarg(self.cache),
                   use_cache=True, logits_to_keep=1)
        self.context_length = prompt_ids.shape[0]

    @torch.inference_mode()
    def draft(self, context_ids: Tensor, gamma: int, temperature: float, generator: torch.Generator | None) -> Draft:
        """Read the context ids [L] not yet cached (at least the anchor, the last of them), then
        sample gamma tokens, each from the drafter's distribution after the ones before it."""
        assert self.cache is not None, "start() first"
        cached = self.cache.get_seq_length()
        assert cached < context_ids.shape[0], "accept() after every draft()"
        step_input = context_ids[cached:].to(model_device(self.model))
        tokens, probs = [], []
        for _ in range(gamma):
            logits = self.model(input_ids=step_input[None], **cache_kwarg(self.cache), use_cache=True,
                                logits_to_keep=1).logits[0, -1]  # [V]
            probs.append(probs_from_logits(logits, temperature))
            tokens.append(sample_from_probs(probs[-1], generator))
            step_input = tokens[-1][None]
        self.context_length = context_ids.shape[0]
        return Draft(torch.stack(tokens), torch.stack(probs))  # [gamma], [gamma, V]

    def accept(self, n_accepted: int, new_target_hidden: Tensor | None = None) -> None:
        """Crop the cache to the context, the anchor included, plus the accepted drafts."""
        keep = self.context_length + n_accepted
        remove_tokens(self.cache, max(0, self.cache.get_seq_length() - keep))


# --- checks (this module's door)


def _prompt_batch(prompt_ids: Tensor) -> Tensor:
    """Prompts [T] or [B, T] (T >= 1) as a LongTensor [B, T] (B = 1 for [T]); ValueError otherwise."""
    if prompt_ids.dim() == 1:
        return checks.prompt(prompt_ids)[None]
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0:
        raise ValueError(f"prompt_ids must have shape [T] or [B, T] with T >= 1, got {tuple(prompt_ids.shape)}")
    return prompt_ids.long()
