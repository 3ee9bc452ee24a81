"""The drafters' training data: replies sampled from the target itself (paper section 3.3;
chapter 03 samples them, chapters 04 and 05 reuse them through the artifact cache, chapter 07
encodes its prompts with `encode_prompt`).

Prompts are rendered with the tokenizer's chat template, batched by length, left-padded and
sampled on the method's one batched autoregressive loop (`baselines.sample_autoregressive`);
the replies, cut after their end token, become a `training_data.TrainingSequences`.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ... import checks
from ...baselines import sample_autoregressive
from ...progress import progress
from ...runtime import model_device
from ...training_data import TrainingSequences, pad


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | Tensor) -> Tensor:
    """A user prompt as the first turn of a chat, through the tokenizer's chat template (thinking
    off, generation prompt added), as token ids [T]; an already encoded 1-D tensor passes
    through."""
    if isinstance(prompt, Tensor):
        return prompt.long()
    if not prompt.strip():
        raise ValueError("the prompt is empty")
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True, enable_thinking=False)
    return torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)


def cut_reply(row: Tensor, eos_token_id: int | None) -> Tensor:
    """A sampled row [n] up to and including its first `eos_token_id` (all of it without one)."""
    if eos_token_id is not None and bool((row == eos_token_id).any()):
        return row[: int((row == eos_token_id).nonzero()[0]) + 1]
    return row


def sample_replies(
    target: PreTrainedModel, prompts: Sequence[Tensor], max_new_tokens: int, temperature: float,
    generator: torch.Generator | None, eos_token_id: int | None, pad_token_id: int,
) -> list[Tensor]:
    """Sample one reply per prompt [T_i] from the target in ONE batch: the prompts left-padded
    (an attention mask; positions counted from each prompt's first token) on
    `baselines.sample_autoregressive`. Each reply stops after EOS (kept) or max_new_tokens."""
    ids, mask = (t.to(model_device(target)) for t in pad(list(prompts), pad_token_id, side="left"))  # [B, T]
    ends = () if eos_token_id is None else (eos_token_id,)
    with torch.inference_mode():
        rows = sample_autoregressive(target, ids, max_new_tokens, temperature, generator, ends,
                                     attention_mask=mask)  # [B, n]
    return [cut_reply(row, eos_token_id) for row in rows.cpu()]


def generate_training_sequences(
    target: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str | Tensor],
    max_new_tokens: int, temperature: float, generator: torch.Generator | None, batch_size: int = 32,
    desc: str = "target replies",
) -> TrainingSequences:
    """Regenerate replies to `prompts` with the target itself (paper section 3.3).

    Prompts are strings (rendered with the chat template) or encoded 1-D tensors; they are
    batched by length to limit padding. Replies shorter than 2 tokens (no anchor with a
    target) are dropped. Returned in prompt order.
    """
    checks.positive_int(max_new_tokens, "max_new_tokens (an anchor and one target)", minimum=2)
    if tokenizer.pad_token_id is None:
        raise ValueError("the tokenizer needs a pad token to batch prompts")
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    if any(e.numel() == 0 for e in encoded):
        raise ValueError("a prompt encodes to zero tokens")
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].shape[0])
    replies: dict[int, Tensor] = {}
    for start in progress(range(0, len(order), batch_size), desc=desc):
        chunk = order[start:start + batch_size]
        out = sample_replies(target, [encoded[i] for i in chunk], max_new_tokens, temperature, generator,
                             tokenizer.eos_token_id, tokenizer.pad_token_id)
        replies.update(zip(chunk, out))
    keep = [i for i in range(len(encoded)) if replies[i].shape[0] >= 2]
    return TrainingSequences([torch.cat([encoded[i], replies[i]]) for i in keep],
                             [int(encoded[i].shape[0]) for i in keep], int(tokenizer.pad_token_id))
