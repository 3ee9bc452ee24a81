"""Hand-offs to the serving engines (chapters 05, 06b and 07;
chapter 06b writes both): the two files this book teaches a
reader to make, written in the formats SGLang's DSpark flags and TensorRT-LLM's DSpark config read.

Read from SGLang's source (sgl-project/sglang at commit 692c5f7,
`python/sglang/srt/speculative/dspark_components/`):

* `--speculative-dspark-sps-table-path`: `dspark_sps_table.py`, `SpsCostTable` as JSON,
  `{"sample_batch_tokens": [...], "sample_steps_per_sec": [...], "max_batch_tokens": ...}`:
  batch sizes B in tokens (integers >= 1, strictly increasing), forward steps per second at each,
  and the largest batch the engine may build (>= the largest B). The engine reads SPS(B) as the
  rate of the largest tabulated size <= B (`floor_probe_index`), not an interpolation, so
  `sglang_sps_table` writes every integer B of the curve's range: the floor then returns exactly
  the SPS(B) that `stepcurve.StepCurve` interpolates.
* `--speculative-dspark-confidence-sts-path`: `dspark_sts_table.py`, `DSparkStsCalibration` as
  JSON, `{"temperatures": [...], "dataset": ..., "num_samples": ..., "ece_before": [...],
  "ece_after": [...]}`: one temperature T_k > 0 per draft position, applied by the confidence
  head as sigmoid(z_k / T_k) (`apply_sts` in SGLang's DSpark confidence head), which is what
  `calibration.SequentialTemperatureScaling.transform` computes before the sigmoid.

Read from TensorRT-LLM's source (NVIDIA/TensorRT-LLM, `tensorrt_llm/_torch/speculative/`; its DSpark
confidence-scheduling files were read at the commits named in `TRTLLM_SOURCES`, one per file, as the
store held them):

* `confidence_sts_path`: `dspark_sts.py`, `load_sts_temperatures_from_path`: one JSON object whose
  key `sts_temperatures` (TensorRT-LLM's spelling; SGLang's `temperatures` is also accepted) holds a
  non-empty list of per-position temperatures, applied by the confidence head as
  sigmoid(logit_j / T_j). Other keys are not read, so `trtllm_sts_calibration` puts provenance under
  `_meta`, as TensorRT-LLM's profiler does.
* `confidence_sps_table_path`: the cost-curve file `dspark_sps_profiler.py`'s
  `build_cost_table_payload` writes and `load_cost_table` / `dspark_planner.py`'s `SpsCostTable`
  read: `{"token_counts": [...], "step_time_ms": [...], "fixed_overhead_ms": ...,
  "batch_sizes": [...], "batch_overhead_ms": [...]}` (the last three optional). The planner's step
  cost is T(bs, M) = fixed_overhead_ms + alpha(bs) + theta(M) in milliseconds, theta read from
  `step_time_ms` by clamped linear interpolation in M, alpha from the batch axis; M is
  `total_verify_tokens`: requests times (verify length + 1), the bonus token included, which is
  this book's B = sum_r (1 + l_r). `token_counts` strictly increasing, `step_time_ms` positive and
  finite. The planner at a later stored commit (7fbff6f) reads only a "schema-v2" exact table
  sealed with a live engine fingerprint, which only a TensorRT-LLM deployment can produce; the
  curve here is the format the profiler writes.
* The config fields that take the two paths are `DSparkDecodingConfig.confidence_sps_table_path` and
  `confidence_sts_path`, with `enable_confidence_scheduling` (read in the DSpark worker's
  `_build_verify_planner` and in TensorRT-LLM's tests of the config); names such as
  `confidence_cost_table_path` or `confidence_calibration_path` do not occur in the source read.
  The stored `tensorrt_llm/llmapi/llm_args.py` (commit 0004396) and `dspark.py` (commits 005c932,
  f959159) have a DSpark without confidence scheduling and without these fields; the fields live on
  the other commits read.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...stepcurve import StepCurve

SGLANG_COMMIT = "692c5f7d532f129424b57961c262bbd253b411dc"
SGLANG_SPS_FLAG = "--speculative-dspark-sps-table-path"
SGLANG_STS_FLAG = "--speculative-dspark-confidence-sts-path"

TRTLLM_SOURCES = {  # file under tensorrt_llm/_torch/speculative/ -> the commit it was read at
    "dspark_sts.py": "0ee1e73f39abbdf6fed7451ebf2102c8b8f1a60e",
    "dspark_planner.py": "52cd02d5b6344ae30ef638e5f94cfe474262cde2",
    "dspark_sps_profiler.py": "e1c28eeae21d463e82ceb18ddb18b611ed36a80c",
}
TRTLLM_SPS_FIELD = "confidence_sps_table_path"
TRTLLM_STS_FIELD = "confidence_sts_path"
TRTLLM_ENABLE_FIELD = "enable_confidence_scheduling"
MS_PER_SECOND = 1000.0


def sglang_sps_table(curve: StepCurve) -> dict[str, Any]:
    """`curve` (SPS(B), steps per second at B batch tokens) as SGLang's `SpsCostTable`: every integer
    B from the curve's first to its last size, so that SGLang's floor lookup returns the curve's
    own interpolated SPS(B); the largest batch is the curve's."""
    sizes = np.arange(curve.min_batch, curve.max_batch + 1)
    return {"sample_batch_tokens": [int(b) for b in sizes],
            "sample_steps_per_sec": [float(s) for s in curve.table[sizes]],
            "max_batch_tokens": int(curve.max_batch)}


def sglang_sts_calibration(temperatures: Sequence[float], dataset: str = "", num_samples: int = 0,
                           ece_before: Sequence[float] = (), ece_after: Sequence[float] = ()) -> dict[str, Any]:
    """STS's temperatures T_1..T_gamma (`SequentialTemperatureScaling.temperatures_`) as SGLang's
    `DSparkStsCalibration`, with what they were fitted on and the per-position ECE before and after
   . ValueError for an empty list or a temperature that is not > 0, as SGLang refuses."""
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


def trtllm_cost_table(curve: StepCurve) -> dict[str, Any]:
    """`curve` (SPS(B), steps per second at B batch tokens) as TensorRT-LLM's DSpark cost curve
   : `token_counts` M and `step_time_ms` = 1000 / SPS(M) at every integer M of the
    curve's range, so that TensorRT-LLM's interpolating lookup (and a floor lookup alike) returns the
    curve's own step time at every M it can be asked.

    Units: M is TensorRT-LLM's `total_verify_tokens`, each request's verify length plus its bonus
    token, summed over the batch: the same count as this book's B = sum_r (1 + l_r), so no shift.
    Time: milliseconds per forward step, the reciprocal of SPS.

    What the mapping assumes: TensorRT-LLM's planner costs a step as fixed_overhead_ms + alpha(bs) +
    theta(M). The book's profile varies only B (a forward of B tokens), so it measures the whole
    step as a function of M and cannot separate the M-independent floor (bias, alpha(bs)) from
    theta(M). The planner uses only their sum, so the honest encoding is the whole step in
    `step_time_ms` with `fixed_overhead_ms` 0 and no batch axis, which TensorRT-LLM's loader reads as
    "step_time_ms already measures whole steps". It does not fit a split (the profiler extrapolates
    theta linearly to zero at M = 0); `_meta` says which encoding this is, so nobody adds a floor on
    top. Outside the curve's range TensorRT-LLM clamps where `StepCurve` refuses: bound the server's
    largest batch by the curve's largest B."""
    sizes = np.arange(curve.min_batch, curve.max_batch + 1)
    step_ms = MS_PER_SECOND / curve.table[sizes]
    if not np.all(np.isfinite(step_ms)) or np.any(step_ms <= 0):
        raise ValueError("the step curve gives a step time that is not positive and finite; "
                         "TensorRT-LLM refuses such a table")
    return {"token_counts": [int(m) for m in sizes],
            "step_time_ms": [float(t) for t in step_ms],
            "fixed_overhead_ms": 0.0,
            "_meta": {"encoding": "whole-step",
                      "note": "step_time_ms is the whole step's time at M verified tokens; "
                              "fixed_overhead_ms is 0 and there is no batch axis: add no floor on top",
                      "token_unit": "total_verify_tokens = sum over requests of (verify_len + 1), "
                                    "the bonus token included",
                      "lookup": "interp",  # every integer M is present: interp and floor agree
                      "written_by": "dspark_lite.harness.serving.engines.trtllm_cost_table"}}


def trtllm_sts_calibration(temperatures: Sequence[float], dataset: str = "", num_samples: int = 0,
                           ece_before: Sequence[float] = (), ece_after: Sequence[float] = ()) -> dict[str, Any]:
    """STS's temperatures T_1..T_gamma as TensorRT-LLM's STS file: key `sts_temperatures`, what the
    fit was made on under `_meta` (TensorRT-LLM reads only the temperatures). ValueError for an
    empty list or a temperature that is not finite and > 0."""
    payload = sglang_sts_calibration(temperatures, dataset, num_samples, ece_before, ece_after)
    meta = {key: value for key, value in payload.items() if key != "temperatures"}
    return {"sts_temperatures": payload["temperatures"], **({"_meta": meta} if meta else {})}


def trtllm_config(draft: str, max_draft_len: int, sps_table: str | Path, sts: str | Path) -> str:
    """The `speculative_config` block of a TensorRT-LLM YAML that reads both files (the GPU-protocol
    appendix shows it; the book never runs it). Some of the commits read also refuse confidence
    scheduling without `enable_ragged_verify: true`; the appendix says so."""
    return ("speculative_config:\n"
            "  decoding_type: DSpark\n"
            f"  speculative_model: {draft}\n"
            f"  max_draft_len: {int(max_draft_len)}\n"
            f"  {TRTLLM_ENABLE_FIELD}: true\n"
            f"  {TRTLLM_SPS_FIELD}: {sps_table}\n"
            f"  {TRTLLM_STS_FIELD}: {sts}\n")


def write_json(payload: dict[str, Any], path: str | Path) -> Path:
    """Write an engine's file (one JSON object) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload) + "\n")
    return path


SGLANG_STS_FILE = "sglang_sts.json"
TRTLLM_STS_FILE = "trtllm_sts.json"


def write_sts_files(temperatures: Sequence[float], folder: str | Path, dataset: str = "", num_samples: int = 0,
                    ece_before: Sequence[float] = (), ece_after: Sequence[float] = ()) -> tuple[Path, Path]:
    """One STS fit handed to both engines: `sglang_sts.json` for SGLang's
    `--speculative-dspark-confidence-sts-path` and `trtllm_sts.json` for TensorRT-LLM's
    `confidence_sts_path`, in `folder`, the same temperatures under each engine's key, with what
    they were fitted on. Returns the two paths (SGLang's, TensorRT-LLM's)."""
    folder = Path(folder)
    sglang = sglang_sts_calibration(temperatures, dataset, num_samples, ece_before, ece_after)
    trtllm = trtllm_sts_calibration(temperatures, dataset, num_samples, ece_before, ece_after)
    return write_json(sglang, folder / SGLANG_STS_FILE), write_json(trtllm, folder / TRTLLM_STS_FILE)


def sglang_command(model: str, draft: str, sps_table: str | Path, sts: str | Path) -> str:
    """The SGLang launch command that reads both files (the book prints it, never runs it)."""
    return (f"python -m sglang.launch_server --model-path {model} --speculative-algorithm DSPARK "
            f"--speculative-draft-model-path {draft} {SGLANG_SPS_FLAG} {sps_table} {SGLANG_STS_FLAG} {sts}")
