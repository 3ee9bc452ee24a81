"""The hand-offs to SGLang and TensorRT-LLM (chapters 05, 06b, 07): files written by harness/engines.py
and read back by readers that follow each engine's own: SGLang's dspark_sps_table.py, dspark_sts_table.py
and the confidence head's apply_sts at engines.SGLANG_COMMIT; TensorRT-LLM's dspark_planner.py,
dspark_sps_profiler.py and dspark_sts.py at engines.TRTLLM_SOURCES: their checks, units and lookups."""
from __future__ import annotations

import bisect
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_lite import calibration, scheduler
from dspark_lite.harness.serving import engines
from dspark_lite.record import sigmoid
from dspark_lite.stepcurve import StepCurve


class SglangSps:
    """SpsCostTable as SGLang reads it: strictly increasing batch tokens, equal lengths, a largest batch
    no smaller than the largest probe, and the rate of the largest probe <= B (floor_probe_index)."""

    def __init__(self, path: Path) -> None:
        raw = json.loads(path.read_text())
        assert set(raw) == {"sample_batch_tokens", "sample_steps_per_sec", "max_batch_tokens"}, set(raw)
        self.tokens, self.sps, self.max_batch = raw["sample_batch_tokens"], raw["sample_steps_per_sec"], raw["max_batch_tokens"]
        if not self.tokens or self.tokens != sorted(set(self.tokens)) or not all(isinstance(b, int) for b in self.tokens):
            raise ValueError("sample_batch_tokens must be strictly increasing integers")
        if len(self.tokens) != len(self.sps) or self.max_batch < self.tokens[-1]:
            raise ValueError("mismatched lengths or max_batch_tokens below the largest probe")

    def lookup(self, batch_tokens: int) -> float:
        index = bisect.bisect_right(self.tokens, batch_tokens) - 1
        return self.sps[max(0, min(index, len(self.tokens) - 1))]


class SglangSts:
    """DSparkStsCalibration as SGLang reads it, and its confidence head's sigmoid(z / T_k)."""

    FIELDS = {"temperatures", "dataset", "num_samples", "ece_before", "ece_after"}

    def __init__(self, path: Path) -> None:
        raw = json.loads(path.read_text())
        assert set(raw) <= self.FIELDS and "temperatures" in raw, set(raw)
        if not raw["temperatures"] or any(t <= 0 for t in raw["temperatures"]):
            raise ValueError("temperatures must be non-empty and > 0")
        self.raw, self.temperatures = raw, np.asarray(raw["temperatures"], dtype=np.float64)

    def apply_sts(self, logits: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-logits / self.temperatures))


def test_the_sps_table_reads_back_as_the_curve_it_came_from(tmp_path: Path) -> None:
    curve = StepCurve((4, 8, 16, 40), (50.0, 48.0, 40.0, 21.0), {"device": "cpu"})
    path = engines.write_json(engines.sglang_sps_table(curve), tmp_path / "sps_table.json")
    table = SglangSps(path)
    assert table.tokens[0] == 4 and table.tokens[-1] == table.max_batch == 40
    for b in range(4, 41):  # SGLang's floor lookup returns the curve's own SPS(B) at every batch size
        assert table.lookup(b) == pytest.approx(float(curve.sps(b)), rel=1e-12), b
    assert table.lookup(1000) == pytest.approx(21.0)  # past the table: the last rate, as SGLang clamps
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**json.loads(path.read_text()), "max_batch_tokens": 39}))
    with pytest.raises(ValueError, match="max_batch_tokens"):
        SglangSps(broken)


def test_the_sts_file_reproduces_the_book_calibrated_confidences(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(1.0, 2.0, size=(400, 4))
    accepted = np.minimum((rng.random((400, 4)) < sigmoid(logits / 2.5)).cumprod(1).sum(1), 4)
    sts = calibration.SequentialTemperatureScaling().fit(logits, accepted)
    payload = engines.sglang_sts_calibration(sts.temperatures_, "toy world, chapter 05", 400, [0.2] * 4, [0.05] * 4)
    reader = SglangSts(engines.write_json(payload, tmp_path / "sts.json"))
    np.testing.assert_allclose(reader.apply_sts(logits), sigmoid(sts.transform(logits)), rtol=1e-12)
    assert reader.raw["num_samples"] == 400 and reader.raw["dataset"] == "toy world, chapter 05"
    assert set(engines.sglang_sts_calibration([1.0, 2.0])) == {"temperatures"}  # defaults omitted, as SGLang's
    for bad in ([], [1.0, 0.0], [1.0, float("nan")]):
        with pytest.raises(ValueError, match="temperature"):
            engines.sglang_sts_calibration(bad)


def test_the_launch_command_names_both_flags() -> None:
    command = engines.sglang_command("Qwen/Qwen3-4B", "deepseek-ai/dspark_qwen3_4b_block7", "sps.json", "sts.json")
    assert "--speculative-algorithm DSPARK" in command
    assert f"{engines.SGLANG_SPS_FLAG} sps.json" in command and f"{engines.SGLANG_STS_FLAG} sts.json" in command


# ----------------------------------------------------------------------------- TensorRT-LLM
# Readers written from TensorRT-LLM's DSpark source at the commits in engines.TRTLLM_SOURCES:
# dspark_planner.py's SpsCostTable and total_verify_tokens, dspark_sps_profiler.py's load_cost_table
# and dspark_sts.py's load_sts_temperatures_from_path. Stricter than theirs in one place, said below.

TRTLLM_EXACT_MARKERS = {"cost_tables", "engine_fingerprint", "engine_fingerprint_sha256", "measurements",
                        "schema_version"}  # a schema-v2 exact table, which this reader does not take


def total_verify_tokens(requests: int, verify_len: int) -> int:
    """M for `requests` requests each verifying `verify_len` drafts: one bonus token per request."""
    return requests * (verify_len + 1)


class TrtllmCostTable:
    """The cost curve as TensorRT-LLM's loader builds SpsCostTable: required `token_counts` and
    `step_time_ms`, optional `fixed_overhead_ms` and batch axis; step cost in ms =
    fixed + alpha(bs) + theta(M), theta and alpha by clamped linear interpolation."""

    def __init__(self, path: Path) -> None:
        raw = json.loads(path.read_text())
        if TRTLLM_EXACT_MARKERS & set(raw):
            raise ValueError("a schema-v2 exact table, not a cost curve")
        counts, times = raw["token_counts"], raw["step_time_ms"]  # KeyError when missing, as theirs
        # Stricter than TensorRT-LLM (which casts with int()): M must be an integer count >= 1.
        if not all(isinstance(m, int) and m >= 1 for m in counts):
            raise ValueError(f"token_counts must be integer verify-token counts >= 1, got {counts[:5]}...")
        self.fixed = float(raw.get("fixed_overhead_ms", 0.0))
        self.batch_sizes = [int(b) for b in raw.get("batch_sizes", [])]
        self.batch_ms = [float(t) for t in raw.get("batch_overhead_ms", [])]
        if not counts or len(counts) != len(times):
            raise ValueError("token_counts and step_time_ms must be non-empty and of the same length")
        if any(b <= a for a, b in zip(counts, counts[1:])):
            raise ValueError("token_counts must be strictly increasing")
        if any(not np.isfinite(t) or t <= 0 for t in times):
            raise ValueError("step_time_ms entries must be positive and finite")
        if not np.isfinite(self.fixed) or self.fixed < 0:
            raise ValueError("fixed_overhead_ms must be >= 0 and finite")
        sizes = self.batch_sizes
        if len(sizes) != len(self.batch_ms) or any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError("batch_sizes must be strictly increasing and match batch_overhead_ms")
        self.raw, self.counts, self.times = raw, np.asarray(counts, float), np.asarray(times, float)

    def step_time(self, num_tokens: int, num_requests: int = 0) -> float:
        alpha = float(np.interp(num_requests, self.batch_sizes, self.batch_ms)) if self.batch_sizes else 0.0
        return float(np.interp(num_tokens, self.counts, self.times)) + self.fixed + alpha


def trtllm_sts_temperatures(path: Path) -> list[float]:
    """TensorRT-LLM's STS loader: `sts_temperatures`, else SGLang's `temperatures`; non-empty."""
    raw = json.loads(path.read_text())
    for key in ("sts_temperatures", "temperatures"):
        if key in raw:
            temps = raw[key]
            break
    else:
        raise KeyError(f"neither 'sts_temperatures' nor 'temperatures' in {sorted(raw)}")
    if not temps:
        raise ValueError("empty temperature vector")
    return [float(t) for t in temps]


def test_the_trtllm_cost_table_reads_back_in_milliseconds_at_total_verify_tokens(tmp_path: Path) -> None:
    curve = StepCurve((4, 8, 16, 40), (50.0, 48.0, 40.0, 21.0), {"device": "cpu"})
    table = TrtllmCostTable(engines.write_json(engines.trtllm_cost_table(curve), tmp_path / "cost.json"))
    assert table.raw["fixed_overhead_ms"] == 0.0 and "batch_sizes" not in table.raw  # the whole step in theta
    for m in range(4, 41):  # milliseconds per step at M = B, the reciprocal of steps per second
        assert table.step_time(m) == pytest.approx(1000.0 / float(curve.sps(m)), rel=1e-12), m
    # Units end to end: 4 requests verifying 0, 2, 5 and 7 drafts submit M = 4 + 14 = 18 tokens,
    # the book's B; expected tokens over the table's seconds is the scheduler's own Theta.
    rng = np.random.default_rng(1)
    confidences = rng.uniform(0.3, 0.95, size=(4, 7))
    lengths = np.array([0, 2, 5, 7])
    m = sum(total_verify_tokens(1, int(length)) for length in lengths)
    assert m == int((1 + lengths).sum()) == 18
    tau = float((1 + np.where(np.arange(1, 8) <= lengths[:, None], np.cumprod(confidences, 1), 0.0).sum(1)).sum())
    assert tau / (table.step_time(m, 4) / 1000.0) == pytest.approx(
        scheduler.expected_throughput(confidences, lengths, curve), rel=1e-12)
    assert table.step_time(total_verify_tokens(8, 4)) == pytest.approx(1000.0 / float(curve.sps(40)))


def test_planted_bad_trtllm_cost_tables_are_refused(tmp_path: Path) -> None:
    curve = StepCurve((4, 8, 16, 40), (50.0, 48.0, 40.0, 21.0), {"device": "cpu"})
    good = engines.trtllm_cost_table(curve)

    def plant(name: str, payload: dict) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps(payload))
        return path

    with pytest.raises(KeyError, match="step_time_ms"):  # wrong key
        TrtllmCostTable(plant("key.json", {"token_counts": good["token_counts"],
                                           "step_times_ms": good["step_time_ms"]}))
    with pytest.raises(ValueError, match="positive"):  # a non-positive time
        TrtllmCostTable(plant("time.json", {**good, "step_time_ms": [0.0] + good["step_time_ms"][1:]}))
    with pytest.raises(ValueError, match="strictly increasing"):  # M out of order
        TrtllmCostTable(plant("order.json", {**good, "token_counts": good["token_counts"][::-1]}))
    with pytest.raises(ValueError, match="integer"):  # M not a token count
        TrtllmCostTable(plant("float.json", {**good, "token_counts": [m + 0.5 for m in good["token_counts"]]}))
    # M counted without the bonus tokens (drafts only, for a load of 3 requests) is a well-formed file
    # that costs every batch at the wrong size; the round trip against the curve catches it.
    shifted = TrtllmCostTable(plant("bonus.json", {**good, "token_counts": [m - 3 for m in good["token_counts"]]}))
    with pytest.raises(AssertionError):
        for m in range(4, 41):
            assert shifted.step_time(m) == pytest.approx(1000.0 / float(curve.sps(m)), rel=1e-9)
    with pytest.raises(ValueError, match="schema-v2"):
        TrtllmCostTable(plant("v2.json", {**good, "schema_version": 2}))


def test_the_trtllm_sts_file_reproduces_the_book_calibrated_confidences(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(1.0, 2.0, size=(400, 4))
    accepted = np.minimum((rng.random((400, 4)) < sigmoid(logits / 2.5)).cumprod(1).sum(1), 4)
    sts = calibration.SequentialTemperatureScaling().fit(logits, accepted)
    payload = engines.trtllm_sts_calibration(sts.temperatures_, "toy world", 400)
    path = engines.write_json(payload, tmp_path / "sts.json")
    temps = np.asarray(trtllm_sts_temperatures(path))
    np.testing.assert_allclose(sigmoid(logits / temps), sigmoid(sts.transform(logits)), rtol=1e-12)
    assert json.loads(path.read_text())["_meta"] == {"dataset": "toy world", "num_samples": 400}
    assert set(engines.trtllm_sts_calibration([1.0, 2.0])) == {"sts_temperatures"}
    sglang_file = engines.write_json(engines.sglang_sts_calibration(sts.temperatures_), tmp_path / "sglang.json")
    assert trtllm_sts_temperatures(sglang_file) == list(sts.temperatures_)  # TensorRT-LLM reads SGLang's too
    planted = tmp_path / "bad.json"
    planted.write_text(json.dumps({"temperature": [1.0, 2.0]}))
    with pytest.raises(KeyError, match="sts_temperatures"):
        trtllm_sts_temperatures(planted)
    planted.write_text(json.dumps({"sts_temperatures": []}))
    with pytest.raises(ValueError, match="empty"):
        trtllm_sts_temperatures(planted)
    with pytest.raises(ValueError, match="temperature"):
        engines.trtllm_sts_calibration([1.0, -1.0])


def test_the_appendix_names_the_trtllm_fields_the_module_writes_for() -> None:
    page = (Path(__file__).resolve().parents[1] / "chapters" / "93_gpu_protocol.md").read_text()
    config = engines.trtllm_config("deepseek-ai/dspark_qwen3_4b_block7", 7, "engines/trtllm_cost_R16.json",
                                   "engines/trtllm_sts.json")
    for field in (engines.TRTLLM_SPS_FIELD, engines.TRTLLM_STS_FIELD, engines.TRTLLM_ENABLE_FIELD):
        assert f"{field}:" in config and field in page, field
    assert config in page  # the page shows exactly what trtllm_config writes
