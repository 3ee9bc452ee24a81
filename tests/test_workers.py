"""Worker processes (harness/toy/workers.py): sized by the affinity mask and the cgroup CPU quota,
and a worker that dies ends the call quickly, with an error that names what it was running,
leaving no process behind."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dspark_lite.harness.toy import cache, evaluation, workers, zoo
from dspark_lite.harness.toy.world import load_toy_world


def _cgroup(tmp_path: Path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    member = tmp_path / "self_cgroup"
    member.write_text(membership)
    return root, member


def test_cpu_quota_reads_cgroup_v2_and_v1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cgroup v2's cpu.max (the smallest along the path), v1's cfs quota and period, no quota."""
    root, member = _cgroup(tmp_path / "v2", "0::/runner/job\n",
                           {"cpu.max": "max 100000\n", "runner/cpu.max": "300000 100000\n",
                            "runner/job/cpu.max": "150000 100000\n"})
    assert workers.cpu_quota(root, member) == 1.5
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert workers.usable_cpus(root, member) == 1  # 1.5 CPUs: one worker, rounded down
    root, member = _cgroup(tmp_path / "none", "0::/\n", {"cpu.max": "max 100000\n"})
    assert workers.cpu_quota(root, member) is None
    assert workers.usable_cpus(root, member) == 16
    root, member = _cgroup(tmp_path / "v1", "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n",
                           {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "400000\n",
                            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert workers.cpu_quota(root, member) == 4.0
    assert workers.usable_cpus(root, member) == 4
    root, member = _cgroup(tmp_path / "v1none", "3:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n",
                                                              "cpu/cpu.cfs_period_us": "100000\n"})
    assert workers.cpu_quota(root, member) is None
    monkeypatch.setattr(workers.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    root, member = _cgroup(tmp_path / "big", "0::/\n", {"cpu.max": "800000 100000\n"})
    assert workers.usable_cpus(root, member) == 2  # the affinity mask is the smaller


def test_worker_processes_only_fork_on_a_linux_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """One process per usable core on a Linux CPU; one on a GPU (or any other device) and where
    the platform does not fork (macOS's default is spawn, Windows has no fork)."""
    monkeypatch.setattr(workers, "usable_cpus", lambda: 3)
    monkeypatch.setattr(workers.sys, "platform", "linux")
    assert workers.worker_processes(torch.device("cpu")) == 3
    assert workers.worker_processes(torch.device("meta")) == 1
    assert workers.worker_processes(torch.device("cuda", 0)) == 1
    for platform in ("darwin", "win32"):
        monkeypatch.setattr(workers.sys, "platform", platform)
        assert workers.worker_processes(torch.device("cpu")) == 1


def _processes_left() -> list[int]:
    """Pids of this process's children that still exist. `multiprocessing.active_children` alone
    can list a worker for a moment after the pool's manager thread reaped it (its exit code not
    yet recorded, measured: gone from /proc, gone from the list a second later), so the process
    table decides."""
    return [p.pid for p in multiprocessing.active_children() if os.path.exists(f"/proc/{p.pid}")]


def _square_slowly(job: int) -> int:
    time.sleep(0.05 if job < 4 else 30)
    return job * job


def _kill_a_worker_running(job: int, after: float = 0.0) -> threading.Thread:
    """Kill (SIGKILL, as the out-of-memory killer does) the worker that runs `job`, once it runs it."""
    def kill() -> None:
        time.sleep(after)
        for _ in range(600):
            pid = workers._STARTED[job] if workers._STARTED is not None else 0
            if pid:
                os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)
    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_fork_map_gives_results_in_order_and_refuses_bad_counts() -> None:
    assert list(workers.fork_map(lambda job: job, 0, 2, str)) == []
    assert list(workers.fork_map(_square_slowly, 4, 2, str)) == [0, 1, 4, 9]
    assert not _processes_left()
    with pytest.raises(ValueError, match="processes >= 1"):
        list(workers.fork_map(_square_slowly, 3, 0, str))


def test_a_killed_worker_ends_fork_map_quickly_naming_its_job() -> None:
    start = time.monotonic()
    _kill_a_worker_running(5)
    with pytest.raises(workers.WorkerDied, match=r"job 5 \(worker \d+, killed by SIGKILL\)"):
        list(workers.fork_map(_square_slowly, 8, 2, lambda job: f"job {job}"))
    assert time.monotonic() - start < 20  # not the 30 s the jobs would sleep, nor forever
    assert not _processes_left()  # no process left behind


def test_a_killed_rollout_worker_ends_measure_acceptance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The killed-worker experiment of issue 42 on the smoke world: the call raises within seconds,
    naming the rollout (domain, prompt, sample), the drafter and the signal; no process is left."""
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    drafter = zoo.build_dflash(world, world.profile.drafter)
    start = time.monotonic()
    _kill_a_worker_running(3)
    with pytest.raises(workers.WorkerDied, match=r"rollout \d+ \(\w+ prompt \d+, sample \d+\) of DFlashDrafter "
                                                 r"\(worker \d+, killed by SIGKILL\)"):
        evaluation.measure_acceptance(world, drafter, 3, 4, 400, samples=4, workers=2)
    assert time.monotonic() - start < 60
    assert not _processes_left()
    assert evaluation._WORK is None


def test_a_killed_training_worker_ends_load_or_train_drafters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A drafter-training worker killed mid-run: the call raises naming the drafter and the signal;
    the parent's state is cleared and no process is left."""
    monkeypatch.setenv(cache.ENV_VAR, str(tmp_path))
    world = load_toy_world("smoke", seed=0)
    recipe = replace(world.profile.drafter, steps=400, dspark_steps=400)
    monkeypatch.setattr(zoo, "worker_processes", lambda device: 2)
    start = time.monotonic()
    _kill_a_worker_running(1, after=1.0)
    with pytest.raises(workers.WorkerDied, match=r"training drafter dspark-markov from seed 0 \(worker \d+, killed by SIGKILL\)"):
        zoo.load_or_train_drafters(world, ["dflash", "dspark-markov"], recipe)
    assert time.monotonic() - start < 60
    assert not _processes_left()
    assert zoo._TRAINING is None
