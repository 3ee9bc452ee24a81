"""Time what a reader waits for on this machine: the chapter-05 threshold panel's callback and the
serving simulator at high concurrency (chapter 06b). The bounds these used to be asserted against
in the tests (100 ms, 2 s) flake on a loaded machine, so they live here: run it on a quiet one.

    .venv/bin/python scripts/bench_interactive.py
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lite import calibration  # noqa: E402
from dspark_lite.harness.serving import sample_block_records, simulate  # noqa: E402
from dspark_lite.harness.widgets import ThresholdPanel  # noqa: E402
from dspark_lite.record import Rounds  # noqa: E402
from dspark_lite.scheduler import StepCurve  # noqa: E402

THRESHOLDS = [round(0.05 * i, 2) for i in range(19)]


def panel_callback_ms(blocks: int = 6000, gamma: int = 7) -> float:
    """Median ms of ThresholdPanel.update over every domain and every third threshold."""
    logits, accepted = calibration.synthetic_rollouts(blocks, gamma, seed=1)[:2]
    domains = np.array(["math", "code", "chat"])[np.arange(blocks) % 3]
    panel = ThresholdPanel(Rounds.of(np.full(blocks, gamma), accepted, logits, domain=domains), THRESHOLDS)
    panel.update("chat", 0.5)  # the first call builds the figure
    timings = []
    for domain in ("math", "code", "chat"):
        for threshold in THRESHOLDS[::3]:
            start = time.perf_counter()
            panel.update(domain, threshold)
            timings.append(time.perf_counter() - start)
    return 1e3 * statistics.median(timings)


def simulator_seconds(scheduler: str, blocks: int = 2000, gamma: int = 7) -> float:
    """Seconds of 300 simulated steps at R = 256."""
    rng = np.random.default_rng(0)
    records = sample_block_records(rng.uniform(0.05, 1.0, (blocks, gamma)), "chat", rng)
    start = time.perf_counter()
    simulate(records, scheduler, StepCurve.analytic(4096, knee=64), 256, 300, rng=np.random.default_rng(0))
    return time.perf_counter() - start


def main() -> None:
    rows = [("threshold panel callback (chapter 05), median", panel_callback_ms(), "ms", 100.0)]
    rows += [(f"simulator, {name}, R = 256, 300 steps (chapter 06b)", simulator_seconds(name), "s", 2.0)
             for name in ("dspark", "async")]
    for what, value, unit, goal in rows:
        print(f"{what}: {value:.3g} {unit} (goal {goal:g} {unit}: {'met' if value <= goal else 'MISSED'})")


if __name__ == "__main__":
    main()
