"""The drafter's block loss of paper section 3.3: 0.1 CE + 0.9 TV with DeepSpec's position weights,
plus the confidence head's BCE against the soft label of Eq. 8 (chapter 03 trains DFlash and EAGLE
with it, chapter 05 adds the BCE). For the block at anchor p, slot k (k = 1..gamma) is trained against

* the hard next token input_ids[p + k] (cross-entropy, CE), and
* the target's distribution for that token, i.e. its logits at position p + k - 1 (total variation
  TV = 0.5 * ||p_d - p_t||_1; 1 - TV is the probability that speculative sampling accepts the slot),

each weighted by w_k = exp(-(k - 1) / decay) and masked past the end of the sequence (EOS):

    loss = ce_weight * CE + tv_weight * TV  (+ confidence_weight * BCE(c_k, 1 - TV), Eq. 8)

Eagle3's own loss (DeepSpec's `compute_eagle3_loss`, the paper's autoregressive baseline) is the
third term, the soft cross-entropy against the target's distribution, SCE = -sum_v p_t(v) log p_d(v),
with step weights 0.8^(k-1): `soft_ce_weight` 1, the other two 0 and decay = 1 / ln 1.25
(`EAGLE3_DECAY`), since exp(-(k - 1) / decay) = 0.8^(k-1).

The same TV, teacher-forced, gives the acceptance curves the trainer logs (`acceptance_proxies`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .hidden_drafter import BlockOutput
from .sampling import total_variation


class LossWeights(Protocol):
    """The loss's knobs, as `training.DrafterTrainConfig` holds them (loss_decay None means gamma)."""

    ce_weight: float
    tv_weight: float
    soft_ce_weight: float
    confidence_weight: float
    loss_decay: float | None


EAGLE3_DECAY = 1 / math.log(1.25)
"""The position-weight decay that gives Eagle3's step weights 0.8^(k-1) (DeepSpec's step_loss_decay 0.8)."""


def position_weights(gamma: int, decay: float | None, device: torch.device | None = None) -> Tensor:
    """w_k = exp(-(k - 1) / decay), k = 1..gamma; decay None means gamma."""
    decay = float(gamma) if decay is None else float(decay)
    return torch.exp(-torch.arange(gamma, device=device, dtype=torch.float32) / decay)


def block_loss(output: BlockOutput, targets: BlockTargets, cfg: LossWeights) -> tuple[Tensor, dict]:
    """The position-weighted, masked loss ce_weight * CE + tv_weight * TV + soft_ce_weight * SCE
    (+ confidence_weight * BCE(c_k, 1 - TV), Eq. 8) and its parts as numbers."""
    gamma = targets.tokens.shape[-1]
    weights = position_weights(gamma, cfg.loss_decay, targets.tokens.device) * targets.mask  # [B, A, gamma] w_k
    total_weight = weights.sum().clamp(min=1e-6)
    logits = output.logits.float()  # [B, A, gamma, V]
    ce = F.cross_entropy(logits.flatten(0, 2), targets.tokens.flatten(), reduction="none").view_as(weights)
    tv = total_variation(torch.softmax(logits, dim=-1), targets.probs)  # [B, A, gamma]
    ce_loss, tv_loss = (ce * weights).sum() / total_weight, (tv * weights).sum() / total_weight
    loss = cfg.ce_weight * ce_loss + cfg.tv_weight * tv_loss
    parts = {"ce": ce_loss.item(), "tv": tv_loss.item()}
    if cfg.soft_ce_weight > 0:  # Eagle3's: the target's whole distribution as the label
        soft_ce = -(targets.probs * torch.log_softmax(logits, dim=-1)).sum(-1)  # [B, A, gamma]
        soft_ce_loss = (soft_ce * weights).sum() / total_weight
        loss = loss + cfg.soft_ce_weight * soft_ce_loss
        parts["soft_ce"] = soft_ce_loss.item()
    if output.confidence_logits is not None and cfg.confidence_weight > 0:
        soft_label = (1 - tv).detach()  # Eq. 8: c*_k = 1 - TV_k
        bce = F.binary_cross_entropy_with_logits(output.confidence_logits.float(), soft_label, reduction="none")
        confidence_loss = (bce * weights).sum() / total_weight
        loss = loss + cfg.confidence_weight * confidence_loss
        parts["confidence_bce"] = confidence_loss.item()
    parts.update(acceptance_proxies(tv.detach(), targets.mask))
    return loss, parts


# ----------------------------------------------------------------------------------------
# What the loss compares against: the block's tokens and the target's distributions
# ----------------------------------------------------------------------------------------


@dataclass
class BlockTargets:
    """Everything the loss needs for a batch of blocks [B, A, gamma]: the tokens, the target's
    distributions [B, A, gamma, V] and the mask of slots that exist."""

    tokens: Tensor
    probs: Tensor
    mask: Tensor


def slot_mask(anchor_pos: Tensor, lengths: Tensor, gamma: int) -> Tensor:
    """[B, A, gamma] bool: slot k is supervised when its token p + k exists (<= EOS)."""
    offsets = torch.arange(1, gamma + 1, device=anchor_pos.device)
    return anchor_pos[..., None] + offsets < lengths.to(anchor_pos.device)[:, None, None]


def block_targets(input_ids: Tensor, target_logits: Tensor, anchor_pos: Tensor, lengths: Tensor, gamma: int) -> BlockTargets:
    """Slot k of anchor p: token input_ids[p + k] and the target's distribution from its
    logits at p + k - 1 (temperature 1); positions past the end are clamped and masked."""
    device = target_logits.device
    anchor_pos, input_ids = anchor_pos.to(device), input_ids.to(device)
    last = input_ids.shape[1] - 1
    positions = (anchor_pos[..., None] + torch.arange(1, gamma + 1, device=device)).clamp(max=last)  # [B, A, gamma] p + k
    batch, n_anchors = anchor_pos.shape
    tokens = input_ids.gather(1, positions.reshape(batch, -1)).reshape(batch, n_anchors, gamma)  # [B, A, gamma]
    rows = torch.arange(batch, device=device)[:, None, None]
    probs = torch.softmax(target_logits[rows, positions - 1], dim=-1)  # [B, A, gamma, V] p_t of slot k
    return BlockTargets(tokens, probs, slot_mask(anchor_pos, lengths, gamma))


# ----------------------------------------------------------------------------------------
# What the loss's TV says about acceptance
# ----------------------------------------------------------------------------------------


def acceptance_proxies(tv: Tensor, mask: Tensor) -> dict:
    """Acceptance estimated from 1 - TV, teacher-forced, temperature 1.

    slot_acceptance_tv[k-1]: mean 1 - TV of slot k (a conditional acceptance proxy).
    prefix_survival_tv[k-1]: mean of prod_{i<=k} (1 - TV_i), DeepSpec's accept_rate@k proxy,
        over blocks whose slot k exists.
    expected_tau_tv: 1 + mean over blocks of sum_k prod_{i<=k} (1 - TV_i) (blocks near the
        end of a sequence have fewer slots).
    """
    accept = (1 - tv) * mask  # [B, A, gamma]
    survival = accept.cumprod(dim=-1)  # [B, A, gamma]
    count = mask.float().flatten(0, 1).sum(0).clamp(min=1)  # [gamma] blocks whose slot k exists
    return {
        "slot_acceptance_tv": (accept.flatten(0, 1).sum(0) / count).tolist(),
        "prefix_survival_tv": (survival.flatten(0, 1).sum(0) / count).tolist(),
        "expected_tau_tv": 1 + survival.sum(-1).mean().item(),
    }
