"""Device, dtype and seeds, shared by every chapter (chapter 00 sets them up; chapter 07 picks
bf16 on a GPU): where a model runs, in which dtype (and where bf16 autocast pays), and the random
generators that make a run repeatable.
"""
from __future__ import annotations

import random

import numpy as np
import torch


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" picks CUDA when present, else the CPU; anything else must be a device torch knows,
    and a CUDA one only when a GPU is visible (ValueError otherwise)."""
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
    """A torch.Generator seeded with `seed` that draws on `device`. Sampling with it
    draws where the probabilities already are: on a GPU nothing is copied to the CPU and back for a
    draw. A CUDA generator's stream differs from the CPU's, so the same seed gives other (equally
    valid) samples on a GPU; on the CPU the numbers are the ones the book was built with."""
    return torch.Generator(device=device).manual_seed(seed)


def pick_dtype(device: torch.device) -> torch.dtype:
    """The dtype a model runs in on `device`, decided in one place by compute
    capability: bf16 on a GPU of capability 8.0 or newer (Ampere: A100, A10, L4, H100, ...), float32
    everywhere else. Not fp16 below 8.0: DeepSpec evaluates in bf16 only and Qwen3's activations
    overflow fp16. Not `torch.cuda.is_bf16_supported()`: it answers True on a T4 (sm 7.5), which has
    no bf16 tensor cores and only emulates bf16, several times slower."""
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16
    return torch.float32


def bf16_autocast_pays(device: torch.device, wide: bool = False) -> bool:
    """Whether bf16 autocast makes `device`'s matmuls faster: a GPU where `pick_dtype` picks bf16; a
    CPU with AMX; and, for `wide` matmuls (a language model's training batch, thousands of rows), a
    CPU with AVX512-BF16 (measured on a 2-core EPYC: the toy target's training step about 1.5x
    faster, a drafter's small step about 1.3x slower)."""
    if device.type == "cpu":
        amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        return amx or (wide and getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())
    return pick_dtype(device) == torch.bfloat16


def fast_autocast(device: torch.device, wide: bool = False) -> torch.autocast:
    """bf16 autocast where `bf16_autocast_pays` says so for `device` and `wide`; else a no-op. Master
    weights and the optimiser stay in float32; only the matmuls run in bf16."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16_autocast_pays(device, wide))
