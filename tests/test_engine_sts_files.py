"""One STS fit written for both serving engines (`engines.write_sts_files`): each file reads back as
its engine reads it (the readers of test_engines.py), with the same temperatures, and the fit's
provenance where each engine keeps it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dspark_lite import calibration
from dspark_lite.harness.serving import engines
from dspark_lite.record import sigmoid
from test_engines import SglangSts, trtllm_sts_temperatures


def test_one_fit_writes_both_engines_files_with_the_same_temperatures(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(1.0, 2.0, size=(400, 4))
    accepted = np.minimum((rng.random((400, 4)) < sigmoid(logits / 2.5)).cumprod(1).sum(1), 4)
    sts = calibration.SequentialTemperatureScaling().fit(logits, accepted)
    sglang, trtllm = engines.write_sts_files(sts.temperatures_, tmp_path / "engines", dataset="toy world",
                                             num_samples=400, ece_before=[0.2] * 4, ece_after=[0.05] * 4)
    assert (sglang.name, trtllm.name) == (engines.SGLANG_STS_FILE, engines.TRTLLM_STS_FILE)
    reader = SglangSts(sglang)
    np.testing.assert_allclose(reader.apply_sts(logits), sigmoid(sts.transform(logits)), rtol=1e-12)
    assert trtllm_sts_temperatures(trtllm) == reader.raw["temperatures"] == list(sts.temperatures_)
    assert reader.raw["dataset"] == "toy world" and reader.raw["num_samples"] == 400
    assert json.loads(trtllm.read_text())["_meta"] == {key: reader.raw[key] for key in reader.raw if key != "temperatures"}
