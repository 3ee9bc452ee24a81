"""Execute the book's notebooks, in `_toc.yml` order (the preface last: its scoreboard reads every
chapter's and study's verdict box), and say how each one went.

    python ci/run_notebooks.py --profile full --out _build/executed --results _build/results
    python ci/run_notebooks.py --profile smoke --out /tmp/x --only 01_toy_world
    python ci/run_notebooks.py --profile smoke --device cuda --out /tmp/x    (ci/gpu_check.py does this)

Each notebook gets `PROFILE` injected after its `parameters` cell (papermill's parameterisation;
`DEVICE` too when `--device` is given; otherwise DEVICE and SEED keep the notebook's defaults)
and runs with nbclient in a `python3` kernel whose working directory is `chapters/`, with the
hub offline and `DSPARK_RESULTS` pointing at `--results`. In that kernel, progress bars print as
text lines (rate and ETA), which the executed notebook keeps and this runner echoes
(`ci/kernel_setup.py`).

No limit kills progress: a cell is stopped only when it has printed nothing for `--stall`
seconds (default 900 full, 300 smoke); a training that is advancing prints every few seconds.
Trainings checkpoint into the artifact cache, so a chapter that fails anyway leaves its
progress for the next run. A failing notebook is reported (cell, exception), its partially
executed copy is kept in `--out`, and the run goes on with the others (QuantEcon's
keep-going); `OUT/status.json` records every chapter's outcome for `ci/build_book.py`,
which renders failed chapters with a banner. The exit status is non-zero if any failed.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, toc_notebooks

KERNEL = "python3"
DEVICE_NAME = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")  # what `dspark_lite.runtime.resolve_device` takes
DEFAULT_STALL = {"full": 900, "smoke": 300}
STATUS = "status.json"
KERNEL_SETUP = Path(__file__).resolve().parent / "kernel_setup.py"
KERNEL_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}


class NotebookFailed(RuntimeError):
    """A notebook raised, stalled or ran past its limit; the message says where and what."""


@contextlib.contextmanager
def _kernel_env(results_dir: Path) -> Iterator[None]:
    """Set the environment the kernel inherits (offline hub, results folder, repo on the path)."""
    env = dict(KERNEL_ENV, DSPARK_RESULTS=str(results_dir.resolve()))
    path = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _where(src: Path, source: str) -> str:
    """Name the committed notebook's cell whose source is `source` (index and id)."""
    import nbformat

    for i, cell in enumerate(nbformat.read(src, as_version=4).cells):
        if cell.source == source:
            return f"cell {i} (id {cell.get('id', '?')})"
    return "a cell"


def last_progress_line(text: str) -> str:
    """The newest non-blank line of stream text, where tqdm redraws with carriage returns."""
    lines = [line.strip() for line in re.split(r"[\r\n]", text) if line.strip()]
    return lines[-1] if lines else ""


def _watched_client(nb, name: str, stall: float, echo_every: float, **kwargs):
    """An nbclient NotebookClient that notes when the kernel last printed anything (progress),
    echoes the newest progress line every `echo_every` seconds, and interrupts a cell that has
    been silent for `stall` seconds (then kills the kernel if the interrupt does not stop it)."""
    from nbclient import NotebookClient

    class WatchedClient(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            now = time.monotonic()
            self.last_output = now
            if msg["msg_type"] == "stream":
                text = msg["content"].get("text", "")
                for resumed in re.findall(r"[^\r\n]*resuming from the checkpoint[^\r\n]*", text):
                    print(f"    [{name}] {resumed.strip()}", flush=True)  # the log says from which step
                line = last_progress_line(text)
                if line and now - self.last_echo >= echo_every:
                    self.last_echo = now
                    elapsed = now - self.started
                    print(f"    [{name}] cell {cell_index + 1}/{len(self.nb.cells)}, {elapsed / 60:.1f} min in: "
                          f"{line[:150]}", flush=True)
            return super().output(outs, msg, display_id, cell_index)

    client = WatchedClient(nb, **kwargs)
    client.started = client.last_output = time.monotonic()
    client.last_echo, client.stalled_in = 0.0, None

    def cell_started(cell, cell_index):
        client.last_output, client.cell_index = time.monotonic(), cell_index

    client.on_cell_start = cell_started

    def watch(stop: threading.Event) -> None:
        interrupted = False
        while not stop.wait(1.0):
            silent = time.monotonic() - client.last_output
            process = getattr(getattr(client.km, "provisioner", None), "process", None)
            if silent > stall and process is not None:
                if not interrupted:  # KeyboardInterrupt in the cell, as Jupyter's stop button
                    client.stalled_in, interrupted = silent, True
                    process.send_signal(signal.SIGINT)
                elif silent > stall + 60:
                    process.kill()
                    return
            elif silent <= stall:
                interrupted = False

    return client, watch


def check_device(device: str) -> str:
    """`device` if it names a device the chapters' DEVICE parameter takes (auto, cpu, mps, cuda,
    cuda:N); else ValueError saying what was expected."""
    if not isinstance(device, str) or not DEVICE_NAME.match(device):
        raise ValueError(f"device must be auto, cpu, mps, cuda or cuda:N, got {device!r}")
    return device


def parameterized(src: Path, profile: str, device: str | None = None):
    """The notebook at `src` with `PROFILE = profile` (and `DEVICE = device` unless None) injected
    after its `parameters` cell, as papermill does; other parameters keep the notebook's values."""
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    parameters: dict[str, str] = {"PROFILE": profile}
    if device is not None:
        parameters["DEVICE"] = check_device(device)
    return parameterize_notebook(load_notebook_node(str(src)), parameters, kernel_name=KERNEL, language="python")


def run_notebook(src: Path, dst: Path, profile: str, results_dir: Path, timeout: int | None = None,
                 stall: float | None = None, echo_every: float = 30.0, device: str | None = None) -> float:
    """Execute `src` into `dst` with `PROFILE=profile` (and `DEVICE=device` unless None); return
    the wall time in seconds.

    A cell is stopped when it prints nothing for `stall` seconds (default: `DEFAULT_STALL`);
    `timeout`, if given, also bounds each cell's run time. Raises `NotebookFailed` with the
    notebook name, cell and exception; the partially executed notebook is written to `dst`.
    """
    import nbformat
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    if profile not in DEFAULT_STALL:
        raise ValueError(f"profile must be one of {sorted(DEFAULT_STALL)}, got {profile!r}")
    src = Path(src).resolve()
    if not src.is_file():
        raise FileNotFoundError(f"notebook not found: {src}")
    stall = DEFAULT_STALL[profile] if stall is None else stall
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    nb = parameterized(src, profile, device)
    client, watch = _watched_client(
        nb, src.stem, stall, echo_every, kernel_name=KERNEL, timeout=timeout, coalesce_streams=True,
        resources={"metadata": {"path": str(REPO / "chapters")}},
        extra_arguments=["--IPKernelApp.log_level=ERROR",  # not the TCP-encryption warning
                         f"--IPKernelApp.exec_files={KERNEL_SETUP}"])
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,), daemon=True)
    start = time.perf_counter()
    try:
        with _kernel_env(results_dir):
            watcher.start()
            client.execute()
    except CellExecutionError as e:
        cell = nb.cells[getattr(client, "cell_index", 0)]
        first = cell.source.strip().splitlines()[:1]
        if client.stalled_in is not None:
            raise NotebookFailed(f"{src.name}: {_where(src, cell.source)} printed nothing for {stall:.0f} s "
                                 "(--stall) and was interrupted" + _first_line(first)) from None
        raise NotebookFailed(f"{src.name}: {_where(src, cell.source)} (In [{cell.get('execution_count')}]) raised "
                             f"{e.ename}: {e.evalue}" + _first_line(first)) from None
    except CellTimeoutError:
        cell = nb.cells[getattr(client, "cell_index", 0)]
        raise NotebookFailed(f"{src.name}: {_where(src, cell.source)} ran past its {timeout} s limit (--timeout)"
                             + _first_line(cell.source.strip().splitlines()[:1])) from None
    except DeadKernelError as e:
        why = f"printed nothing for {stall:.0f} s and ignored the interrupt" if client.stalled_in else "out of memory?"
        raise NotebookFailed(f"{src.name}: the kernel died ({e}); {why}") from None
    finally:
        stop.set()
        drop_blank_streams(nb)
        nbformat.write(nb, dst)  # what executed, even after a failure
    return time.perf_counter() - start


def drop_blank_streams(nb) -> None:
    """Remove the stream outputs whose text is only whitespace: what a transient progress bar
    leaves behind when it clears its line. Rendered, each is an empty output box."""
    for cell in nb.cells:
        if cell.get("cell_type") == "code":
            cell["outputs"] = [out for out in cell.get("outputs", [])
                               if out.get("output_type") != "stream" or "".join(out.get("text", "")).strip()]


def _first_line(first: list[str]) -> str:
    return f"\n    first line of the cell: {first[0]}" if first else ""


def _select(only: list[str] | None) -> list[Path]:
    """The toc's notebooks (relative paths), restricted to `only` (names, with or without .ipynb)."""
    notebooks = toc_notebooks(REPO)
    notebooks = notebooks[1:] + notebooks[:1]  # the root (the preface) runs last: its scoreboard reads every box
    if not only:
        return notebooks
    wanted = {Path(n).name.removesuffix(".ipynb") for n in only}
    unknown = wanted - {nb.stem for nb in notebooks}
    if unknown:
        names = ", ".join(nb.stem for nb in notebooks)
        raise SystemExit(f"--only: not in _toc.yml: {', '.join(sorted(unknown))} (expected one of: {names})")
    return [nb for nb in notebooks if nb.stem in wanted]


def read_status(out: Path) -> dict[str, dict]:
    """OUT/status.json: {notebook stem: {"status": "ok" | "failed", "seconds", "error", "rerun"}}."""
    path = Path(out) / STATUS
    return json.loads(path.read_text()) if path.exists() else {}


def _write_status(out: Path, status: dict[str, dict]) -> None:
    path = Path(out) / STATUS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status, indent=1) + "\n")
    os.replace(tmp, path)


def _fmt(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.1f} s"


def _device_arg(text: str) -> str:
    try:
        return check_device(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def main(argv: list[str] | None = None) -> int:
    """CLI: execute the selected notebooks, print a wall-time table, exit 1 if any failed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=sorted(DEFAULT_STALL), default="full")
    ap.add_argument("--out", type=Path, required=True, help="executed notebooks go to OUT/chapters/")
    ap.add_argument("--results", type=Path, default=REPO / "_build" / "results",
                    help="DSPARK_RESULTS for the kernel")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks")
    ap.add_argument("--stall", type=float, help="seconds a cell may print nothing (default 900 full, 300 smoke)")
    ap.add_argument("--timeout", type=int, help="seconds a cell may run at all (default: no limit)")
    ap.add_argument("--device", type=_device_arg,
                    help="inject DEVICE (auto, cpu, cuda, cuda:N) beside PROFILE (default: the notebook's own DEVICE)")
    args = ap.parse_args(argv)
    selected = _select(args.only)
    status = read_status(args.out) if args.only else {}
    if not args.only:  # a whole build: no stale chapter from an earlier one
        (args.out / STATUS).unlink(missing_ok=True)
    for rel in selected:
        (args.out / "chapters" / rel.name).unlink(missing_ok=True)
        status[rel.stem] = {"status": "not run",
                            "rerun": f"python ci/run_notebooks.py --profile {args.profile} --out {args.out} "
                                     + (f"--device {args.device} " if args.device else "") + f"--only {rel.stem}"}
    _write_status(args.out, status)

    build_start = time.perf_counter()
    for i, rel in enumerate(selected):
        print(f"--- [{i + 1}/{len(selected)}] {rel.stem} ({args.profile}), "
              f"{_fmt(time.perf_counter() - build_start)} into the build", flush=True)
        start = time.perf_counter()
        try:
            seconds = run_notebook(REPO / rel, args.out / "chapters" / rel.name, args.profile, args.results,
                                   args.timeout, args.stall, device=args.device)
            status[rel.stem].update(status="ok", seconds=seconds)
            print(f"    ok in {_fmt(seconds)}", flush=True)
        except NotebookFailed as e:
            status[rel.stem].update(status="failed", seconds=time.perf_counter() - start, error=str(e))
            print(f"    FAILED after {_fmt(time.perf_counter() - start)}: {e}", flush=True)
        _write_status(args.out, status)

    print("\nnotebook                          wall time")
    for rel in selected:
        entry = status[rel.stem]
        print(f"  {rel.stem:<32}{_fmt(entry['seconds']):>10}" + ("" if entry["status"] == "ok" else "  FAILED"))
    print(f"  {'total':<32}{_fmt(time.perf_counter() - build_start):>10}")
    failures = [rel.stem for rel in selected if status[rel.stem]["status"] != "ok"]
    if failures:
        print(f"\n{len(failures)} notebook(s) failed (partial outputs in {args.out / 'chapters'}):", file=sys.stderr)
        for name in failures:
            print(f"  {status[name]['error']}\n    rerun: {status[name]['rerun']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
