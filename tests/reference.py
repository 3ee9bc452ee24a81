"""Reference statistics the tests hold our code against (scipy; a test dependency only)."""
from __future__ import annotations

import numpy as np
from scipy import stats

SIGNIFICANCE = 1e-3  # p-values below this fail a goodness-of-fit test (fixed seeds: no flakes)


def chi_square_p_value(counts: np.ndarray, probs: np.ndarray) -> float:
    """Pearson's chi-square goodness of fit of observed `counts` to the exact `probs`
    (scipy.stats.chisquare; `probs` renormalised in float64). Cells expected below 5 are pooled into one, so the chi-square
    approximation holds; a sample where the exact probability is 0 fails outright."""
    counts, probs = np.ravel(counts).astype(float), np.ravel(probs).astype(float)
    expected = probs / probs.sum() * counts.sum()  # a float32 softmax sums to 1 only within rounding
    small = expected < 5
    observed = np.append(counts[~small], counts[small].sum())
    expected = np.append(expected[~small], expected[small].sum())
    keep = expected > 0
    assert observed[~keep].sum() == 0, "a sample landed where the exact probability is 0"
    return float(stats.chisquare(observed[keep], expected[keep]).pvalue)
