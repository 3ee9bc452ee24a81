"""Rollouts from a known model, for the calibration and widget tests (test-only)."""
from __future__ import annotations

import numpy as np

from dspark_lite.record import sigmoid


def synthetic_rollouts(n_blocks: int, gamma: int, overconfidence: float = 3.0,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rollouts from a known model (the tests of chapter 05's calibrators): position k of a block survives, given the
    earlier ones did, with probability sigmoid(z_k), z_k ~ Normal(1, 1.2); the head reports the
    logit overconfidence * z_k. Returns (logits, n_acc, true_conditional)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(1.0, 1.2, size=(n_blocks, gamma))
    true = sigmoid(z)
    accepted = rng.random((n_blocks, gamma)) < true
    n_acc = np.cumprod(accepted, axis=1).sum(axis=1)
    return overconfidence * z, n_acc, true
