"""One seaborn theme and palette for every figure in the book (chapter 00)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import seaborn as sns

DOMAIN_COLORS = {"math": "#1b9e77", "code": "#7570b3", "chat": "#d95f02"}


def set_theme() -> None:
    """Apply the book's figure style."""
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (7.0, 3.6)})
