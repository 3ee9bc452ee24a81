"""A GPU's measured cost table, replayed by the serving simulator (issue 54): chapter 06b reads the
costs-first results file that chapter 07's run commits (`costs.load_gpu_cost_table`) and replays its
calibrated records on that table at the concurrencies the table covers; without a committed GPU table
there is nothing to replay."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dspark_lite.harness.serving import costs, simulator
from dspark_lite.record import Rounds
from dspark_lite.stepcurve import StepCurve

SCHEDULERS, BASELINES = ["dspark", "fixed", "mtp1"], ["fixed", "mtp1"]


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


def test_without_a_gpu_table_there_is_nothing_to_replay(tmp_path: Path) -> None:
    assert costs.load_gpu_cost_table(tmp_path) is None


def test_a_committed_gpu_table_is_replayed_at_the_concurrencies_it_covers(tmp_path: Path) -> None:
    committed(tmp_path, (1, 2))
    table = costs.load_gpu_cost_table(tmp_path)
    meta = next(iter(table.values())).meta
    assert (meta["gpu"], meta["dtype"], meta["file"]) == ("NVIDIA H100", "bfloat16", "qwen3_4b_h100_costs.json")
    covered = [R for R in (1, 2, 4) if R in table]
    assert covered == [1, 2] and not [R for R in (8,) if R in table]
    aggregate, runs = simulator.replayed_sweep(records(), SCHEDULERS, table, covered, steps=4, replays=2, seed=0)
    assert sorted(aggregate["R"].unique()) == [1, 2] and set(aggregate["scheduler"]) == set(SCHEDULERS)
    assert (aggregate["throughput"] > 0).all()
    versus = simulator.versus_best_baseline(aggregate, runs, BASELINES)
    assert list(versus.index) == [1, 2] and versus["best baseline"].isin(BASELINES).all()
