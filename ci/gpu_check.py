"""Everything the book can learn from a borrowed GPU, in one command that fits a time budget.

    python3 ci/gpu_check.py --out $OUT/gpu_check --device cuda      # on the GPU machine (no network)
    python ci/gpu_check.py --out /tmp/gpu_check_dry --device cpu     # the dry run, on a CPU
    python3 ci/gpu_check.py --check-wheels .gpu-wheels               # `make gpu-wheels` calls this

`--device cuda` is run as cuda:LOCAL_RANK (cuda:0 outside torchrun): torch.cuda.set_device refuses
a CUDA device without an index. The steps, most valuable first; each is timed and recorded in
OUT/gpu_check.json (rewritten after every step) whatever became of the others:

1. versions: the machine's package versions, printed and recorded before anything is installed;
2. device: what torch sees (device name, memory, versions), in a child process;
3. chapter 07 costs-first (`python -m dspark_lite.harness.gpu.costs_first`, torch and transformers
   only): with random weights of Qwen3-4B's shape, the cost table SPS(B) at R = 1..64, target-only
   tokens/s, draft, verify and overhead ms per round of Eagle3, DFlash and DSpark, peak memory
   against the estimate, and Eq. 1's projected speed-ups from the paper's tau. It writes its results
   file after every part, so a stop at its deadline keeps what finished; the file is also copied to
   OUT itself. On a CPU it runs the same path with every width shrunk (CPU numbers);
4. install: the packages of ci/gpu_wheels.txt that the machine lacks, from the wheel folder that
   `make gpu-wheels` builds (`--wheels`), with pip, no index and `--target` into a scratch folder put
   on the later steps' PYTHONPATH: the machine's own environment is never changed;
5. smoke: chapters 01_toy_world to 06b_serving (in `_toc.yml` order) at the smoke profile with
   DEVICE injected, one `ci/run_notebooks.py` call each, into OUT's files/smoke/;
6. full: chapters 01 and 03 at the full profile, timed, for as long as the budget lasts.

The budget (`--budget`, default 480 s) bounds the whole command. Every step runs in a child
process with a deadline: chapter 07's step has its own cap (`CH07_CAP`), and a step that cannot
start with enough time left is skipped with the reason. A step that reaches its deadline gets
Ctrl-C (the runner then saves the partly executed notebook), then is killed with its children.
A full chapter stopped so is recorded as "stopped" with its time: a GPU reader waits longer.

A borrowed machine sends back only a few files, so OUT ends with four: gpu_check.json (the
summary: versions, device, every step's status and wall time, chapter 07's main numbers),
gpu_check.log (this command's own lines), chapter 07's costs file (qwen3_4b_<gpu>_costs.json, to
commit under data/results/) and gpu_check_files.tar.gz (files/: every step's log, the executed
notebooks, status.json and the results files). `--no-pack` leaves files/ unpacked.
The exit status is 0 when no step failed and the required ones (device, chapter 07) succeeded,
1 otherwise, 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, TextIO

REPO = Path(__file__).resolve().parents[1]
WHEEL_LIST = REPO / "ci" / "gpu_wheels.txt"
IMAGE_LIST = REPO / "ci" / "gpu_image_packages.txt"
DEFAULT_WHEELS = REPO / ".gpu-wheels"
CARRY_LIMIT_MIB = 64  # what one device call may take along: the working tree and the carried folders
DEVICES = ("cuda", "cpu")
SMOKE_RANGE = ("01_toy_world", "06b_serving")
FULL_CHAPTERS = ("01_toy_world", "03_parallel_drafting")
SUMMARY, LOG, ARCHIVE, FILES = "gpu_check.json", "gpu_check.log", "gpu_check_files.tar.gz", "files"
# Modules the code imports that the check does without: (why it is safe to leave them out).
OPTIONAL_MODULES: dict[str, str] = {}  # none since the chapters say their results themselves (no myst-nb glue)
# Chapter 07's costs-first step: (its deadline, the budget it is told to keep within) per device.
# On an H100 it needs about two minutes (chapters/93_gpu_protocol.md, the budget table).
CH07_CAP = {"cuda": (210.0, 170.0), "cpu": (120.0, 80.0)}
# The budget, in seconds.
FINISH_RESERVE = 20.0  # writing the summary and packing the files
GRACE = 10.0  # between Ctrl-C and the kill, for a step at its deadline
MIN_SECONDS = {"install": 10.0, "device": 10.0, "smoke": 20.0, "ch07": 60.0, "full": 90.0}
MIN_BUDGET = 60.0
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONUNBUFFERED": "1"}
VERSIONS_OF = ("torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "numpy", "pandas", "pyarrow",
               "matplotlib", "seaborn", "datasets", "altair", "papermill", "nbclient", "ipykernel", "jupyter-client")


class SetupProblem(ValueError):
    """The check cannot start as asked; the message says what is wrong and what to do."""


# ========================================================================== the wheel list and its folder


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = WHEEL_LIST) -> dict[str, str]:
    """{canonical name: version} of a pinned requirements file (`name==version` a line, # comments).
    ValueError names a line that is not such a pin, or a package pinned twice."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)", line)
        if match is None:
            raise ValueError(f"{path.name}:{number}: expected name==version, got {raw.strip()!r}")
        name = canonical(match[1])
        if name in pins:
            raise ValueError(f"{path.name}:{number}: {match[1]} is pinned twice")
        pins[name] = match[2]
    return pins


def read_names(path: Path = IMAGE_LIST) -> set[str]:
    """The canonical package names of a list with one name a line (# comments)."""
    return {canonical(line.split("#", 1)[0].strip()) for line in Path(path).read_text().splitlines()
            if line.split("#", 1)[0].strip()}


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    """(canonical name, version) from a wheel's file name (name-version-[build-]python-abi-platform.whl)."""
    parts = wheel.name.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6) or not wheel.name.endswith(".whl"):
        raise ValueError(f"{wheel.name} is not a wheel file name (name-version-python-abi-platform.whl)")
    return canonical(parts[0]), parts[1]


def tree_bytes(root: Path = REPO) -> int:
    """Bytes of what a device call sends besides carried folders: tracked files, and untracked
    ones that git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sum((root / name).stat().st_size for name in listed if name and (root / name).is_file())


def check_wheel_folder(folder: Path, pins: dict[str, str], tree: int = 0,
                       limit_mib: float = CARRY_LIMIT_MIB) -> tuple[list[str], dict[str, Any]]:
    """Hold a wheel folder to its list: one wheel per pin at the pinned version, nothing else, and
    the folder plus the working tree (`tree` bytes) within what a device call carries. Returns
    (problems, {"wheels": count, "mib": folder size, "tree_mib", "total_mib"})."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder} does not exist: `make gpu-wheels` builds it"], {}
    wheels = sorted(folder.glob("*.whl"))
    problems, found = [], {}
    for wheel in wheels:
        name, version = wheel_name_version(wheel)
        found.setdefault(name, []).append(version)
    for name, version in sorted(pins.items()):
        versions = found.get(name, [])
        if versions != [version]:
            problems.append(f"{name}=={version}: the folder holds {', '.join(versions) or 'no wheel'}")
    extra = sorted(set(found) - set(pins))
    if extra:
        problems.append(f"wheels not in the list: {', '.join(extra)}")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    mib, limit = size / 2**20, limit_mib * 2**20
    report = {"wheels": len(wheels), "mib": round(mib, 2), "tree_mib": round(tree / 2**20, 2),
              "total_mib": round((size + tree) / 2**20, 2)}
    if size >= limit:
        problems.append(f"the wheels take {mib:.1f} MiB, over the {limit_mib:g} MiB a device call carries")
    elif size + tree > limit:
        problems.append(f"the wheels ({mib:.1f} MiB) and the working tree ({tree / 2**20:.1f} MiB) together exceed "
                        f"the {limit_mib:g} MiB a device call carries")
    return problems, report


def missing_packages(pins: dict[str, str]) -> list[str]:
    """The pinned packages that are not installed in this interpreter (any version counts as installed)."""
    importlib.invalidate_caches()
    missing = []
    for name in pins:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def check_install_source(missing: list[str], wheels: Path, pins: dict[str, str]) -> None:
    """SetupProblem unless the wheel folder can supply every missing package (nothing to check when none is)."""
    if not missing:
        return
    shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
    if not Path(wheels).is_dir():
        raise SetupProblem(f"{len(missing)} package(s) of ci/gpu_wheels.txt are not installed ({shown}) and the wheel "
                           f"folder {wheels} does not exist. Build it where pip reaches an index (`make gpu-wheels`) "
                           "and carry it to this machine (carry [\".gpu-wheels\"]), or pass --wheels FOLDER")
    have = {wheel_name_version(w) for w in Path(wheels).glob("*.whl")}
    lacking = [f"{name}=={pins[name]}" for name in missing if (name, pins[name]) not in have]
    if lacking:
        raise SetupProblem(f"the wheel folder {wheels} lacks {', '.join(lacking)}, which this machine does not have; "
                           "rebuild it with `make gpu-wheels`")


# ========================================================================== the budget


@dataclass
class Budget:
    """Seconds the whole check may take, counted from its start on `clock`."""

    total: float
    clock: Callable[[], float] = time.monotonic
    started: float | None = None

    def __post_init__(self) -> None:
        if self.started is None:
            self.started = self.clock()

    def elapsed(self) -> float:
        """Seconds since the start."""
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds left (negative once over)."""
        return self.total - self.elapsed()

    def plan(self, need: float, keep: float = 0.0) -> tuple[float | None, str]:
        """The deadline (seconds) for a step that needs at least `need` seconds while `keep` seconds
        stay reserved for later steps (and `FINISH_RESERVE` for the end), or (None, why it is skipped)."""
        deadline = self.left() - keep - FINISH_RESERVE - GRACE
        if deadline < need:
            return None, (f"needs at least {need:.0f} s, but {max(deadline, 0.0):.0f} s of the budget are left for it "
                          f"({max(self.left(), 0.0):.0f} s left in all, {keep + FINISH_RESERVE + GRACE:.0f} s kept "
                          "for the steps after it and the end)")
        return deadline, ""


# ========================================================================== steps and child processes


@dataclass
class Step:
    """One step's record: status is ok, failed, stopped (reached its deadline), skipped or not run."""

    name: str
    required: bool = True
    status: str = "not run"
    seconds: float | None = None  # a notebook's own execution time; else the step's wall time
    wall_seconds: float | None = None  # the child process's wall time, its start included
    detail: str = ""
    files: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether this step makes the check fail: a failure, or a required step not done."""
        return self.status == "failed" or (self.required and self.status != "ok")


class Console:
    """Prints this command's lines and keeps them in OUT/gpu_check.log."""

    def __init__(self, path: Path | None) -> None:
        self.file: TextIO | None = open(path, "w", encoding="utf-8") if path else None

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        if self.file:
            self.file.write(text + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


def _pump(stream: TextIO, log: TextIO, echo: Callable[[str], None]) -> None:
    for line in stream:
        log.write(line)
        log.flush()
        echo(line.rstrip("\n"))


def _descendants(pid: int) -> list[Any]:
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # psutil missing or the process gone: the process group is still killed
        return []


def _stop(proc: subprocess.Popen, grace: float) -> int:
    """Ctrl-C to `proc` (a notebook runner then saves what executed), then, after `grace` seconds,
    SIGKILL to it, its process group and every descendant (kernels run in sessions of their own)."""
    children = _descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGINT)
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    finally:
        children += [c for c in _descendants(proc.pid) if c not in children]
        for child in children:
            try:
                child.kill()
            except Exception:
                pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return proc.wait()


def run_process(cmd: list[str], log_path: Path, deadline: float, env: dict[str, str],
                echo: Callable[[str], None] = print, grace: float = GRACE) -> tuple[int, float, bool]:
    """Run `cmd` in the repository with its output in `log_path` (and echoed); stop it at
    `deadline` seconds. Returns (exit status, wall seconds, whether it reached the deadline)."""
    start = time.monotonic()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", start_new_session=True)
        reader = threading.Thread(target=_pump, args=(proc.stdout, log, echo), daemon=True)
        reader.start()
        timed_out = False
        try:
            code = proc.wait(timeout=max(deadline, 0.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            code = _stop(proc, grace)
        except KeyboardInterrupt:
            _stop(proc, grace)
            raise
        reader.join(timeout=5)
    return code, time.monotonic() - start, timed_out


def last_progress(log: Path) -> str:
    """The runner's newest progress echo in a step's log ("; last progress: cell 19/45, 4.4 min in:
    train target: 22% ..."), or "" when it printed none."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    found = re.findall(r"\] (cell \d+/\d+, [\d.]+ min in: [^\n]*)", text)
    return f"; last progress: {re.sub(r'[|█▏▎▍▌▋▊▉ ]{3,}', ' ', found[-1])[:160]}" if found else ""


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])


# ========================================================================== the check


PROBE = r"""
import json, platform, sys
info = {"python": platform.python_version(), "requested": sys.argv[1]}
try:
    import torch, transformers
    info.update(torch=torch.__version__, transformers=transformers.__version__, cuda_build=torch.version.cuda,
                cuda_available=torch.cuda.is_available(), torch_threads=torch.get_num_threads())
    device = torch.device(sys.argv[1])
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False: no usable CUDA device")
        torch.cuda.set_device(device)  # refuses a device without an index: the check passes cuda:N
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        info.update(name=props.name, memory_gib=round(total / 2**30, 1), free_gib=round(free / 2**30, 1),
                    capability=f"{props.major}.{props.minor}", multiprocessors=props.multi_processor_count,
                    gpu_count=torch.cuda.device_count())
        x = torch.randn(2048, 2048, device=device)
        torch.cuda.synchronize(device)
        info["matmul_ok"] = bool(torch.isfinite(x @ x).all())
    else:
        from dspark_lite.harness.result_files import cpu_name
        info["name"] = cpu_name()
    from dspark_lite.harness.gpu.costs_first import results_name
    info["ch07_results_name"] = results_name(device)
except Exception as error:
    info["error"] = f"{type(error).__name__}: {error}"
print("PROBE " + json.dumps(info))
"""


def child_device(requested: str) -> str:
    """The device the steps get: "cuda" becomes cuda:LOCAL_RANK (cuda:0 outside torchrun), since
    `torch.device("cuda")` has no index and `torch.cuda.set_device` refuses it; "cpu" stays."""
    if requested == "cuda":
        rank = os.environ.get("LOCAL_RANK", "0").strip() or "0"
        if not rank.isdigit():
            raise SetupProblem(f"LOCAL_RANK={rank!r}; expected a whole number >= 0")
        return f"cuda:{int(rank)}"
    return requested


def smoke_chapters(names: list[str]) -> list[str]:
    """The notebooks (stems, toc order) from `SMOKE_RANGE[0]` to `SMOKE_RANGE[1]`, both included."""
    first, last = SMOKE_RANGE
    missing = [n for n in SMOKE_RANGE if n not in names]
    if missing:
        raise SetupProblem(f"_toc.yml lacks {', '.join(missing)}; the smoke chapters run from {first} to {last}")
    return names[names.index(first): names.index(last) + 1]


def versions() -> dict[str, str | None]:
    """Installed versions of the packages the check relies on (None: not installed), read from the
    packages' metadata without importing them."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONS_OF:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def installed_in(folder: Path) -> dict[str, str]:
    """{canonical name: version} of the distributions pip installed into `folder` (`--target`)."""
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions(path=[str(folder)])
            if d.metadata["Name"]}


def costs_highlights(path: Path) -> dict[str, Any]:
    """Chapter 07's main numbers from its costs-first results file, whatever parts it finished:
    where it was measured, target-only tokens/s, draft/verify/overhead ms per round per drafter,
    peak memory against the estimate, the macro projected speed-ups, the concurrencies of the cost
    table, and what was skipped."""
    results = json.loads(path.read_text()).get("results", {})
    drafters = {kind: {phase: d[f"{phase}_ms_per_round"]["median"] for phase in ("draft", "verify", "overhead")}
                for kind, d in (results.get("drafters") or {}).items()}
    memory = results.get("memory") or {}
    return {"measured_where": results.get("measured_where"), "gpu": results.get("gpu"), "dtype": results.get("dtype"),
            "parts_done": results.get("parts_done", []), "skipped": results.get("skipped", {}),
            "target_only_tokens_per_s": (results.get("target_only") or {}).get("tokens_per_s", {}).get("median"),
            "ms_per_round": drafters, "peak_memory_gib": memory.get("peak_gib"),
            "memory_estimate_gib": memory.get("estimate_total_gib"),
            "projected_speedup_macro": {row["drafter"]: row["speed-up (Eq. 1)"] for row in results.get("projection", [])
                                        if row.get("domain") == "macro"},
            "cost_table_concurrencies": sorted(results.get("cost_table", {}), key=lambda r: float(r)),
            "seconds": results.get("seconds")}


def ch07_lines(found: dict[str, Any] | None) -> list[str]:
    """Chapter 07's main numbers as the console's last lines (a device call returns the console's end):
    target-only tokens/s, ms per round per drafter, peak memory, and the macro projected speed-ups."""
    if not found:
        return []
    lines = [f"\nchapter 07 costs-first ({found.get('measured_where')}; {found.get('dtype')}):"]
    if found.get("target_only_tokens_per_s") is not None:
        lines.append(f"  target only: {found['target_only_tokens_per_s']:.1f} tokens/s")
    for kind, ms in (found.get("ms_per_round") or {}).items():
        speedup = (found.get("projected_speedup_macro") or {}).get(kind)
        lines.append(f"  {kind}: draft {ms['draft']:.2f}, verify {ms['verify']:.2f}, overhead {ms['overhead']:.2f} ms/round"
                     + (f"; projected speed-up at T = 1 (Eq. 1, Table 1's macro tau) {speedup:.2f}x" if speedup else ""))
    if found.get("peak_memory_gib") is not None:
        lines.append(f"  peak GPU memory {found['peak_memory_gib']:.2f} GiB (estimate "
                     f"{found.get('memory_estimate_gib') or float('nan'):.2f} GiB)")
    if found.get("skipped"):
        lines.append(f"  skipped: {found['skipped']}")
    return lines


class Check:
    """The check's state: arguments, budget, steps, and where everything goes."""

    def __init__(self, args: argparse.Namespace, pins: dict[str, str], say: Console) -> None:
        self.args, self.pins, self.say = args, pins, say
        self.budget = Budget(float(args.budget))
        self.out: Path = args.out
        self.files = self.out / FILES
        self.device = child_device(args.device)
        self.steps: list[Step] = []
        self.site: Path | None = None  # the scratch folder the wheels go into (`--target`)
        self.summary: dict[str, Any] = {
            "command": "python ci/gpu_check.py " + shlex.join(sys.argv[1:]),
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "budget_s": args.budget, "device_requested": args.device, "device": self.device,
            "host": {"platform": platform.platform(), "cpus": os.cpu_count(),
                     "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None},
            "steps": []}
        env = dict(os.environ, **OFFLINE_ENV, DSPARK_RESULTS=str(self.files / "results"))
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if args.cache:
            env["DSPARK_CACHE"] = str(Path(args.cache).resolve())
        self.env = env

    # ------------------------------------------------------------------ bookkeeping

    def rel(self, path: Path) -> str:
        """A path as recorded: relative to OUT."""
        return str(Path(path).relative_to(self.out))

    def record(self, step: Step) -> Step:
        """Add or update a step in the summary and rewrite OUT/gpu_check.json."""
        if step not in self.steps:
            self.steps.append(step)
        self.write_summary()
        return step

    def write_summary(self) -> None:
        """OUT/gpu_check.json as it stands (rewritten after every step, so a killed check leaves one)."""
        self.summary.update(steps=[asdict(s) for s in self.steps], wall_s=round(self.budget.elapsed(), 1),
                            ok=not any(s.failed for s in self.steps))
        tmp = self.out / (SUMMARY + ".tmp")
        tmp.write_text(json.dumps(self.summary, indent=1) + "\n")
        os.replace(tmp, self.out / SUMMARY)

    def echo(self, prefix: str) -> Callable[[str], None]:
        return lambda line: print(f"  {prefix}| {line}", flush=True)

    def run_step(self, step: Step, cmd: list[str], need: float, keep: float = 0.0,
                 cap: float | None = None) -> tuple[int, Path] | None:
        """Run one step's command within the budget (and at most `cap` seconds), its output in
        files/logs/<step>.log; None when the budget cannot fit it (the step is then marked skipped,
        with the reason)."""
        deadline, why = self.budget.plan(need, keep)
        if deadline is None:
            step.status, step.detail = "skipped", why
            self.say(f"== {step.name}: skipped: {why}")
            return None
        deadline = deadline if cap is None else min(deadline, cap)
        log = self.files / "logs" / (re.sub(r"[^A-Za-z0-9_.-]+", "_", step.name) + ".log")
        step.files.append(self.rel(log))
        self.say(f"== {step.name} (at most {deadline:.0f} s; {self.budget.elapsed():.0f} s into the check)")
        code, seconds, timed_out = run_process(cmd, log, deadline, self.env, self.echo(step.name[:18]))
        step.seconds = step.wall_seconds = round(seconds, 1)
        if timed_out:
            step.status = "stopped"
            step.detail = f"reached its deadline of {deadline:.0f} s and was stopped"
        else:
            step.status = "ok" if code == 0 else "failed"
            if code != 0:
                tail = _tail(log)
                last = tail.splitlines()[-1].strip() if tail.strip() else "(no output)"
                step.detail = f"exit status {code}: {last}\nthe log's end:\n{tail}"
        return code, log

    # ------------------------------------------------------------------ the steps

    def show_versions(self) -> None:
        """Step 1: the machine's versions, printed and recorded before anything is installed."""
        found = versions()
        self.summary["versions"] = found
        self.say("versions before any install: " + ", ".join(f"{k} {v or '-'}" for k, v in found.items()))
        self.write_summary()

    def device_probe(self) -> dict[str, Any]:
        """Step 2: what torch sees; returns the probe's findings."""
        step = Step("device")
        done = self.run_step(step, [sys.executable, "-c", PROBE, self.device], MIN_SECONDS["device"])
        info: dict[str, Any] = {}
        if done is not None:
            lines = [l for l in done[1].read_text().splitlines() if l.startswith("PROBE ")]
            info = json.loads(lines[-1][len("PROBE "):]) if lines else {"error": "the probe printed nothing"}
            if info.get("error"):
                step.status, step.detail = "failed", info["error"]
            elif step.status == "ok":
                memory = f", {info['memory_gib']} GiB ({info['free_gib']} free)" if "memory_gib" in info else ""
                step.detail = (f"{info.get('name')}{memory}; torch {info.get('torch')} "
                               f"(CUDA {info.get('cuda_build')}), transformers {info.get('transformers')}")
        self.summary["device_probe"] = info
        self.say(f"   device: {step.status}: {step.detail}")
        self.record(step)
        return info

    def chapter07(self, info: dict[str, Any]) -> None:
        """Step 3: chapter 07's costs-first measurement; its results file is read even when the step
        stopped at its deadline (it holds every part that finished) and copied to OUT."""
        step = Step("ch07 costs-first")
        name = info.get("ch07_results_name") or f"qwen3_4b_{self.args.device}_costs.json"
        path = self.files / "results" / name
        cap, inner = CH07_CAP[self.args.device]
        cmd = [sys.executable, "-m", "dspark_lite.harness.gpu.costs_first", "--device", self.device, "--out",
               str(path), "--budget", str(inner)]
        done = self.run_step(step, cmd, MIN_SECONDS["ch07"], cap=cap)
        if done is not None and path.exists():
            step.files.append(self.rel(path))
            try:
                found = costs_highlights(path)
            except (ValueError, OSError, KeyError, TypeError) as error:
                step.status, step.detail = "failed", f"unreadable results file: {error}"
            else:
                self.summary["chapter07"] = {"results_file": name, **found}
                shutil.copy2(path, self.out / name)
                parts = f"parts done: {', '.join(found['parts_done'])}"
                if step.status == "ok":
                    peak = found.get("peak_memory_gib")
                    step.detail = parts + (f"; peak GPU memory {peak:.2f} GiB" if peak is not None else "")
                else:
                    step.detail = f"{step.detail.splitlines()[0]}; {parts}"
        elif done is not None and step.status == "ok":
            step.status, step.detail = "failed", f"exit status 0 but no results file {name}"
        self.say(f"   {step.name}: {step.status}: {step.detail.splitlines()[0] if step.detail else ''}")
        self.record(step)

    def install(self) -> bool:
        """Step 4: the missing packages from the wheel folder, with no index, `--no-deps` (the list
        holds every requirement the image lacks) and `--target` into a scratch folder that the later
        steps find on PYTHONPATH. Returns whether every pinned package is then importable."""
        step = Step("install", required=False)
        missing = missing_packages(self.pins)
        if not missing:
            step.status, step.seconds = "ok", 0.0
            step.detail = f"all {len(self.pins)} packages of ci/gpu_wheels.txt already installed; nothing to install"
            self.say(f"== install: {step.detail}")
            self.record(step)
            return True
        try:
            check_install_source(missing, self.args.wheels, self.pins)
        except SetupProblem as problem:
            step.status, step.detail = "skipped", str(problem)
            self.say(f"== install: skipped: {problem}")
            self.record(step)
            return False
        self.site = Path(tempfile.mkdtemp(prefix="gpu_check_site_"))
        self.say(f"== install: {len(missing)} of {len(self.pins)} packages missing ({', '.join(missing[:8])}"
                 f"{' ...' if len(missing) > 8 else ''}); into a scratch folder with --target, no index")
        pip = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(self.args.wheels),
               "--no-cache-dir", "--disable-pip-version-check", "--no-deps", "--target", str(self.site)]
        started = time.monotonic()
        self.run_step(step, pip + [f"{name}=={self.pins[name]}" for name in missing], MIN_SECONDS["install"])
        self.env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(self.site)] + [
            p for p in self.env["PYTHONPATH"].split(os.pathsep) if p and p != str(REPO)])
        check = Step("pip-check", required=False)
        notes = []
        if self.run_step(check, [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
                         5.0) is not None and check.status != "ok":
            notes.append("pip check reports unmet requirements (logs/pip-check.log); a mismatch with the image's own "
                         "versions shows up there")
        step.files += check.files
        got = installed_in(self.site)
        still = [name for name in missing if name not in got]
        self.summary["installed"] = got
        step.seconds = step.wall_seconds = round(time.monotonic() - started, 1)
        step.status = "ok" if not still else "failed"
        step.detail = "; ".join([f"installed {len(missing) - len(still)} of {len(missing)} missing packages into a "
                                 "scratch folder on PYTHONPATH"] + ([f"still missing: {', '.join(still)}"] if still else [])
                                + notes)
        self.say(f"   install: {step.status}: {step.detail}")
        self.record(step)
        return not still

    def notebook(self, name: str, profile: str, need: float, keep: float, required: bool) -> Step:
        """One chapter through the book's runner (`ci/run_notebooks.py`) with DEVICE injected."""
        step = Step(f"{profile} {name}", required=required)
        folder = self.files / profile
        cmd = [sys.executable, str(REPO / "ci" / "run_notebooks.py"), "--profile", profile, "--device",
               self.device, "--out", str(folder), "--results", str(folder / "results"), "--only", name]
        done = self.run_step(step, cmd, need, keep)
        if done is None:
            return self.record(step)
        notebook = folder / "chapters" / f"{name}.ipynb"
        if notebook.exists():
            step.files.append(self.rel(notebook))
        status = folder / "status.json"
        entry = json.loads(status.read_text()).get(name, {}) if status.exists() else {}
        if step.status == "stopped":  # whatever the runner made of the Ctrl-C (a dead kernel, say)
            step.detail = (f"stopped at the budget after {step.seconds} s: at the {profile} profile this chapter takes "
                           "longer than that here" + last_progress(done[1]))
        elif entry.get("status") == "ok":
            step.seconds = round(float(entry["seconds"]), 1)  # the notebook's own time, without the runner's start
            step.detail = f"executed in {step.seconds} s ({step.wall_seconds} s with the runner's start)"
        elif entry.get("status") == "failed":
            step.status, step.detail = "failed", entry.get("error", step.detail)
        self.say(f"   {step.name}: {step.status}: {step.detail.splitlines()[0] if step.detail else ''}")
        return self.record(step)

    def run(self) -> int:
        """All steps in order, most valuable first; returns the exit status."""
        from ci.toc import toc_notebooks

        self.say(f"GPU check: device {self.args.device} (as {self.device}), budget {self.args.budget:.0f} s, "
                 f"out {self.out}")
        self.show_versions()
        info = self.device_probe()
        self.chapter07(info)
        ready = self.install()
        for name in smoke_chapters([nb.stem for nb in toc_notebooks(REPO)]):
            if ready:
                self.notebook(name, "smoke", MIN_SECONDS["smoke"], 0.0, required=False)
            else:
                self.record(Step(f"smoke {name}", required=False, status="skipped",
                                 detail="the packages of ci/gpu_wheels.txt are not all installed (see install)"))
        for name in FULL_CHAPTERS:
            if ready:
                self.notebook(name, "full", MIN_SECONDS["full"], 0.0, required=False)
        return self.finish()

    def finish(self) -> int:
        """Write the summary, pack files/ into the archive, print the table; the exit status."""
        self.write_summary()
        if not self.args.no_pack and self.files.exists():
            with tarfile.open(self.out / ARCHIVE, "w:gz") as tar:
                tar.add(self.files, arcname=FILES)
            self.summary["archive"] = {"file": ARCHIVE, "mib": round((self.out / ARCHIVE).stat().st_size / 2**20, 2),
                                       "holds": sorted(self.rel(p) for p in self.files.rglob("*") if p.is_file())}
            shutil.rmtree(self.files)
        if self.site is not None:
            shutil.rmtree(self.site, ignore_errors=True)
        self.write_summary()
        self.say("")
        self.say(f"{'step':<30}{'status':<9}{'seconds':>9}  note")
        for s in self.steps:
            seconds = "" if s.seconds is None else f"{s.seconds:.1f}"
            note = s.detail.splitlines()[0][:90] if s.detail else ""
            self.say(f"{s.name:<30}{s.status:<9}{seconds:>9}  {note}")
        for line in ch07_lines(self.summary.get("chapter07")):
            self.say(line)
        ok = not any(s.failed for s in self.steps)
        self.say(f"\n{'all required steps ok' if ok else 'FAILED'} in {self.budget.elapsed():.0f} s of a "
                 f"{self.args.budget:.0f} s budget; summary in {self.out / SUMMARY}")
        return 0 if ok else 1


# ========================================================================== command line


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; argparse's usage error (exit 2) for anything that cannot work."""
    ap = argparse.ArgumentParser(prog="ci/gpu_check.py", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="see the module docstring and DEVELOPERS.md")
    ap.add_argument("--out", type=Path, help="folder for gpu_check.json, gpu_check.log and gpu_check_files.tar.gz")
    ap.add_argument("--device", choices=DEVICES, default="cuda", help="the device every step runs on (default cuda)")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds the whole check may take (default 480)")
    ap.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS,
                    help="wheel folder for the missing packages (default .gpu-wheels; `make gpu-wheels`)")
    ap.add_argument("--cache", type=Path, help="DSPARK_CACHE for the steps (default: the book's own cache)")
    ap.add_argument("--no-pack", action="store_true", help="leave OUT/files/ as it is instead of packing it")
    ap.add_argument("--check-wheels", type=Path, metavar="FOLDER",
                    help="only check a wheel folder against ci/gpu_wheels.txt and the carry limit (make gpu-wheels)")
    args = ap.parse_args(argv)
    if args.check_wheels is not None:
        return args
    if args.out is None:
        ap.error("--out FOLDER is required (where gpu_check.json and the files go)")
    if args.out.exists() and not args.out.is_dir():
        ap.error(f"--out {args.out} is a file; expected a folder (created if missing)")
    if not args.budget >= MIN_BUDGET:
        ap.error(f"--budget must be at least {MIN_BUDGET:.0f} seconds, got {args.budget:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the check (or `--check-wheels`); returns the exit status."""
    args = parse_args(argv)
    pins = read_pins(WHEEL_LIST)
    if args.check_wheels is not None:
        problems, report = check_wheel_folder(args.check_wheels, pins, tree_bytes())
        if report:
            print(f"{args.check_wheels}: {report['wheels']} wheels, {report['mib']:.1f} MiB; with the working tree "
                  f"({report['tree_mib']:.1f} MiB) {report['total_mib']:.1f} of the {CARRY_LIMIT_MIB} MiB a device "
                  "call carries")
        for problem in problems:
            print(f"gpu-wheels: {problem}", file=sys.stderr)
        return 1 if problems else 0
    try:
        child_device(args.device)
    except SetupProblem as problem:
        print(f"ci/gpu_check.py: {problem}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for stale in [args.out / SUMMARY, args.out / LOG, args.out / ARCHIVE, *args.out.glob("qwen3_4b_*_costs.json")]:
        stale.unlink(missing_ok=True)
    shutil.rmtree(args.out / FILES, ignore_errors=True)
    say = Console(args.out / LOG)
    check = Check(args, pins, say)
    try:
        return check.run()
    except KeyboardInterrupt:
        check.summary["interrupted"] = True
        say("interrupted: the summary so far is written")
        check.finish()
        return 130
    finally:
        say.close()


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a script: make `ci` importable
        sys.path.insert(0, str(REPO))
    sys.exit(main())
