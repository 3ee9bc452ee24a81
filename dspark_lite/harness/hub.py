"""The Hugging Face hub's own progress bars, hidden while the harness loads or saves a model
(the toy world's cached target, chapter 01; the GPU harness's Qwen3 checkpoints, chapter 07):
a chapter shows one progress bar per long cell, its own (`dspark_lite.progress`)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from transformers.utils import logging as hf_logging


@contextmanager
def quiet_hub_bars() -> Iterator[None]:
    """Hide transformers' "Loading weights" / "Writing model shards" bars inside the block."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
