"""Resumable training: long trainings survive an interruption (chapter 00 runs the book on it;
the drafter trainer of section 3.3, `training.train_drafters`, saves and restores through it).

A training loop saves its whole state (weights, optimiser, schedule, random generators, data
order, step and loss curves) every `every_seconds` into a file in the artifact cache's
work folder for that artifact, atomically (written under a temporary name, then renamed).
Run again with the same config, it finds the file and continues from the saved step; the
result is bit-identical to an uninterrupted run on the same machine (tests/test_resume.py).

The interval is ``$DSPARK_CHECKPOINT_SECONDS`` (default 120 s): an interruption loses at most
that much training. A finished artifact deletes its checkpoint.

A training's state is its step, its random generator, its data order and its named runs, each
with `state_dict()` / `load_state_dict()` as torch's objects have (`training_state`,
`resume_training`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from . import checks

ENV_VAR = "DSPARK_CHECKPOINT_SECONDS"
DEFAULT_SECONDS = 120.0
FILE = "checkpoint.pt"


def interval_seconds() -> float:
    """The checkpoint interval: $DSPARK_CHECKPOINT_SECONDS, else 120 s."""
    raw = os.environ.get(ENV_VAR)
    if raw is None:
        return DEFAULT_SECONDS
    seconds = checks.float_array(raw, f"{ENV_VAR} (seconds between checkpoints)")
    return checks.in_interval(float(seconds), ENV_VAR, 0.0)


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


def training_state(step: int, generator: torch.Generator, batches: Any, runs: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a training loop needs to continue after `step` steps: the random state, the
    data order (`batches.state_dict()`) and every named run's `state_dict()`."""
    return {"step": step, "rng": rng_state(generator), "batches": batches.state_dict(),
            "runs": {name: run.state_dict() for name, run in runs.items()}}


def resume_training(checkpoint: Checkpointer, generator: torch.Generator, batches: Any, runs: Mapping[str, Any],
                    desc: str) -> int:
    """Restore a saved `training_state` (if there is one) into the generator, the data order and
    the runs; return the steps done (0: a fresh start)."""
    saved = checkpoint.load()
    if saved is None:
        return 0
    _checkpoint_runs(saved["runs"], runs, checkpoint.path)
    for name, run in runs.items():
        run.load_state_dict(saved["runs"][name])
    batches.load_state_dict(saved["batches"])
    restore_rng(generator, saved["rng"])
    print(f"{desc}: resuming from the checkpoint at step {saved['step']} ({checkpoint.path})")
    return int(saved["step"])


# --- checks (this module's door)


def _checkpoint_runs(saved: Mapping[str, Any], runs: Mapping[str, Any], path: Any) -> None:
    """ValueError unless the checkpoint at `path` holds exactly the named runs being trained."""
    if set(saved) != set(runs):
        raise ValueError(f"{path} holds drafters {sorted(saved)}, not {sorted(runs)}; delete it")
