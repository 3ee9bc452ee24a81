"""Device and seed handling shared by every chapter (chapter 00)."""
from __future__ import annotations

import random

import numpy as np
import torch


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" picks CUDA when present, else the CPU; anything else must be a valid torch device."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"DEVICE={device!r} is not a torch device (try 'auto', 'cpu' or 'cuda')") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"DEVICE={device!r} but no CUDA GPU is visible; use DEVICE='auto' or 'cpu'")
    return resolved


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch.Generator seeded the same way."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)
