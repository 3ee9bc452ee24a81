"""Chapter 07's device handling (the GPU check of chapter 93), and the one line every chapter's first output can show: which
device a run uses, in which dtype, with how many worker processes (`runtime_banner`).

`launch_device` turns a command line's device into one CUDA calls accept: `torch.device("cuda")`
has no index, and `torch.cuda.set_device` refuses it ("Expected a torch.device with a specified
index"), so "cuda" and "auto" become cuda:LOCAL_RANK (cuda:0 outside torchrun).
"""
from __future__ import annotations

import os

import torch

from ...runtime import bf16_autocast_pays
from ..toy.workers import worker_processes


def local_rank() -> int:
    """torchrun's LOCAL_RANK (0 without torchrun); ValueError when it is not a whole number >= 0."""
    raw = os.environ.get("LOCAL_RANK", "0").strip() or "0"
    if not raw.isdigit():
        raise ValueError(f"LOCAL_RANK={raw!r}; expected a whole number >= 0 (torchrun sets it)")
    return int(raw)


def launch_device(name: str | torch.device = "auto") -> torch.device:
    """The device a run measures on, always with an index on CUDA: "auto" gives cuda:LOCAL_RANK
    when a GPU is visible, else the CPU; "cuda" gives cuda:LOCAL_RANK; "cuda:N" and "cpu" stay.
    ValueError for a name torch does not know, for CUDA without a visible GPU, and for an index
    beyond the visible GPUs."""
    text = str(name).strip().lower()
    if text == "auto":
        return torch.device(f"cuda:{local_rank()}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        raise ValueError(f"device {name!r} is not a torch device; expected auto, cpu, cuda or cuda:N") from None
    if device.type == "cpu":
        return device
    if device.type != "cuda":
        raise ValueError(f"device {name!r}: this measurement runs on cpu or cuda, got {device.type}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {name!r} but torch.cuda.is_available() is False: no usable CUDA GPU")
    index = local_rank() if device.index is None else device.index
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device cuda:{index} but {count} CUDA device(s) are visible (cuda:0..cuda:{count - 1})")
    return torch.device(f"cuda:{index}")


def runtime_banner(device: torch.device | str, dtype: torch.dtype = torch.float32) -> str:
    """One line for a chapter's first output: the device (with the GPU's name), the dtype of the
    models' weights (the toy world's: float32), whether training matmuls run in bf16 autocast there
    (`runtime.bf16_autocast_pays`), and how many worker processes the toy world's long jobs use
    (`workers.worker_processes`: one on a GPU, where nothing forks after CUDA starts)."""
    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        where = f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    else:
        where = "cpu"
    workers = worker_processes(device)
    autocast = ", training matmuls in bf16 autocast" if bf16_autocast_pays(device, wide=True) else ""
    return (f"device {where}; weights {str(dtype).replace('torch.', '')}{autocast}; {workers} worker "
            f"process{'es' if workers != 1 else ''}; {torch.get_num_threads()} torch threads")
