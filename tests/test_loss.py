"""The block loss against a hand computation: CE, TV and Eagle3's soft cross-entropy, with their
position weights and the mask, on a batch small enough to write out."""
from __future__ import annotations

import math

import pytest
import torch

from dspark_lite.hidden_drafter import BlockOutput
from dspark_lite.loss import EAGLE3_DECAY, BlockTargets, block_loss, position_weights
from dspark_lite.training import DrafterTrainConfig


def batch(gamma: int = 3, vocab: int = 5) -> tuple[BlockOutput, BlockTargets]:
    torch.manual_seed(0)
    logits = torch.randn(2, 1, gamma, vocab)  # [B, A, gamma, V]
    probs = torch.softmax(torch.randn(2, 1, gamma, vocab), -1)
    tokens = torch.randint(0, vocab, (2, 1, gamma))
    mask = torch.tensor([[[True, True, True]], [[True, True, False]]])  # the second block's last slot is past EOS
    return BlockOutput(logits), BlockTargets(tokens, probs, mask)


def by_hand(output: BlockOutput, targets: BlockTargets, ce_w: float, tv_w: float, sce_w: float, decay: float) -> float:
    total, weight = 0.0, 0.0
    for b in range(2):
        for k in range(3):
            if not targets.mask[b, 0, k]:
                continue
            w = math.exp(-k / decay)
            log_q = torch.log_softmax(output.logits[b, 0, k], -1)
            p = targets.probs[b, 0, k]
            ce = -float(log_q[targets.tokens[b, 0, k]])
            tv = 0.5 * float((log_q.exp() - p).abs().sum())
            sce = -float((p * log_q).sum())
            total += w * (ce_w * ce + tv_w * tv + sce_w * sce)
            weight += w
    return total / weight


@pytest.mark.parametrize("weights", [(0.1, 0.9, 0.0, 4.0), (0.0, 0.0, 1.0, EAGLE3_DECAY), (0.5, 0.2, 0.3, 2.0)])
def test_block_loss_equals_the_hand_computation(weights) -> None:
    ce_w, tv_w, sce_w, decay = weights
    cfg = DrafterTrainConfig(ce_weight=ce_w, tv_weight=tv_w, soft_ce_weight=sce_w, loss_decay=decay)
    output, targets = batch()
    value, parts = block_loss(output, targets, cfg)
    assert float(value) == pytest.approx(by_hand(output, targets, ce_w, tv_w, sce_w, decay), rel=1e-5)
    assert ("soft_ce" in parts) == (sce_w > 0)


def test_eagle3_decay_gives_its_step_weights() -> None:
    assert position_weights(7, EAGLE3_DECAY).tolist() == pytest.approx([0.8 ** k for k in range(7)])


def test_soft_cross_entropy_is_least_at_the_target_distribution() -> None:
    """Eagle3's loss is minimised by the target's whole distribution, not by its sampled token."""
    cfg = DrafterTrainConfig(ce_weight=0.0, tv_weight=0.0, soft_ce_weight=1.0, loss_decay=EAGLE3_DECAY)
    probs = torch.tensor([0.6, 0.3, 0.1]).expand(1, 1, 1, 3)
    targets = BlockTargets(torch.zeros(1, 1, 1, dtype=torch.long), probs, torch.ones(1, 1, 1, dtype=torch.bool))
    at_target, _ = block_loss(BlockOutput(probs.log()), targets, cfg)
    one_hot, _ = block_loss(BlockOutput(torch.tensor([5.0, 0.0, 0.0]).expand(1, 1, 1, 3)), targets, cfg)
    assert float(at_target) == pytest.approx(-(0.6 * math.log(0.6) + 0.3 * math.log(0.3) + 0.1 * math.log(0.1)), rel=1e-5)
    assert float(at_target) < float(one_hot)
