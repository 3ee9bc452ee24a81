"""Timing on a shared machine (chapters 02, 04, 06b): synchronised wall-clock seconds, and
medians of several timings that take turns.

A CPU shared with other work drifts (frequency, other processes) over seconds. Timing A ten
times and then B ten times lets a drift land on one of them; taking turns, A B A B in a fresh
random order each round, spreads it over both. Every comparison of timings in the book goes
through `interleaved_medians`.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
from transformers import PreTrainedModel

from ...progress import progress


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on a CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(call: Callable[[], object], device: torch.device) -> float:
    """Wall-clock seconds of `call()`, the device synchronised before and after."""
    sync(device)
    start = time.perf_counter()
    call()
    sync(device)
    return time.perf_counter() - start


def interleaved_medians(count: int, time_one: Callable[[int], float], repeats: int, warmup: int,
                        generator: torch.Generator, desc: str | None = None) -> list[float]:
    """The median of `repeats` timings of each of `count` things. `time_one(i)` times thing i once
    and returns its seconds (untimed set-up inside it is fine). Every round times each thing once,
    in a fresh random order drawn from `generator`; the first `warmup` rounds are not kept."""
    if count < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"need count >= 1, repeats >= 1 and warmup >= 0; got {count}, {repeats}, {warmup}")
    times: list[list[float]] = [[] for _ in range(count)]
    for round_ in progress(range(warmup + repeats), desc=desc, leave=False, disable=desc is None):
        for i in torch.randperm(count, generator=generator).tolist():
            elapsed = time_one(i)
            if round_ >= warmup:
                times[i].append(elapsed)
    return [statistics.median(t) for t in times]


def check_positions(model: PreTrainedModel, needed: int) -> None:
    """ValueError when `needed` positions exceed the model's max_position_embeddings."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and needed > limit:
        raise ValueError(f"context plus query block needs {needed} positions, beyond the target's "
                         f"max_position_embeddings = {limit}; use a shorter context_len")
