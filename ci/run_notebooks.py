"""Execute the book's notebooks with papermill, in `_toc.yml` order.

    python ci/run_notebooks.py --profile full --out _build/executed --results _build/results
    python ci/run_notebooks.py --profile smoke --out /tmp/x --only 01_toy_world

Each notebook gets `PROFILE` injected (DEVICE and SEED keep the notebook's defaults) and runs in a
`python3` kernel whose working directory is the repository's `chapters/`, with the hub offline
and `DSPARK_RESULTS` pointing at `--results`. A failing notebook is reported (cell, exception) and
the run goes on with the others (QuantEcon's keep-going); the exit status is non-zero at the end.
The partially executed notebook is kept in `--out` for inspection.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, toc_notebooks

KERNEL = "python3"
DEFAULT_TIMEOUT = {"full": 1800, "smoke": 300}
KERNEL_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYDEVD_DISABLE_FILE_VALIDATION": "1",
}


class NotebookFailed(RuntimeError):
    """A notebook raised, or ran past its time limit; the message says where and what."""


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


def run_notebook(src: Path, dst: Path, profile: str, results_dir: Path, timeout: int) -> float:
    """Execute `src` into `dst` with `PROFILE=profile`; return the wall time in seconds.

    `timeout` bounds the whole notebook (each cell gets what is left). Raises `NotebookFailed`
    with the notebook name, cell number and exception when a cell raises or time runs out.
    """
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if profile not in DEFAULT_TIMEOUT:
        raise ValueError(f"profile must be one of {sorted(DEFAULT_TIMEOUT)}, got {profile!r}")
    src = Path(src).resolve()
    if not src.is_file():
        raise FileNotFoundError(f"notebook not found: {src}")
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    try:
        with _kernel_env(results_dir):
            pm.execute_notebook(
                str(src),
                str(dst),
                parameters={"PROFILE": profile},
                kernel_name=KERNEL,
                language="python",
                cwd=str(REPO / "chapters"),
                progress_bar=False,
                extra_arguments=["--IPKernelApp.log_level=ERROR"],  # not the TCP-encryption warning
                # per-cell limit = what is left of the notebook's budget
                timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
            )
    except pm.PapermillExecutionError as e:
        first = (e.source or "").strip().splitlines()[:1]
        raise NotebookFailed(
            f"{src.name}: {_where(src, e.source)} (In [{e.exec_count}]) raised {e.ename}: {e.evalue}"
            + (f"\n    first line of the cell: {first[0]}" if first else "")
        ) from None
    except CellTimeoutError as e:  # its message ends with a preview of the cell
        parts = str(e).split("-------------------")
        preview = parts[1].strip().splitlines()[:1] if len(parts) >= 3 else []
        raise NotebookFailed(f"{src.name}: ran past its {timeout} s limit (--timeout)"
                             + (f" in the cell starting: {preview[0]}" if preview else "")) from None
    except DeadKernelError as e:
        raise NotebookFailed(f"{src.name}: the kernel died ({e}); out of memory?") from None
    return time.perf_counter() - start


def _select(only: list[str] | None) -> list[Path]:
    """The toc's notebooks (relative paths), restricted to `only` (names, with or without .ipynb)."""
    notebooks = toc_notebooks(REPO)
    if not only:
        return notebooks
    wanted = {Path(n).name.removesuffix(".ipynb") for n in only}
    unknown = wanted - {nb.stem for nb in notebooks}
    if unknown:
        names = ", ".join(nb.stem for nb in notebooks)
        raise SystemExit(f"--only: not in _toc.yml: {', '.join(sorted(unknown))} (expected one of: {names})")
    return [nb for nb in notebooks if nb.stem in wanted]


def main(argv: list[str] | None = None) -> int:
    """CLI: execute the selected notebooks, print a wall-time table, exit 1 if any failed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=sorted(DEFAULT_TIMEOUT), default="full")
    ap.add_argument("--out", type=Path, required=True, help="executed notebooks go to OUT/chapters/")
    ap.add_argument("--results", type=Path, default=REPO / "_build" / "results",
                    help="DSPARK_RESULTS for the kernel")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these notebooks")
    ap.add_argument("--timeout", type=int, help="seconds per notebook (default 1800 full, 300 smoke)")
    args = ap.parse_args(argv)
    timeout = args.timeout or DEFAULT_TIMEOUT[args.profile]

    times: dict[str, float | None] = {}
    failures: list[str] = []
    for rel in _select(args.only):
        print(f"--- {rel.stem} ({args.profile})", flush=True)
        start = time.perf_counter()
        try:
            times[rel.stem] = run_notebook(REPO / rel, args.out / "chapters" / rel.name,
                                           args.profile, args.results, timeout)
            print(f"    ok in {times[rel.stem]:.1f} s", flush=True)
        except NotebookFailed as e:
            times[rel.stem] = None
            failures.append(str(e))
            print(f"    FAILED after {time.perf_counter() - start:.1f} s: {e}", flush=True)

    print("\nnotebook                          wall time")
    for name, t in times.items():
        print(f"  {name:<32}{'FAILED' if t is None else f'{t:8.1f} s'}")
    print(f"  {'total':<32}{sum(t or 0 for t in times.values()):8.1f} s")
    if failures:
        print(f"\n{len(failures)} notebook(s) failed (partial outputs in {args.out / 'chapters'}):",
              file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
