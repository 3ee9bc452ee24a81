"""Resumable training (chapter 00): long trainings survive an interruption.

A training loop saves its whole state (weights, optimiser, schedule, random generators, data
order, step and loss curves) every `every_seconds` into a file in the artifact cache's
work folder for that artifact, atomically (written under a temporary name, then renamed).
Run again with the same config, it finds the file and continues from the saved step; the
result is bit-identical to an uninterrupted run on the same machine (tests/test_resume.py).

The interval is ``$DSPARK_CHECKPOINT_SECONDS`` (default 120 s): an interruption loses at most
that much training. A finished artifact deletes its checkpoint.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

import torch

ENV_VAR = "DSPARK_CHECKPOINT_SECONDS"
DEFAULT_SECONDS = 120.0
FILE = "checkpoint.pt"


def interval_seconds() -> float:
    """The checkpoint interval: $DSPARK_CHECKPOINT_SECONDS, else 120 s."""
    raw = os.environ.get(ENV_VAR)
    if raw is None:
        return DEFAULT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be a number of seconds, got {raw!r}") from None
    if seconds < 0:
        raise ValueError(f"{ENV_VAR} must be >= 0 seconds, got {seconds}")
    return seconds


class Checkpointer:
    """Saves and restores one training's state in `folder` (None: a no-op, for trainings outside the cache).

    `every_seconds` None reads $DSPARK_CHECKPOINT_SECONDS; 0 saves after every step (tests).
    """

    def __init__(self, folder: Path | None, every_seconds: float | None = None) -> None:
        self.path = None if folder is None else Path(folder) / FILE
        self.every_seconds = interval_seconds() if every_seconds is None else float(every_seconds)
        self._last = time.monotonic()

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when there is none (a fresh start)."""
        if self.path is None or not self.path.exists():
            return None
        return torch.load(self.path, weights_only=False)

    def maybe_save(self, state: Callable[[], dict[str, Any]], last_step: bool = False) -> bool:
        """Save `state()` when the interval has passed (never after the last step: the artifact is
        about to be written). Returns whether it saved."""
        if self.path is None or last_step or time.monotonic() - self._last < self.every_seconds:
            return False
        self.save(state())
        return True

    def save(self, state: dict[str, Any]) -> None:
        """Write `state` atomically: a reader sees the previous checkpoint or this one, never half of one."""
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.tmp{os.getpid()}")
        torch.save(state, tmp)
        os.replace(tmp, self.path)
        self._last = time.monotonic()

    def clear(self) -> None:
        """Delete the checkpoint (the training finished), and any half-written one a kill left."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            for partial in self.path.parent.glob(f"{self.path.name}.tmp*"):
                partial.unlink()


def rng_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The training's random state: its own generator and torch's global one (dropout, init)."""
    return {"generator": generator.get_state(), "torch": torch.get_rng_state()}


def restore_rng(generator: torch.Generator, state: dict[str, torch.Tensor]) -> None:
    """Undo `rng_state`."""
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch"])
