"""Worker processes for the toy world's long CPU jobs (chapters 03-06b): rollouts
(`evaluation.measure_acceptance`) and drafters trained side by side (`zoo.load_or_train_drafters`).

    processes = worker_processes(device)       # cores this process may use: affinity and CPU quota
    for result in fork_map(job, n, processes, describe=lambda i: f"rollout {i}"):
        ...                                    # results in job order

Workers are forked single-thread processes of `concurrent.futures.ProcessPoolExecutor`: they inherit
what the caller put in a module global (models, settings) without pickling it. A worker that dies
(the out-of-memory killer's SIGKILL, a crash) breaks the pool at once; `fork_map` then raises
`WorkerDied`, naming the jobs that were running and how their process ended, and leaves no process
behind, on that error, on any other and on Ctrl-C.
"""
from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor, TimeoutError
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

CGROUP_ROOT = Path("/sys/fs/cgroup")


class WorkerDied(RuntimeError):
    """A worker process ended while it ran a job; the message names the jobs and the exit signal."""


def cpu_quota(root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs this process's cgroup may use (quota / period, the smallest along its path up to the
    root), or None when no quota is set. Reads cgroup v2's `cpu.max` ("200000 100000", or "max
    100000" for none) and v1's `cpu/cpu.cfs_quota_us` and `cpu.cfs_period_us` (-1 for none)."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        lines = ["0::/"]
    found: list[float] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            folders, read = [root], lambda f: (f / "cpu.max").read_text().split()
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's hierarchy
            folders = [root / name for name in ("cpu", "cpu,cpuacct", controllers)]
            read = lambda f: [(f / "cpu.cfs_quota_us").read_text().strip(),
                              (f / "cpu.cfs_period_us").read_text().strip()]
        else:
            continue
        parts = [p for p in path.strip("/").split("/") if p]
        for top in folders:
            for depth in range(len(parts) + 1):
                try:
                    quota, period = read(top.joinpath(*parts[:depth]))
                except (OSError, ValueError):
                    continue
                if quota not in ("max", "-1") and float(period) > 0:
                    found.append(float(quota) / float(period))
    return min(found) if found else None


def usable_cpus(root: Path = CGROUP_ROOT, membership: Path = Path("/proc/self/cgroup")) -> int:
    """Cores this process may keep busy: its affinity mask, capped by its cgroup's CPU quota
    (rounded down, at least 1), so that a container given 1.5 CPUs starts one worker, not sixteen."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(root, membership)
    return max(1, min(cores, math.floor(quota))) if quota is not None else cores


def worker_processes(device: torch.device) -> int:
    """How many processes generate rollouts (or train drafters, `zoo`) side by side: one per usable
    CPU core on Linux (`usable_cpus`); one on a GPU or where processes cannot fork. A toy rollout is
    a long chain of small ops that a second thread barely speeds up (measured on 2 cores: six
    rollouts in 0.71 s on one thread, 0.68 s on two), so two single-thread processes generate about
    1.7 times as many. One also once CUDA is initialised in this process (a chapter on a GPU doing
    CPU work): a forked child of a CUDA process cannot use CUDA, and nothing forks after it starts."""
    if (device.type != "cpu" or sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods()
            or torch.cuda.is_initialized()):
        return 1
    return usable_cpus()


@contextlib.contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """On a CPU, run the block on one thread, then restore the count (elsewhere: nothing). How many
    threads share a matrix product changes how its sums round, and a drafter trained for 2,000
    steps ends with other weights (measured: 6e-8 apart after a few smoke steps, and tau moved in a
    later decimal after a full training). The workers train on one thread; so does every training
    here, so a drafter's weights do not depend on which path trained it or on the machine's cores."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


_STARTED: Any = None  # shared array: the pid of the worker that started each job (0: not started)


def _run(function: Callable[[int], Any], job: int) -> Any:
    """In a worker: note who runs `job`, then run it."""
    _STARTED[job] = os.getpid()
    return function(job)


def _how(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def fork_map(function: Callable[[int], Any], jobs: int, processes: int, describe: Callable[[int], str],
             on_wait: Callable[[], None] | None = None, every: float = 0.5) -> Iterator[Any]:
    """`function(0), ..., function(jobs - 1)` in `processes` forked single-thread workers, yielded in
    job order. `function` is a module-level function (it reads its inputs from a global the caller
    set before the fork); `on_wait` is called every `every` seconds while waiting (a progress bar's
    update). If a worker dies, raises `WorkerDied` within about a second, naming each job that was
    running (`describe(job)`) and how its process ended. No worker outlives the call. Once CUDA is
    initialised in this process nothing forks: the jobs then run here, one after another."""
    global _STARTED
    if processes < 1 or jobs < 0:
        raise ValueError(f"need processes >= 1 and jobs >= 0, got {processes} and {jobs}")
    if torch.cuda.is_initialized():
        yield from (function(job) for job in range(jobs))
        return
    context = multiprocessing.get_context("fork")
    _STARTED = context.RawArray("q", max(jobs, 1))
    before = set(multiprocessing.active_children())
    executor = ProcessPoolExecutor(min(processes, max(jobs, 1)), mp_context=context,
                                   initializer=torch.set_num_threads, initargs=(1,))
    children: dict = {}  # pid -> process: every worker the pool started (it may start one late)
    notice = lambda: children.update((p.pid, p) for p in multiprocessing.active_children() if p not in before)
    try:
        futures = [executor.submit(_run, function, job) for job in range(jobs)]
        notice()
        for job in range(jobs):
            while True:  # Future.result with a timeout, not `wait`: Ctrl-C inside `wait` can leave its locks held
                try:
                    result = futures[job].result(timeout=every)
                    break
                except TimeoutError:
                    notice()
                    if on_wait is not None:
                        on_wait()
                except BrokenProcessPool:
                    notice()
                    raise WorkerDied(_obituary(futures, list(children.values()), describe)) from None
            yield result
    finally:
        notice()
        executor.shutdown(wait=False, cancel_futures=True)
        notice()
        for process in children.values():
            if process.is_alive():
                process.terminate()
        for process in children.values():
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        _STARTED = None


def _obituary(futures: list, children: list, describe: Callable[[int], str]) -> str:
    """Which jobs a dead worker took with it, and how each worker ended (the pool stops the
    survivors with SIGTERM once it sees one die)."""
    deadline = time.monotonic() + 5
    for process in children:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    how = {process.pid: process.exitcode for process in children}
    lost = [job for job, future in enumerate(futures)
            if _STARTED[job] and not (future.done() and future.exception() is None)]
    first = [pid for pid, code in how.items() if code not in (None, 0, -signal.SIGTERM)]
    blamed = [job for job in lost if _STARTED[job] in first] or lost
    running = "; ".join(f"{describe(job)} (worker {_STARTED[job]}, {_how(how.get(_STARTED[job]))})" for job in blamed)
    unfinished = sum(not (future.done() and future.exception() is None) for future in futures)
    return (f"a worker process died while running {running or 'no job'}; {unfinished} of {len(futures)} "
            f"jobs did not finish and no worker is left. A SIGKILL is most often the out-of-memory killer: "
            f"free memory, or run with fewer workers.")
