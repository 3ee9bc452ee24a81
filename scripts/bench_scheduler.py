"""Time dspark_lite.scheduler.schedule at serving size (chapter 06's speed claim).

R = 256 requests, gamma = 7: 1,792 candidates a call. Confidences are drawn up front, so
the timing covers the scheduler alone (validation included). Prints the median and saves
median, p90 and the machine to JSON.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_scheduler.py --out _build/results/scheduler_speed.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lite.scheduler import schedule  # noqa: E402
from dspark_lite.stepcurve import StepCurve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--gamma", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("_build/results/scheduler_speed.json"))
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    max_batch = args.requests * (args.gamma + 1)
    curve = StepCurve.analytic(max_batch, knee=max(1, max_batch // 4))  # synthetic cost table
    # Beta(8, 2) confidences: mostly high, like a trained head, so the search runs long.
    confidences = rng.beta(8.0, 2.0, size=(args.calls, args.requests, args.gamma))
    for c in confidences[:20]:  # warm-up
        schedule(c, curve)
    seconds = np.empty(args.calls)
    for i, c in enumerate(confidences):
        start = time.perf_counter()
        schedule(c, curve)
        seconds[i] = time.perf_counter() - start
    micro = seconds * 1e6
    result = {
        "median_us": float(np.median(micro)), "p90_us": float(np.percentile(micro, 90)),
        "requests": args.requests, "gamma": args.gamma, "calls": args.calls,
        "numpy": np.__version__, "python": platform.python_version(),
        "platform": platform.platform(), "machine": platform.machine(),
    }
    print(f"schedule, R={args.requests}, gamma={args.gamma}: median {result['median_us']:.1f} us, "
          f"p90 {result['p90_us']:.1f} us over {args.calls} calls")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
