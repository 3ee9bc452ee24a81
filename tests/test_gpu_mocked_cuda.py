"""Issue 54: the GPU check's first run must be the real one, so its control flow is driven here on a
CPU with CUDA mocked: the device gets an index, the steps run most valuable first (versions, probe,
chapter 07's costs, then the install into a scratch folder, then the chapters), the budget caps
chapter 07, the summary is rewritten as each step finishes, a stopped chapter 07 keeps its finished
parts, and OUT ends with its four files. Also the costs-first module itself (on the CPU), Eq. 1's
projection, the reader of a committed GPU cost table, and the toy world's workers under CUDA."""
from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest
import torch

from ci import gpu_check
from ci.gpu_check import Check, Console, read_pins
from dspark_lite.harness.gpu import costs_first, devices
from dspark_lite.harness.serving import costs
from dspark_lite.harness.toy import workers
from dspark_lite.stepcurve import StepCurve

PINS = read_pins(gpu_check.WHEEL_LIST)
GPU = "NVIDIA H100 80GB HBM3"
COSTS_NAME = "qwen3_4b_h100_80gb_hbm3_costs.json"


def strict_set_device(device) -> None:
    """torch.cuda.set_device as it behaves on a real machine for a device without an index."""
    device = torch.device(device) if isinstance(device, str) else device
    if isinstance(device, torch.device) and device.index is None:
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", strict_set_device)


def test_cuda_gets_an_index_that_set_device_accepts(fake_cuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(ValueError, match="specified index"):
        torch.cuda.set_device(torch.device("cuda"))  # the crash the first prepared check would have hit
    for name in ("cuda", "auto", "cuda:0"):
        device = devices.launch_device(name)
        assert device == torch.device("cuda:0")
        torch.cuda.set_device(device)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert devices.launch_device("cuda") == torch.device("cuda:1") and gpu_check.child_device("cuda") == "cuda:1"
    with pytest.raises(ValueError, match="2 CUDA device"):
        devices.launch_device("cuda:5")
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        devices.launch_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert devices.launch_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match="is_available"):
        devices.launch_device("cuda")


def _costs_file(path: Path, parts: list[str]) -> None:
    results = {"device": "cuda:0", "gpu": GPU, "dtype": "bfloat16", "measured_where": "GPU", "parts_done": parts,
               "skipped": {}, "cost_table": {"1": {"curve": StepCurve.from_latencies([1, 8], [0.02, 0.021]).to_dict()}}}
    if "target_only" in parts:
        results["target_only"] = {"tokens_per_s": {"median": 50.0}}
    if "drafters" in parts:
        results["drafters"] = {"dspark": {f"{p}_ms_per_round": {"median": ms} for p, ms in
                                          (("draft", 3.0), ("verify", 21.0), ("overhead", 4.0))}}
        results["projection"] = [{"drafter": "dspark", "domain": "macro", "speed-up (Eq. 1)": 3.9}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": {"date": "2026-12-06 16:00 UTC"}, "results": results}))


class FakeMachine:
    """Plays every child process of the check on a GPU machine, and keeps what the check had
    written to its summary when each child started."""

    def __init__(self, check_out: Path, ch07_parts: list[str], ch07_stops: bool = False) -> None:
        self.out, self.parts, self.stops = check_out, ch07_parts, ch07_stops
        self.calls: list[dict] = []
        self.now = 1000.0  # the budget's clock: each fake child advances it by its seconds

    def clock(self) -> float:
        return self.now

    def __call__(self, cmd, log, deadline, env, echo, grace=gpu_check.GRACE):
        code, seconds, stopped = self.play(cmd, log, deadline, env)
        self.now += seconds
        return code, seconds, stopped

    def play(self, cmd, log, deadline, env):
        summary = json.loads((self.out / gpu_check.SUMMARY).read_text())
        self.calls.append({"cmd": cmd, "deadline": deadline, "pythonpath": env["PYTHONPATH"],
                           "steps_before": [s["name"] for s in summary["steps"]], "versions": "versions" in summary})
        log.parent.mkdir(parents=True, exist_ok=True)
        text = " ".join(cmd)
        log.write_text("$ " + text + "\n")
        if "-c" in cmd:  # the probe
            log.write_text("PROBE " + json.dumps({"name": GPU, "memory_gib": 79.1, "free_gib": 78.5, "torch": "2.11",
                                                  "ch07_results_name": COSTS_NAME, "device": cmd[-1]}) + "\n")
        elif "costs_first" in text:
            _costs_file(Path(cmd[cmd.index("--out") + 1]), self.parts)
            return (-2, deadline, True) if self.stops else (0, 120.0, False)
        elif "pip" in text and "install" in cmd:
            target = Path(cmd[cmd.index("--target") + 1])
            for spec in cmd[cmd.index("--target") + 2:]:
                name, version = spec.split("==")
                info = target / f"{name}-{version}.dist-info"
                info.mkdir(parents=True)
                (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        elif "run_notebooks.py" in text:
            name, folder = cmd[cmd.index("--only") + 1], Path(cmd[cmd.index("--out") + 1])
            status = folder / "status.json"
            entries = json.loads(status.read_text()) if status.exists() else {}
            entries[name] = {"status": "ok", "seconds": 5.0}
            folder.mkdir(parents=True, exist_ok=True)
            status.write_text(json.dumps(entries))
            return 0, 30.0, False
        return 0, 5.0, False


def _wheels(folder: Path, names: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}-{PINS[name]}-py3-none-any.whl").write_bytes(b"")
    return folder


def test_the_whole_check_on_a_mocked_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    out = tmp_path / "gpu_check"
    out.mkdir()
    machine = FakeMachine(out, ["cost_table", "target_only", "drafters", "projection", "memory"])
    missing = ["papermill", "datasets"]
    monkeypatch.setattr(gpu_check, "run_process", machine)
    monkeypatch.setattr(gpu_check, "missing_packages", lambda pins: [n for n in missing if n in pins])
    wheels = _wheels(tmp_path / "wheels", missing)
    args = gpu_check.parse_args(["--out", str(out), "--device", "cuda", "--wheels", str(wheels)])
    check = Check(args, PINS, Console(out / gpu_check.LOG))
    check.budget = gpu_check.Budget(480.0, machine.clock)
    assert check.run() == 0
    cmds = [" ".join(c["cmd"]) for c in machine.calls]
    kinds = ["probe" if "-c" in c["cmd"] else "costs" if "costs_first" in t else "pip-check" if "check" in c["cmd"]
             else "pip" if "pip" in t else "notebook" for c, t in zip(machine.calls, cmds)]
    # the order: probe, chapter 07's costs, the install (and pip check), then the chapters
    assert kinds[:4] == ["probe", "costs", "pip", "pip-check"] and set(kinds[4:]) == {"notebook"}
    assert all(c["versions"] for c in machine.calls)  # versions recorded before any child, the install's included
    probe, ch07, pip = machine.calls[0], machine.calls[1], machine.calls[2]
    assert probe["cmd"][-1] == "cuda:0" and ch07["cmd"][ch07["cmd"].index("--device") + 1] == "cuda:0"
    assert all("--device cuda:0" in t for t, k in zip(cmds, kinds) if k == "notebook")
    # the budget: chapter 07 capped, and told to keep within its own budget
    cap, inner = gpu_check.CH07_CAP["cuda"]
    assert ch07["deadline"] <= cap and ch07["cmd"][ch07["cmd"].index("--budget") + 1] == str(inner)
    # the install never touches the machine's environment: --target into a scratch folder on PYTHONPATH
    assert {"--no-index", "--no-deps", "--target"} <= set(pip["cmd"])
    scratch = pip["cmd"][pip["cmd"].index("--target") + 1]
    assert scratch not in ch07["pythonpath"] and all(scratch in c["pythonpath"] for c in machine.calls[3:])
    assert not Path(scratch).exists()  # removed at the end
    # the summary was rewritten as each step finished
    assert ch07["steps_before"] == ["device"] and pip["steps_before"] == ["device", "ch07 costs-first"]
    assert machine.calls[-1]["steps_before"][-1] == "smoke 06b_serving"
    summary = json.loads((out / gpu_check.SUMMARY).read_text())
    # the budget's accounting: 5 + 120 + 5 + 5 + 7 x 30 s leave 135 s; full 01 fits (135 - 30 kept for the
    # end >= 90), takes 30 s, and full 03 no longer does
    status = {s["name"]: s["status"] for s in summary["steps"]}
    assert status["full 01_toy_world"] == "ok" and status["full 03_parallel_drafting"] == "skipped"
    assert summary["wall_s"] == pytest.approx(375.0)
    assert summary["device"] == "cuda:0" and summary["chapter07"]["gpu"] == GPU and summary["ok"] is True
    assert summary["installed"] == {"papermill": PINS["papermill"], "datasets": PINS["datasets"]}
    # OUT ends with four files; the archive holds the costs file and every log
    assert sorted(p.name for p in out.iterdir()) == sorted([gpu_check.SUMMARY, gpu_check.LOG, gpu_check.ARCHIVE,
                                                            COSTS_NAME])
    with tarfile.open(out / gpu_check.ARCHIVE) as tar:
        names = tar.getnames()
    assert f"files/results/{COSTS_NAME}" in names and "files/logs/ch07_costs-first.log" in names, names
    log = (out / gpu_check.LOG).read_text()
    assert "versions before any install" in log
    assert "dspark: draft 3.00, verify 21.00, overhead 4.00 ms/round; projected speed-up at T = 1" in log  # the tail


def test_a_chapter07_stopped_at_its_deadline_keeps_its_finished_parts(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "gpu_check"
    out.mkdir()
    machine = FakeMachine(out, ["cost_table", "target_only"], ch07_stops=True)
    monkeypatch.setattr(gpu_check, "run_process", machine)
    monkeypatch.setattr(gpu_check, "missing_packages", lambda pins: [])
    args = gpu_check.parse_args(["--out", str(out), "--device", "cuda", "--budget", "600"])
    assert Check(args, PINS, Console(None)).run() == 1  # a required step did not finish
    summary = json.loads((out / gpu_check.SUMMARY).read_text())
    step = next(s for s in summary["steps"] if s["name"] == "ch07 costs-first")
    assert step["status"] == "stopped" and "parts done: cost_table, target_only" in step["detail"]
    assert summary["chapter07"]["parts_done"] == ["cost_table", "target_only"]
    assert summary["chapter07"]["target_only_tokens_per_s"] == 50.0 and (out / COSTS_NAME).exists()
    assert any(s["name"].startswith("smoke") and s["status"] == "ok" for s in summary["steps"])  # the rest still ran


# ------------------------------------------------------------------ the costs-first module, on this CPU


def test_costs_first_writes_each_part_as_it_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    study = costs_first.CostsStudy(concurrencies=(1, 2), points=2, context=8, repeats=3, warmup=1, prompt_tokens=8,
                                   new_tokens=4)
    path = tmp_path / "costs.json"
    seen: list[list[str]] = []
    real = costs_first.time_drafter

    def stop_after_one(*args, **kwargs):
        seen.append(json.loads(path.read_text())["results"]["parts_done"])
        if len(seen) == 2:
            raise KeyboardInterrupt  # the deadline's Ctrl-C, in the second drafter
        return real(*args, **kwargs)

    monkeypatch.setattr(costs_first, "time_drafter", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        costs_first.measure(torch.device("cpu"), path, study, kinds=("dflash", "eagle3"), echo=lambda line: None)
    assert seen[0] == ["target_built_s", "cost_table", "cost_table_skipped_for_memory", "target_only", "memory"]
    results = json.loads(path.read_text())["results"]
    assert list(results["drafters"]) == ["dflash"] and "CPU dry run" in results["measured_where"]
    assert sorted(results["cost_table"]) == ["1", "2"]
    timing = results["drafters"]["dflash"]["verify_ms_per_round"]
    assert timing["repeats"] == 3 and timing["min"] <= timing["median"] <= timing["max"]
    assert results["target_only"]["tokens_per_s"]["repeats"] == 3
    assert {row["drafter"] for row in results["projection"]} == {"dflash"}


def test_eq1_projection_from_costs_and_the_papers_tau() -> None:
    timing = lambda ms: {"median": ms}
    measured = {"dspark": {"draft_ms_per_round": timing(2.0), "verify_ms_per_round": timing(18.0),
                           "overhead_ms_per_round": timing(5.0)}}
    table = {"dspark": {"gsm8k": 6.0, "math500": 4.0, "humaneval": 3.0, "mt-bench": 2.0}}
    rows = {r["domain"]: r for r in costs_first.projected_speedups(20.0, measured, table)}
    # a round costs one target step here, so the speed-up is tau itself; with overhead, 20 tau / 25
    assert rows["math"]["speed-up (Eq. 1)"] == pytest.approx(5.0)
    assert rows["math"]["ms per token (Eq. 1)"] == pytest.approx(4.0)
    assert rows["chat"]["speed-up with overhead"] == pytest.approx(20 * 2.0 / 25)
    assert rows["macro"]["tau (the paper)"] == pytest.approx(3.75)


def test_the_serving_simulator_reads_a_committed_gpu_cost_table(tmp_path: Path) -> None:
    assert costs.load_gpu_cost_table(tmp_path) is None  # none measured yet
    _costs_file(tmp_path / "qwen3_4b_cpu_costs.json", ["cost_table"])
    cpu = json.loads((tmp_path / "qwen3_4b_cpu_costs.json").read_text())
    cpu["results"]["device"] = "cpu"
    (tmp_path / "qwen3_4b_cpu_costs.json").write_text(json.dumps(cpu))
    assert costs.load_gpu_cost_table(tmp_path) is None  # a CPU dry run is not a GPU's table
    _costs_file(tmp_path / COSTS_NAME, ["cost_table"])
    curves = costs.load_gpu_cost_table(tmp_path)
    assert list(curves) == [1] and curves[1].sizes == tuple(range(1, 9))  # dense: every B from 1 to 8
    assert curves[1].meta["gpu"] == GPU and curves[1].meta["file"] == COSTS_NAME
    assert curves[1].sps(1) == pytest.approx(50.0)
    (tmp_path / "qwen3_4b_bad_costs.json").write_text(json.dumps({"results": {"device": "cuda:0"}}))
    with pytest.raises(ValueError, match="no results.cost_table"):
        costs.load_gpu_cost_table(tmp_path)


def test_nothing_forks_once_cuda_is_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert workers.worker_processes(torch.device("cpu")) == 1
    pids = list(workers.fork_map(lambda job: (job, os.getpid()), 3, 4, describe=str))
    assert pids == [(0, os.getpid()), (1, os.getpid()), (2, os.getpid())]  # in this process, in job order
    assert "1 worker process;" in devices.runtime_banner("cpu")


def test_the_target_is_read_straight_onto_the_gpu(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """With accelerate there, `from_pretrained` gets device_map={"": "cuda:0"} (no host copy of the
    weights); without it, the target goes through host memory and the run says how to avoid that."""
    import importlib.util

    from dspark_lite.harness.gpu import loading

    seen: dict = {}

    class Stop(Exception):
        pass

    def fake_from_pretrained(source, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", fake_from_pretrained)
    find = importlib.util.find_spec
    for present in (True, False):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: (object() if present else None) if name == "accelerate" else find(name, *a))
        seen.clear()
        with pytest.raises(Stop):
            loading.load_target("Qwen/Qwen3-4B", torch.device("cuda:0"), torch.bfloat16)
        assert seen.get("device_map") == ({"": "cuda:0"} if present else None)
    assert "accelerate is not installed" in capsys.readouterr().out
    assert loading.direct_to_device(torch.device("cpu")) is False
