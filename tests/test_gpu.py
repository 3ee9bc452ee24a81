"""Chapter 07's harness without a GPU: modes, file names, sharding, the results page's GPU helpers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dspark_lite import evalsets, gpu, results
from dspark_lite.profiles import get_profile


def test_modes_need_a_gpu_except_smoke() -> None:
    cpu = torch.device("cpu")
    assert gpu.resolve_mode("auto", cpu) == "smoke" and gpu.pick_dtype(cpu) == torch.float32
    for mode in ("real", "random-weights"):
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            gpu.resolve_mode(mode, cpu)
    with pytest.raises(ValueError, match="MODE must be"):
        gpu.resolve_mode("fast", cpu)


def test_slug_and_shard() -> None:
    assert gpu.slug("NVIDIA H100 80GB HBM3") == "h100_80gb_hbm3"
    assert gpu.shard(list(range(7)), 1, 3) == [1, 4] and gpu.shard([], 0, 2) == []
    with pytest.raises(ValueError, match="rank"):
        gpu.shard([1], 2, 2)


def test_paper_table1_covers_the_benchmarks() -> None:
    assert all(list(row) == list(evalsets.TABLE1_ORDER) for row in gpu.PAPER_TABLE1.values())
    assert gpu.PAPER_TABLE1["dspark"]["gsm8k"] == 6.11 and gpu.PAPER_TABLE1["dflash"]["arena-hard-v2"] == 2.83


def test_smoke_world_goes_through_the_released_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    study = get_profile("smoke").gpu
    world = gpu.load_world("smoke", torch.device("cpu"), study, 0, workdir=tmp_path / "world")
    assert sorted(p.name for p in (tmp_path / "world" / "dspark_tiny_block7").iterdir()) == ["config.json", "model.safetensors"]
    assert set(world.drafters) == {"dflash", "dspark"} and world.drafters["dspark"].confidence_head is not None
    ids = gpu.encode_first_turn(world.tokenizer, "Solve 2 + 2.")
    assert ids.dim() == 1 and ids.numel() > 3
    run = gpu.run_benchmark(world, "dspark", ["Solve 2 + 2."], study, seed=0)
    assert 1.0 <= run.acceptance.tau <= study.gamma + 1 and run.acceptance.records
    path = gpu.save_results(world, {"table1": {"dspark": {"gsm8k": run.acceptance.tau}}}, "smoke")
    assert path.parent == tmp_path / "results" and "data/results" not in str(path)


def test_results_page_helpers(tmp_path: Path) -> None:
    assert results.latest_gpu_result(tmp_path) is None
    for name, date in (("qwen3_4b_l4", "2026-01-01 10:00 UTC"), ("qwen3_4b_a100", "2026-02-01 10:00 UTC")):
        record = {"provenance": {"date": date}, "results": {
            "environment": {"mode": "real", "gpu": name, "prompt_counts": {"gsm8k": 20}},
            "table1": {"dspark": {"gsm8k": 6.0}}, "paper_table1": {"dspark": {"gsm8k": 6.11}}}}
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    name, record = results.latest_gpu_result(tmp_path)
    assert name == "qwen3_4b_a100"
    (row,) = results.gpu_table1_rows(record)
    assert row["prompts"] == 20 and row["difference %"] == pytest.approx(100 * (6.0 / 6.11 - 1))
