"""Issue 42 (the prepared GPU check, ci/gpu_check.py): the wheel list is pinned, repeats nothing the
GPU image ships and covers every module the smoke chapters, dspark_lite and the runner import that
the image lacks (and every requirement of what it lists); the runner injects DEVICE; the budget
skips a step that cannot fit and stops one at its deadline with its children; bad arguments get
clear errors. Seconds: no chapter is executed and nothing is trained."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import nbformat
import psutil
import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from ci import gpu_check, run_notebooks
from ci.gpu_check import (Budget, Check, Console, SetupProblem, canonical, check_install_source, check_wheel_folder,
                          read_names, read_pins, run_process, smoke_chapters)
from ci.toc import REPO, toc_notebooks

PINS = read_pins(gpu_check.WHEEL_LIST)
IMAGE = read_names(gpu_check.IMAGE_LIST)
# The GPU machine's interpreter, for evaluating requirement markers (python 3.12.3 on x86-64 Linux).
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


# ------------------------------------------------------------------ what the check imports


def _code(source: str) -> str:
    """A cell's source as Python: IPython's magics and shell lines become `pass`."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        lines.append(line[: len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line)
    return "\n".join(lines)


def _sources() -> dict[str, str]:
    """Every piece of code the check runs: the chapters it executes (smoke 01-06b, the full ones,
    07's cells), the package, and the runner with its kernel setup (and the figures' renderer it
    enables) and this script."""
    names = smoke_chapters([nb.stem for nb in toc_notebooks(REPO)]) + ["07_qwen3_4b_gpu"]
    out = {}
    for name in names:
        nb = nbformat.read(REPO / "chapters" / f"{name}.ipynb", as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                out[f"{name} cell {i}"] = _code(cell.source)
    for path in sorted((REPO / "dspark_lite").rglob("*.py")) + [REPO / "ci" / f for f in (
            "run_notebooks.py", "kernel_setup.py", "vega_figures.py", "toc.py", "gpu_check.py")]:
        out[str(path.relative_to(REPO))] = path.read_text()
    return out


def _imports(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """(top-level module, node) of every absolute import in a tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], node))
    return found


def _imported_modules() -> dict[str, set[str]]:
    modules: dict[str, set[str]] = {}
    for where, source in _sources().items():
        for module, _ in _imports(ast.parse(source)):
            modules.setdefault(module, set()).add(where)
    return modules


def test_wheel_list_is_pinned_at_the_books_versions() -> None:
    book = {canonical(line.split("==")[0]): line.split("==")[1].strip()
            for line in (REPO / "requirements.txt").read_text().splitlines() if "==" in line}
    assert len(PINS) >= 30  # the runner alone needs papermill, nbclient, ipykernel and their kin
    for name, version in PINS.items():
        assert book.get(name) == version, f"{name}=={version}: requirements.txt pins {book.get(name)}"


def test_wheel_list_repeats_nothing_the_image_ships() -> None:
    assert {"torch", "transformers", "numpy", "pandas", "matplotlib", "seaborn", "pyarrow", "tqdm"} <= IMAGE
    assert not set(PINS) & IMAGE, f"already in the GPU image: {sorted(set(PINS) & IMAGE)}"


def test_wheel_list_covers_every_module_the_check_imports() -> None:
    std = set(sys.stdlib_module_names) | {"dspark_lite", "ci", "__future__"}
    owners = metadata.packages_distributions()
    uncovered, unknown = [], []
    for module, where in sorted(_imported_modules().items()):
        if module in std or module in gpu_check.OPTIONAL_MODULES:
            continue
        if module not in owners:
            unknown.append(f"{module} (in {sorted(where)[0]})")
            continue
        dists = {canonical(d) for d in owners[module]}
        if not dists & (IMAGE | set(PINS)):
            uncovered.append(f"{module} ({', '.join(sorted(dists))}; in {sorted(where)[0]})")
    assert not unknown, f"imported but not installed here, so not mapped to a package: {unknown}"
    assert not uncovered, f"neither in the GPU image nor in ci/gpu_wheels.txt: {uncovered}"
    # The runner's kernel is started, not imported: it must travel too.
    assert {"ipykernel", "papermill", "nbclient", "nbformat", "altair", "datasets"} <= set(PINS)
    # kernel_setup.py draws each chart's static PNG with vl_convert (ci/vega_figures.py) in the same kernel.
    assert "vl_convert" in _imported_modules() and "vl-convert-python" in PINS


def test_left_out_modules_are_imported_only_where_their_absence_is_caught() -> None:
    seen = set()
    for where, source in _sources().items():
        tree = ast.parse(source)
        guarded = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                    "ImportError" in ast.unparse(h.type or ast.Name("BaseException")) for h in node.handlers):
                guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for module, node in _imports(tree):
            if module in gpu_check.OPTIONAL_MODULES:
                seen.add(module)
                assert id(node) in guarded, f"{where} imports {module} outside a try that catches ImportError"
    assert seen == set(gpu_check.OPTIONAL_MODULES)  # a listed module no code imports is a stale entry


def test_wheel_list_holds_every_requirement_of_what_it_lists() -> None:
    for name, version in PINS.items():
        assert metadata.version(name) == version, f"this venv has {name} {metadata.version(name)}, the list {version}"
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(GPU_PYTHON):
                continue
            need = canonical(req.name)
            assert need in PINS or need in IMAGE, f"{name} needs {req}, which neither the list nor the image has"
    # A marker that only the GPU's python selects is counted: papermill needs aiohttp on 3.12.
    assert Marker('python_version == "3.12"').evaluate(GPU_PYTHON) and "aiohttp" in IMAGE


# ------------------------------------------------------------------ the wheel folder


def _wheel(folder: Path, name: str, version: str, size: int = 10) -> None:
    (folder / f"{name}-{version}-py3-none-any.whl").write_bytes(b"x" * size)


def test_wheel_folder_is_held_to_the_list_and_the_carry_limit(tmp_path: Path) -> None:
    pins = {"papermill": "2.7.0", "nbclient": "0.11.0", "altair": "6.3.0"}
    _wheel(tmp_path, "papermill", "2.7.0")
    _wheel(tmp_path, "nbclient", "0.10.0")
    _wheel(tmp_path, "ipywidgets", "8.1.9")
    problems, report = check_wheel_folder(tmp_path, pins, tree=0)
    assert report["wheels"] == 3
    assert "nbclient==0.11.0: the folder holds 0.10.0" in problems
    assert "altair==6.3.0: the folder holds no wheel" in problems
    assert "wheels not in the list: ipywidgets" in problems
    assert not any(p.startswith("papermill") for p in problems)
    (tmp_path / "nbclient-0.10.0-py3-none-any.whl").unlink()
    (tmp_path / "ipywidgets-8.1.9-py3-none-any.whl").unlink()
    _wheel(tmp_path, "nbclient", "0.11.0")
    _wheel(tmp_path, "altair", "6.3.0", size=2**20)
    assert check_wheel_folder(tmp_path, pins, tree=0)[0] == []
    problems, _ = check_wheel_folder(tmp_path, pins, tree=0, limit_mib=0.5)
    assert problems and "over the 0.5 MiB a device call carries" in problems[0]
    problems, _ = check_wheel_folder(tmp_path, pins, tree=2**20, limit_mib=1.5)
    assert problems and "the working tree (1.0 MiB) together exceed" in problems[0]


def test_missing_packages_need_a_wheel_folder(tmp_path: Path) -> None:
    check_install_source([], tmp_path / "absent", PINS)  # nothing missing: no folder needed
    with pytest.raises(SetupProblem, match=r"not installed \(papermill\).*does not exist.*make gpu-wheels.*carry"):
        check_install_source(["papermill"], tmp_path / "absent", PINS)
    with pytest.raises(SetupProblem, match=r"lacks papermill==2\.7\.0"):
        check_install_source(["papermill"], tmp_path, PINS)
    _wheel(tmp_path, "papermill", "2.7.0")
    check_install_source(["papermill"], tmp_path, PINS)


def test_missing_wheels_skip_the_install_but_not_chapter07(tmp_path: Path, monkeypatch) -> None:
    """Chapter 07's costs need no wheel: without the wheel folder the install and the chapters that
    need it are skipped with the reason, after chapter 07's step has run."""
    calls: list[list[str]] = []

    def fake_run(cmd, log, deadline, env, echo, grace=gpu_check.GRACE):
        calls.append(cmd)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("PROBE {}\n" if "-c" in cmd else "")
        return 0, 1.0, False

    monkeypatch.setattr(gpu_check, "run_process", fake_run)
    monkeypatch.setattr(gpu_check, "missing_packages", lambda pins: ["datasets", "papermill"])
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--wheels", str(tmp_path / "none")])
    summary = json.loads((tmp_path / "out" / gpu_check.SUMMARY).read_text())
    steps = {s["name"]: s for s in summary["steps"]}
    assert any("costs_first" in " ".join(c) for c in calls) and not any("pip" in c for c in calls)
    assert steps["install"]["status"] == "skipped"
    assert "2 package(s) of ci/gpu_wheels.txt are not installed (datasets, papermill)" in steps["install"]["detail"]
    assert steps["smoke 01_toy_world"]["status"] == "skipped"
    assert code == 1  # chapter 07's fake step wrote no results file: a required step failed


@pytest.mark.parametrize("argv, message", [
    (["--device", "tpu"], "invalid choice: 'tpu'"),
    (["--device", "cpu", "--budget", "5"], "--budget must be at least 60 seconds"),
    (["--device", "cpu"], "--out FOLDER is required"),
])
def test_bad_arguments_get_clear_errors(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    if "--out" not in argv and "--out FOLDER" not in message:
        argv = argv + ["--out", str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path: Path, capsys) -> None:
    file = tmp_path / "a_file"
    file.write_text("")
    with pytest.raises(SystemExit):
        gpu_check.main(["--out", str(file), "--device", "cpu"])
    assert "is a file; expected a folder" in capsys.readouterr().err


# ------------------------------------------------------------------ DEVICE through the runner


def _tiny_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('PROFILE = "full"\nDEVICE = "auto"\nSEED = 0')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# tiny"), params, nbformat.v4.new_code_cell("print(PROFILE, DEVICE)")]
    nbformat.write(nb, path)
    return path


def test_runner_injects_device_beside_profile(tmp_path: Path) -> None:
    src = _tiny_notebook(tmp_path / "tiny.ipynb")
    nb = run_notebooks.parameterized(src, "smoke", "cuda")
    tags = [cell.metadata.get("tags", []) for cell in nb.cells]
    injected = tags.index(["injected-parameters"])
    assert injected == tags.index(["parameters"]) + 1  # right after the notebook's own parameters
    source = nb.cells[injected].source
    assert 'PROFILE = "smoke"' in source and 'DEVICE = "cuda"' in source and "SEED" not in source
    plain = run_notebooks.parameterized(src, "smoke")
    assert "DEVICE" not in plain.cells[injected].source  # the notebook's own DEVICE stays
    assert 'DEVICE = "cuda:1"' in run_notebooks.parameterized(src, "smoke", "cuda:1").cells[injected].source
    with pytest.raises(ValueError, match="device must be auto, cpu, mps, cuda or cuda:N, got 'gpu'"):
        run_notebooks.parameterized(src, "smoke", "gpu")


def test_runner_refuses_a_bad_device_flag(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        run_notebooks.main(["--profile", "smoke", "--out", str(tmp_path), "--device", "cdua", "--only", "01_toy_world"])
    assert stop.value.code == 2
    assert "device must be auto, cpu, mps, cuda or cuda:N, got 'cdua'" in capsys.readouterr().err
    assert not (tmp_path / "status.json").exists()


def test_smoke_chapters_are_01_to_06b_in_toc_order() -> None:
    names = [nb.stem for nb in toc_notebooks(REPO)]
    chosen = smoke_chapters(names)
    assert chosen[0] == "01_toy_world" and chosen[-1] == "06b_serving"
    assert chosen == [n for n in names if n in chosen] and "07_qwen3_4b_gpu" not in chosen
    assert len(chosen) == names.index("06b_serving") - names.index("01_toy_world") + 1
    with pytest.raises(SetupProblem, match="lacks 06b_serving"):
        smoke_chapters([n for n in names if n != "06b_serving"])


# ------------------------------------------------------------------ the budget


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_skips_a_step_that_cannot_fit() -> None:
    clock = FakeClock()
    budget = Budget(480, clock)
    spare = gpu_check.FINISH_RESERVE + gpu_check.GRACE
    deadline, why = budget.plan(need=60, keep=150)
    assert why == "" and deadline == pytest.approx(480 - 150 - spare)
    clock.now += 400  # 80 s left
    deadline, why = budget.plan(need=90)
    assert deadline is None
    assert f"needs at least 90 s, but {80 - spare:.0f} s of the budget are left for it (80 s left in all" in why
    deadline, why = budget.plan(need=30)
    assert deadline == pytest.approx(80 - spare)  # a step never runs past the budget's end
    assert budget.plan(need=30, keep=40)[0] is None  # time kept for a later step is not given away


def test_a_step_that_cannot_fit_is_skipped_without_starting(tmp_path: Path, monkeypatch) -> None:
    started = []
    monkeypatch.setattr(gpu_check, "run_process", lambda *a, **k: started.append(a) or (0, 0.0, False))
    args = gpu_check.parse_args(["--out", str(tmp_path), "--device", "cpu", "--budget", "60"])
    check = Check(args, PINS, Console(None))
    check.budget.started -= 40  # 20 s left: less than the finish reserve and a full chapter need
    step = check.notebook("01_toy_world", "full", gpu_check.MIN_SECONDS["full"], 0.0, required=False)
    assert started == [] and step.status == "skipped" and "needs at least 90 s" in step.detail
    assert not step.failed  # an optional step skipped for time does not fail the check
    summary = json.loads((tmp_path / gpu_check.SUMMARY).read_text())
    assert summary["steps"][0]["name"] == "full 01_toy_world" and summary["steps"][0]["status"] == "skipped"
    assert summary["ok"] is True
    required = check.notebook("02_speculative_decoding", "smoke", gpu_check.MIN_SECONDS["smoke"], 0.0, required=True)
    assert required.status == "skipped" and required.failed  # a required step not done fails it
    assert json.loads((tmp_path / gpu_check.SUMMARY).read_text())["ok"] is False


def test_a_step_at_its_deadline_is_stopped_with_its_children(tmp_path: Path) -> None:
    # The child starts a grandchild in a session of its own (as jupyter_client starts a kernel).
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
            "print('grandchild', p.pid, flush=True)\n"
            "time.sleep(120)\n")
    lines: list[str] = []
    start = time.monotonic()
    rc, seconds, timed_out = run_process([sys.executable, "-c", code], tmp_path / "step.log", 1.5, {}, lines.append,
                                         grace=1.0)
    assert timed_out and rc != 0 and time.monotonic() - start < 10
    pid = int(next(line for line in lines if line.startswith("grandchild")).split()[1])
    time.sleep(0.2)
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert gone, "the grandchild outlived its stopped step"
    assert (tmp_path / "step.log").read_text().startswith("$ ")  # the command, then its output


def test_a_chapter_stopped_at_the_budget_is_recorded_as_stopped(tmp_path: Path, monkeypatch) -> None:
    """The runner reports the Ctrl-C it got as a dead kernel; the check records the stop, with the
    last progress line, and the optional full chapter does not fail the check."""
    def fake_run(cmd, log, deadline, env, echo, grace=gpu_check.GRACE):
        folder = Path(cmd[cmd.index("--out") + 1])
        (folder / "chapters").mkdir(parents=True)
        (folder / "chapters" / "01_toy_world.ipynb").write_text("{}")
        (folder / "status.json").write_text(json.dumps({"01_toy_world": {
            "status": "failed", "seconds": 99.0, "error": "01_toy_world.ipynb: the kernel died"}}))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("    [01_toy_world] cell 19/45, 1.5 min in: "
                       "train target:  22%|███████   | 220/1000\n")
        return -9, 99.5, True

    monkeypatch.setattr(gpu_check, "run_process", fake_run)
    args = gpu_check.parse_args(["--out", str(tmp_path), "--device", "cpu"])
    step = Check(args, PINS, Console(None)).notebook("01_toy_world", "full", 90.0, 0.0, required=False)
    assert step.status == "stopped" and step.seconds == 99.5 and not step.failed
    assert step.detail.startswith("stopped at the budget after 99.5 s: at the full profile this chapter takes longer")
    assert "last progress: cell 19/45, 1.5 min in: train target:  22% 220/1000" in step.detail
    assert "files/full/chapters/01_toy_world.ipynb" in step.files  # the partly executed notebook is kept


def test_chapter07_highlights_read_its_results_file(tmp_path: Path) -> None:
    path = tmp_path / "qwen3_4b_h200_costs.json"
    path.write_text(json.dumps({"provenance": {}, "results": {
        "measured_where": "GPU", "gpu": "NVIDIA H200", "dtype": "bfloat16", "parts_done": ["cost_table", "drafters"],
        "drafters": {"dspark": {f"{p}_ms_per_round": {"median": m} for p, m in
                                (("draft", 4.0), ("verify", 11.0), ("overhead", 2.0))}},
        "memory": {"peak_gib": 21.5, "estimate_total_gib": 20.0}, "cost_table": {"16": {}, "4": {}, "64": {}},
        "projection": [{"drafter": "dspark", "domain": "macro", "speed-up (Eq. 1)": 2.5}], "seconds": 95.0}}))
    got = gpu_check.costs_highlights(path)
    assert got["ms_per_round"]["dspark"] == {"draft": 4.0, "verify": 11.0, "overhead": 2.0}
    assert got["cost_table_concurrencies"] == ["4", "16", "64"] and got["projected_speedup_macro"] == {"dspark": 2.5}
    assert got["peak_memory_gib"] == 21.5 and got["gpu"] == "NVIDIA H200" and got["seconds"] == 95.0


def test_make_target_and_ignore_rule_exist() -> None:
    makefile = (REPO / "Makefile").read_text()
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY"))
    assert "gpu-wheels" in phony.split()
    assert "--check-wheels" in makefile and "-r ci/gpu_wheels.txt" in makefile and "--python-version 3.12" in makefile
    ignored = subprocess.run(["git", "check-ignore", "-q", ".gpu-wheels/x.whl"], cwd=REPO).returncode
    assert ignored == 0, ".gpu-wheels/ must be git-ignored"
