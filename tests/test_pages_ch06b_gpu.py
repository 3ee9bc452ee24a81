"""Chapter 06b reads a GPU's measured cost table when one is committed (issue 54): the replay runs on
it at the chapter's concurrencies it covers, and says so; without one it says what would make it run."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dspark_lite.harness.book.pages import ch06b_gpu
from dspark_lite.record import Rounds
from dspark_lite.stepcurve import StepCurve


def records(blocks: int = 40, gamma: int = 3, seed: int = 0) -> Rounds:
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0.2, 0.95, size=(blocks, gamma))
    accepted = (rng.uniform(size=(blocks, gamma)) < conf).cumprod(axis=1).sum(axis=1)
    return Rounds.of(np.full(blocks, gamma), accepted, logits=np.log(conf / (1 - conf)).astype(np.float32),
                     domain="chat")


def committed(folder: Path, concurrencies=(1, 2)) -> None:
    table = {str(R): {"curve": StepCurve.from_latencies([1, 4 * R + 4], [0.02, 0.02 + 0.001 * R]).to_dict()}
             for R in concurrencies}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qwen3_4b_h100_costs.json").write_text(json.dumps({
        "provenance": {"date": "2026-12-06 16:00 UTC"},
        "results": {"device": "cuda:0", "gpu": "NVIDIA H100", "dtype": "bfloat16", "cost_table": table}}))


@pytest.fixture
def said(said_by) -> list[str]:
    """What ch06b_gpu says, one string a call, instead of displaying it."""
    return said_by(ch06b_gpu)


ARGS = dict(schedulers=["dspark", "fixed", "mtp1"], baselines=["fixed", "mtp1"],
            names={"dspark": "DSpark", "fixed": "fixed", "mtp1": "MTP-1"}, steps=4, replays=2, seed=0)


def test_without_a_gpu_table_the_chapter_says_how_to_get_one(tmp_path: Path, said: list[str]) -> None:
    out = said
    assert ch06b_gpu.gpu_table_sweep(records(), concurrencies=[1, 2, 4], folder=tmp_path, **ARGS) is None
    assert "ci/gpu_check.py" in out[0]


def test_a_committed_gpu_table_is_replayed_at_the_concurrencies_it_covers(tmp_path: Path, said: list[str]) -> None:
    out = said
    committed(tmp_path, (1, 2))
    aggregate = ch06b_gpu.gpu_table_sweep(records(), concurrencies=[1, 2, 4], folder=tmp_path, **ARGS)
    assert sorted(aggregate["R"].unique()) == [1, 2] and set(aggregate["scheduler"]) == {"dspark", "fixed", "mtp1"}
    assert (aggregate["throughput"] > 0).all()
    assert "NVIDIA H100" in out[0] and "R = [1, 2]" in out[0]
    out.clear()
    assert ch06b_gpu.gpu_table_sweep(records(), concurrencies=[8], folder=tmp_path, **ARGS) is None
    assert "none of this run's concurrencies" in out[0]
