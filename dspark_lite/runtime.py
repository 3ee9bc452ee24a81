"""Device and seed handling shared by every chapter (chapter 00)."""
from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging


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


@contextmanager
def quiet_hub_bars() -> Iterator[None]:
    """Hide transformers' own "Loading weights" / "Writing model shards" bars while loading or
    saving a cached model: a chapter shows one progress bar per long cell, its own."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def progress(iterable: Any = None, **kwargs: Any) -> tqdm:
    """tqdm's bar, the one the package shows for every long loop. A chapter cell shows one bar:
    the outermost. A bar opened while another is open is transient (`leave=False`: it shows while
    it runs and is gone when it ends), so a cell that wraps several long calls in a bar of its
    own keeps only that one, with its rate and time, in the rendered page."""
    kwargs.setdefault("leave", all(bar.disable for bar in list(tqdm._instances)))  # no bar showing
    return tqdm(iterable, **kwargs)
