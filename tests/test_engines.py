"""The hand-offs to SGLang (chapters 05, 06b, 07): files written by harness/engines.py and read back by
a reader that follows SGLang's own (dspark_sps_table.py, dspark_sts_table.py and the confidence head's
apply_sts at engines.SGLANG_COMMIT): its checks, its units and its lookup."""
from __future__ import annotations

import bisect
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_lite import calibration
from dspark_lite.harness import engines
from dspark_lite.record import sigmoid
from dspark_lite.scheduler import StepCurve


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
