"""Device and seed handling shared by every chapter (chapter 00)."""
from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
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


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of a model's first parameter."""
    return next(model.parameters()).device


def seed_everything(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch.Generator on `device` seeded the same way
    (`device_generator`)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return device_generator(seed, device)


def device_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch.Generator seeded with `seed` that draws on `device` (chapter 00). Sampling with it
    draws where the probabilities already are: on a GPU nothing is copied to the CPU and back for a
    draw. A CUDA generator's stream differs from the CPU's, so the same seed gives other (equally
    valid) samples on a GPU; on the CPU the numbers are the ones the book was built with."""
    return torch.Generator(device=device).manual_seed(seed)


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


def pick_dtype(device: torch.device) -> torch.dtype:
    """The dtype a model runs in on `device` (chapters 00 and 07), decided in one place by compute
    capability: bf16 on a GPU of capability 8.0 or newer (Ampere: A100, A10, L4, H100, ...), float32
    everywhere else. Not fp16 below 8.0: DeepSpec evaluates in bf16 only and Qwen3's activations
    overflow fp16. Not `torch.cuda.is_bf16_supported()`: it answers True on a T4 (sm 7.5), which has
    no bf16 tensor cores and only emulates bf16, several times slower."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16
    return torch.float32


def bf16_autocast_pays(device: torch.device) -> bool:
    """Whether `device` has fast bf16 matmuls: a GPU where `pick_dtype` picks bf16, or a CPU with AMX."""
    if device.type == "cpu":
        return getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return pick_dtype(device) == torch.bfloat16


def fast_autocast(device: torch.device) -> torch.autocast:
    """bf16 autocast where `bf16_autocast_pays(device)`; else a no-op. Master weights and the
    optimiser stay in float32; only the matmuls run in bf16."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_autocast_pays(device))


def optimizer_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer, schedule, parameters,
                   max_grad_norm: float = 1.0) -> None:
    """Backward, clip the gradient norm, step the optimiser and the schedule, clear gradients
    (chapter 01; the drafter trainer of chapter 03 uses it too)."""
    loss.backward()
    torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)


def check_finite(desc: str, loss: float) -> None:
    """Raise if a training run ended with a non-finite loss."""
    if not math.isfinite(loss):
        raise RuntimeError(f"{desc}: training diverged (final loss {loss})")


def pad(rows: "list[torch.Tensor]", value: int, side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows of different lengths as one LongTensor [N, longest] padded with `value` on `side`
    ("left" or "right"), and the mask of real tokens [N, longest] (1 real, 0 pad)."""
    ids = pad_sequence([torch.as_tensor(r).long() for r in rows], batch_first=True, padding_value=value,
                       padding_side=side)
    mask = pad_sequence([torch.ones(len(r), dtype=torch.long) for r in rows], batch_first=True, padding_side=side)
    return ids, mask
