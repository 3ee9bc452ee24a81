"""A released drafter's weights read without loading them all (chapter 07): the safetensors files
of a folder (one file or an index of shards), every key's shape from the headers, the tensors a
loader needs straight onto the target's device, and a few rows of a large matrix for a check;
and `CheckpointError`, what every loader raises for a checkpoint that does not fit.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class CheckpointError(ValueError):
    """A released checkpoint that does not fit: a missing, unexpected or mis-shaped key, a drafter
    of another target, or a config field dspark_lite cannot represent."""


# ========================================================================== files


def weight_files(folder: Path) -> list[Path]:
    index = folder / INDEX_FILE
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    single = folder / WEIGHTS_FILE
    if single.is_file():
        return [single]
    raise FileNotFoundError(f"no {WEIGHTS_FILE} (or {INDEX_FILE}) in {folder}; expected a released drafter folder")


def checkpoint_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape of every tensor in a released folder, read from the safetensors headers only."""
    from safetensors import safe_open

    shapes = {}
    for path in weight_files(Path(folder)):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    return shapes


def read_tensors(folder: Path, keys: set[str], device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors named in `keys`, read straight onto `device` (nothing else is read)."""
    from safetensors import safe_open

    tensors = {}
    for path in weight_files(folder):
        with safe_open(str(path), framework="pt", device=str(device)) as handle:
            tensors.update({key: handle.get_tensor(key) for key in handle.keys() if key in keys})
    return tensors


def read_rows(folder: Path, key: str, rows: list[int]) -> torch.Tensor:
    """Rows `rows` of the [vocab, hidden] tensor `key`, read one slice at a time: the 0.78 GB
    embedding of a Qwen3-4B drafter is never loaded to compare 16 rows."""
    from safetensors import safe_open

    for path in weight_files(folder):
        with safe_open(str(path), framework="pt") as handle:
            if key in handle.keys():
                table = handle.get_slice(key)
                return torch.cat([table[row:row + 1] for row in rows])
    raise CheckpointError(f"{folder}: no tensor {key!r}")
