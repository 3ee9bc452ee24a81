"""What the drafter trainer of paper section 3.3 reads (chapter 03): the target's own replies
(`TrainingSequences`, sampled by `harness.toy.replies`), the anchors sampled in them, and the
frozen target's view of every sequence (`TargetViews`).

Anchors are sampled at random reply positions (and the last prompt token); the drafter reads only
context positions < p of an anchor p. The frozen target runs once per sequence, before training,
not once per step: its final normed hidden states and the hidden states the drafters read are kept,
and the LM head turns a batch's final states into logits when the batch is drawn.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence
from transformers import PreTrainedModel

from .runtime import fast_autocast, model_device
from .speculative import select_target_hidden


def pad(rows: Sequence[Tensor], value: int, side: str = "right") -> tuple[Tensor, Tensor]:
    """Token rows of different lengths as one LongTensor [N, longest] padded with `value` on `side`
    ("left" or "right"), and the mask of real tokens [N, longest] (1 real, 0 pad)."""
    ids = pad_sequence([torch.as_tensor(r).long() for r in rows], batch_first=True, padding_value=value,
                       padding_side=side)
    mask = pad_sequence([torch.ones(len(r), dtype=torch.long) for r in rows], batch_first=True, padding_side=side)
    return ids, mask


@dataclass
class TrainingSequences:
    """Prompt + target-generated reply token ids. `sequences[i]` is a 1-D LongTensor; its first
    `prompt_lengths[i]` tokens are the prompt, the rest the reply (ending with EOS when the target
    emitted it within the token budget)."""

    sequences: list[Tensor]
    prompt_lengths: list[int]
    pad_token_id: int

    def __post_init__(self) -> None:
        _training_sequences(self.sequences, self.prompt_lengths)

    def __len__(self) -> int:
        return len(self.sequences)

    def reply_tokens(self) -> int:
        """Total number of reply tokens."""
        return sum(int(s.shape[0]) - p for s, p in zip(self.sequences, self.prompt_lengths))

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
        """(input_ids [B, T] right-padded with pad_token_id, lengths [B], prompt_lengths [B])."""
        rows = [self.sequences[i] for i in indices]
        ids, _ = pad(rows, self.pad_token_id)
        lengths = torch.tensor([int(r.shape[0]) for r in rows])
        return ids, lengths, torch.tensor([self.prompt_lengths[i] for i in indices])

    def save(self, path: Path) -> None:
        """Write to one torch file (for the artifact cache)."""
        torch.save({"sequences": self.sequences, "prompt_lengths": self.prompt_lengths,
                    "pad_token_id": self.pad_token_id}, path)

    @classmethod
    def load(cls, path: Path) -> "TrainingSequences":
        """Read a file written by `save`."""
        return cls(**torch.load(path, weights_only=True))


def sample_anchor_positions(lengths: Tensor, prompt_lengths: Tensor, anchors_per_sequence: int,
                            generator: torch.Generator) -> Tensor:
    """Anchors [B, A], uniform (with replacement) over positions p with
    prompt_length - 1 <= p <= length - 2: the last prompt token (whose block
    drafts the reply's opening) and every reply position whose slot 1 target p + 1 exists."""
    candidates = lengths - prompt_lengths  # [B] anchor positions per sequence
    assert bool((candidates >= 2).all()), "every sequence needs a reply of >= 2 tokens to hold an anchor"
    uniform = torch.rand(lengths.shape[0], anchors_per_sequence, generator=generator)
    return prompt_lengths[:, None] - 1 + (uniform * candidates[:, None]).long().clamp(max=candidates[:, None] - 1)


# ----------------------------------------------------------------------------------------
# The frozen target's view, computed once
# ----------------------------------------------------------------------------------------


@torch.no_grad()
def target_view(target: PreTrainedModel, input_ids: Tensor, layer_ids: Sequence[int] | None) -> tuple[Tensor, Tensor | None]:
    """The frozen target on right-padded sequences: its final normed hidden state [B, T, H] (what
    the LM head reads) and the selected hidden states [B, T, m * H] (float32, or None). No
    attention mask is needed: padding only follows the real tokens, which a causal model never reads."""
    device = model_device(target)
    with fast_autocast(device):
        out = target.base_model(input_ids=input_ids.to(device), output_hidden_states=layer_ids is not None)
    hidden = None if layer_ids is None else select_target_hidden(out.hidden_states, layer_ids).float()
    return out.last_hidden_state.float(), hidden


class TargetViews:
    """The frozen target's view of every training sequence, computed once before training, in
    fixed chunks (so a resumed run reads the same numbers): the selected hidden states
    [T_i, m * H] and the final normed state [T_i, H], which the LM head turns into a batch's
    logits (a [T_i, V] per sequence would not fit in memory). The target then runs once per
    sequence instead of once per step."""

    def __init__(self, target: PreTrainedModel, sequences: TrainingSequences, layer_ids: Sequence[int] | None,
                 chunk: int = 64) -> None:
        start = time.perf_counter()
        self.target, self.layer_ids = target, layer_ids
        self.final: list[Tensor] = []  # [T_i, H] per sequence
        self.hidden: list[Tensor | None] = []  # [T_i, m * H] per sequence, or None
        for first in range(0, len(sequences), chunk):
            input_ids, lengths, _ = sequences.batch(range(first, min(first + chunk, len(sequences))))
            final, hidden = target_view(target, input_ids, layer_ids)
            for row, n in enumerate(lengths.tolist()):
                self.final.append(final[row, :n].clone())
                self.hidden.append(None if hidden is None else hidden[row, :n].clone())
        self.seconds = time.perf_counter() - start

    @torch.no_grad()
    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor | None]:
        """Logits [B, T, V] (float32) and selected hidden states [B, T, m * H] (or None) of the
        right-padded batch `indices`, zero past each sequence's end."""
        final = pad_sequence([self.final[i] for i in indices], batch_first=True)  # [B, T, H]
        hidden = None if self.layer_ids is None else pad_sequence([self.hidden[i] for i in indices], batch_first=True)
        with fast_autocast(final.device):
            logits = self.target.get_output_embeddings()(final)  # [B, T, V]
        return logits.float(), hidden


# --- checks (this module's door)


def _training_sequences(sequences: Sequence[Tensor], prompt_lengths: Sequence[int]) -> None:
    """ValueError unless each sequence is 1-D with a prompt of >= 1 token and a reply of >= 2
    (one anchor and one target), one prompt length per sequence."""
    if len(sequences) != len(prompt_lengths):
        raise ValueError(f"{len(sequences)} sequences but {len(prompt_lengths)} prompt lengths")
    for index, (seq, prompt_length) in enumerate(zip(sequences, prompt_lengths)):
        if seq.dim() != 1 or not 1 <= prompt_length <= seq.shape[0] - 2:
            raise ValueError(f"sequence {index}: needs a 1-D tensor with a prompt of >= 1 token and a reply of "
                             f">= 2 tokens (one anchor and one target), got length {tuple(seq.shape)} and "
                             f"prompt {prompt_length}")
