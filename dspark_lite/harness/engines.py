"""Hand-offs to the serving engines (chapters 05, 06b and 07): the two files this book teaches a
reader to make, written in the formats SGLang's DSpark flags read.

Read from SGLang's source (sgl-project/sglang at commit 692c5f7,
`python/sglang/srt/speculative/dspark_components/`):

* `--speculative-dspark-sps-table-path`: `dspark_sps_table.py`, `SpsCostTable` as JSON,
  `{"sample_batch_tokens": [...], "sample_steps_per_sec": [...], "max_batch_tokens": ...}`:
  batch sizes B in tokens (integers >= 1, strictly increasing), forward steps per second at each,
  and the largest batch the engine may build (>= the largest B). The engine reads SPS(B) as the
  rate of the largest tabulated size <= B (`floor_probe_index`), not an interpolation, so
  `sglang_sps_table` writes every integer B of the curve's range: the floor then returns exactly
  the SPS(B) that `scheduler.StepCurve` interpolates.
* `--speculative-dspark-confidence-sts-path`: `dspark_sts_table.py`, `DSparkStsCalibration` as
  JSON, `{"temperatures": [...], "dataset": ..., "num_samples": ..., "ece_before": [...],
  "ece_after": [...]}`: one temperature T_k > 0 per draft position, applied by the confidence
  head as sigmoid(z_k / T_k) (`apply_sts` in SGLang's DSpark confidence head), which is what
  `calibration.SequentialTemperatureScaling.transform` computes before the sigmoid.

TensorRT-LLM's `DSparkDecodingConfig(confidence_cost_table_path=..., confidence_calibration_path=...)`
and vLLM's `speculative_config` are named in chapter 07 but not written here: their file formats
were not found in the sources at hand.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..scheduler import StepCurve

SGLANG_COMMIT = "692c5f7d532f129424b57961c262bbd253b411dc"
SGLANG_SPS_FLAG = "--speculative-dspark-sps-table-path"
SGLANG_STS_FLAG = "--speculative-dspark-confidence-sts-path"


def sglang_sps_table(curve: StepCurve) -> dict[str, Any]:
    """`curve` (SPS(B), steps per second at B batch tokens) as SGLang's `SpsCostTable`: every integer
    B from the curve's first to its last size, so that SGLang's floor lookup returns the curve's
    own interpolated SPS(B); the largest batch is the curve's (chapter 06b)."""
    sizes = np.arange(curve.min_batch, curve.max_batch + 1)
    return {"sample_batch_tokens": [int(b) for b in sizes],
            "sample_steps_per_sec": [float(s) for s in curve.table[sizes]],
            "max_batch_tokens": int(curve.max_batch)}


def sglang_sts_calibration(temperatures: Sequence[float], dataset: str = "", num_samples: int = 0,
                           ece_before: Sequence[float] = (), ece_after: Sequence[float] = ()) -> dict[str, Any]:
    """STS's temperatures T_1..T_gamma (`SequentialTemperatureScaling.temperatures_`) as SGLang's
    `DSparkStsCalibration`, with what they were fitted on and the per-position ECE before and after
    (chapter 05). ValueError for an empty list or a temperature that is not > 0, as SGLang refuses."""
    temperatures = [float(t) for t in temperatures]
    if not temperatures or not all(np.isfinite(t) and t > 0 for t in temperatures):
        raise ValueError(f"STS needs one finite temperature > 0 per draft position, got {temperatures}")
    payload: dict[str, Any] = {"temperatures": temperatures}
    if dataset:
        payload["dataset"] = str(dataset)
    if num_samples:
        payload["num_samples"] = int(num_samples)
    if len(ece_before):
        payload["ece_before"] = [float(e) for e in ece_before]
    if len(ece_after):
        payload["ece_after"] = [float(e) for e in ece_after]
    return payload  # SGLang's struct omits defaults; so do we


def write_json(payload: dict[str, Any], path: str | Path) -> Path:
    """Write an engine's file (one JSON object) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload) + "\n")
    return path


def sglang_command(model: str, draft: str, sps_table: str | Path, sts: str | Path) -> str:
    """The SGLang launch command that reads both files (chapter 07 prints it; the book never runs it)."""
    return (f"python -m sglang.launch_server --model-path {model} --speculative-algorithm DSPARK "
            f"--speculative-draft-model-path {draft} {SGLANG_SPS_FLAG} {sps_table} {SGLANG_STS_FLAG} {sts}")
