"""Chapter 06's bookkeeping (the hardware-aware prefix scheduler): the run's setup, the figures'
plumbing, the scheduler's timing in its own process, the sentences each measuring cell says about
this run (`say`), the rows of the verdict box and the result file. The chapter's visible code is
Algorithm 1 and its measurement; everything here only shows, words or writes what that code
computed.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ....stepcurve import StepCurve
from ...result_files import REPO, results_dir, save_result
from .. import verdicts
from ..results import say
from . import start

BENCH_SCRIPT = REPO / "scripts" / "bench_scheduler.py"
_STARTED: list[float] = []  # when `setup` ran: the chapter's wall time goes into its result file


def setup(profile_name: str, device_name: str, seed: int) -> tuple[Any, Any]:
    """The chapter's clock, then the book's setup (`pages.start`, no toy world: this chapter schedules
    synthetic confidences): (profile, device); the cell's first output says where the run is."""
    _STARTED[:] = [time.perf_counter()]
    profile, device, _, _ = start(profile_name, device_name, seed, world=False)
    return profile, device


# ------------------------------------------------------------------------------------ 6.2 the greedy stop


def say_brute_force(counts: Mapping[str, int], instances: int) -> None:
    """Say how many random instances have a unimodal Theta, on how many of them Algorithm 1 found the
    brute-force optimum, and how often it missed on the others (`brute_force_study`'s counts)."""
    say(f"**This run.** {counts['unimodal']} of {instances} random instances have a unimodal $\\Theta$, and "
        f"Algorithm 1 finds the brute-force optimum on {counts['unimodal, optimum found']} of them. The random cost "
        f"curves are non-increasing, yet the other {counts['not unimodal']} instances have a $\\Theta$ that dips and "
        f"rises again, and on {counts['not unimodal, optimum missed']} of those the causal stop missed the optimum.")


def plot_jagged(curve: StepCurve, theta: np.ndarray, greedy: np.ndarray, best: np.ndarray) -> None:
    """The jagged step curve, and Theta along the candidate order with Algorithm 1's stop and the
    brute-force optimum marked."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 1, figsize=(6, 5.6), layout="constrained")
    axes[0].plot(curve.sizes, curve.steps_per_second, "o-", color="grey")
    axes[0].set(xlabel="batch tokens B", ylabel="SPS(B)", title="a jagged step curve (synthetic)")
    axes[1].plot(np.arange(len(theta)), theta, "o-", color="black")
    axes[1].scatter([greedy[0]], [theta[greedy[0]]], s=160, facecolors="none", edgecolors="#d95f02",
                    linewidths=2, label=f"Algorithm 1 stops: l = {greedy[0]}")
    axes[1].scatter([best[0]], [theta[best[0]]], s=160, marker="*", color="#1b9e77",
                    label=f"brute-force optimum: l = {best[0]}")
    axes[1].set(xlabel="drafted tokens sent, l", ylabel="Theta = tau x SPS(B)", title="Theta along the candidate order")
    axes[1].legend(fontsize=9, loc="best")
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # batch tokens and drafted tokens are counts
    plt.show()


# ------------------------------------------------------------------------------------ 6.3 Appendix A


def _p(value: float) -> str:
    """A p-value as text: 'p = 0.52', or 'p < 1e-300' where it underflowed to zero."""
    return f"p = {value:.2g}" if value > 0 else "p < 1e-300"


def show_appendix_a(frequency: Mapping[str, float], appendix: pd.DataFrame, se: float, trials: int) -> None:
    """Appendix A's table (each scheduler's frequency of A, the paper's, z and p against 0.70) and
    the same as bars with their 95% intervals beside the lossless p_t(A)."""
    import matplotlib.pyplot as plt
    from IPython.display import display

    display(appendix.style.format({"P(output = A)": "{:.4f}", "paper": "{:.2f}", "z vs 0.70": "{:.1f}",
                                   "p-value (lossless?)": "{:.2g}"})
            .set_caption(f"Appendix A: how often each scheduler outputs A over {trials:,} trials, against the lossless p_t(A)"))
    fig, ax = plt.subplots(figsize=(6, 2.8), layout="constrained")
    ax.barh(list(frequency), list(frequency.values()), xerr=1.96 * se, color=["#1b9e77", "#d95f02", "#7570b3"])
    ax.axvline(0.7, color="black", ls="--", lw=1, label="p_t(A) = 0.70 (lossless)")
    ax.scatter(appendix["paper"], list(frequency), marker="|", s=300, color="black", zorder=3, label="paper")
    ax.set(xlim=(0.6, 0.9), xlabel=f"frequency of A over {trials:,} trials (bars: 95% interval)")
    ax.legend(fontsize=9, loc="lower right")
    plt.show()


def say_appendix_a(appendix: pd.DataFrame, trials: int) -> None:
    """Say each scheduler's frequency of A and its test against p_t(A), in the table's row order
    (Algorithm 1, the global search, the asynchronous variant)."""
    (causal, retro, asynchronous), p = appendix["P(output = A)"].to_numpy(), appendix["p-value (lossless?)"].to_numpy()
    z_retro = float(appendix["z vs 0.70"].iloc[1])
    say(f"**This run.** Over {trials:,} trials Algorithm 1 output A with frequency {causal:.4f} and the section 5.2 "
        f"variant with {asynchronous:.4f}: both pass the test against $p_t$ ({_p(p[0])} and {_p(p[2])}; the cell "
        f"asserts each above 0.001). The retrospective search output A with frequency {retro:.4f}, {z_retro:.0f} "
        f"standard errors away from $p_t(A)$ ({_p(p[1])}): far more than any sampling noise.")


# ------------------------------------------------------------------------------------ 6.4 the scheduler's speed


def bench_scheduler(requests: int, gamma: int, calls: int, seed: int) -> dict[str, Any]:
    """Time `schedule` at `requests` x `gamma` candidates over `calls` calls with
    `scripts/bench_scheduler.py`, in its own process (so the kernel's state does not touch the
    timing); print what it printed and return its JSON (median_us, p90_us, the machine). The
    script lives in the book's repository, not in the installed package."""
    if not BENCH_SCRIPT.exists():
        raise FileNotFoundError(f"{BENCH_SCRIPT} is missing: the scheduler's timing runs the book repository's script; "
                                "run the chapter from a clone of the repository")
    folder = results_dir() / "tables"  # benchmark JSON, next to the chapter's results
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "scheduler_speed.json"
    bench = subprocess.run([sys.executable, str(BENCH_SCRIPT), "--requests", str(requests), "--gamma", str(gamma),
                            "--calls", str(calls), "--seed", str(seed), "--out", str(out)],
                           capture_output=True, text=True, check=True)
    print(bench.stdout.strip())
    return json.loads(out.read_text())


def say_speed(speed: Mapping[str, Any], goal_us: float, goal_met: bool) -> None:
    """Say the scheduler's median and p90 time per call at serving size against the goal."""
    say(f"**This run.** The median call took {speed['median_us']:.0f} us (p90 {speed['p90_us']:.0f} us) at R = 256, "
        f"$\\gamma = 7$, so the vectorised scheduler {verdicts.reaches(goal_met)} our goal of {goal_us:g} us per call.")


# ------------------------------------------------------------------------------------ the box and the result file


def verdict_rows(frequency: Mapping[str, float], p_values: pd.Series, speed: Mapping[str, Any], goal_us: float,
                 goal_met: bool) -> list[tuple[str, str, str, bool]]:
    """The rows of the chapter's verdict box: Appendix A's three schedulers (`frequency` and
    `p_values` in the order Algorithm 1, the global search, the asynchronous variant) and the
    scheduler's speed against its goal."""
    (causal, retro, asynchronous), p = frequency.values(), [float(v) for v in p_values]
    return [
        ("Appendix A: a retrospective (global) search biases the output; Algorithm 1 is lossless", "P(A) = 0.85 vs 0.70",
         f"P(A) = {retro:.4f} vs {causal:.4f} ({_p(p[1])} vs {_p(p[0])})", bool(p[1] < 1e-3 and p[0] > 1e-3)),
        ("The asynchronous variant (Sec. 5.2) stays lossless", "lossless",
         f"P(A) = {asynchronous:.4f} ({_p(p[2])})", bool(p[2] > 1e-3)),
        (f"Algorithm 1 is cheap enough to run every step (our goal: median <= {goal_us:g} us at R = 256, gamma = 7)",
         "not given as a number", f"median {speed['median_us']:.0f} us, p90 {speed['p90_us']:.0f} us", goal_met),
    ]


def save_results(profile: str, device: Any, *, sizes: Any, gamma: int, frequency: Mapping[str, float], trials: int,
                 p_values: pd.Series, counts: Mapping[str, int], jagged_theta: np.ndarray, jagged_greedy: np.ndarray,
                 jagged_best: np.ndarray, speed: Mapping[str, Any], goal_us: float, goal_met: bool) -> None:
    """Write the chapter's result file, `scheduler.json` (Appendix A, the brute-force counts, the
    jagged example, the scheduler's speed, the chapter's wall time since `setup`), and say how long
    the chapter ran."""
    minutes = (time.perf_counter() - _STARTED[0]) / 60 if _STARTED else float("nan")
    causal, retro, asynchronous = frequency.values()
    result = {
        "gamma": gamma,
        "appendix_a": {"causal": causal, "retrospective": retro, "asynchronous": asynchronous, "trials": trials,
                       "p_values": dict(zip(["causal", "retrospective", "asynchronous"], map(float, p_values)))},
        "brute_force_check": counts,
        "jagged_example": {"theta": jagged_theta.tolist(), "algorithm1": int(jagged_greedy[0]), "optimum": int(jagged_best[0])},
        "scheduler_median_us": speed["median_us"], "scheduler_p90_us": speed["p90_us"],
        "scheduler_speed_goal_us": goal_us, "scheduler_speed_goal_met": goal_met,
        "chapter_minutes": minutes, "sizes": asdict(sizes),
    }
    save_result("scheduler", result, profile, device=str(device))
    print(f"chapter ran in {60 * minutes:.0f} s")
