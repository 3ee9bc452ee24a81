"""The book repository's benchmark scripts (`scripts/`), run in a process of their own so that a
notebook kernel's state (its threads, what it imported and warmed) does not touch what they time;
chapter 06 times Algorithm 1 with `scripts/bench_scheduler.py`. The scripts live in the repository,
not in the installed package.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..result_files import REPO, results_dir

SCRIPTS = REPO / "scripts"


def run_bench_script(script: str, out_name: str, scripts: Path = SCRIPTS, **options: Any) -> dict[str, Any]:
    """Run `scripts/<script>` in its own process with `--<option> <value>` for each of `options`
    (in the order given; underscores become dashes) and `--out <results>/tables/<out_name>`; print
    what it printed and return the JSON it wrote there."""
    path = Path(scripts) / script
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {script} is a script of the book's repository, not of the "
                                "installed package; run the chapter from a clone of the repository")
    folder = results_dir() / "tables"  # benchmark JSON, next to the chapters' results
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / out_name
    args = [str(part) for name, value in options.items() for part in (f"--{name.replace('_', '-')}", value)]
    run = subprocess.run([sys.executable, str(path), *args, "--out", str(out)], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} exited with {run.returncode}: {run.stderr.strip()[-2000:]}")
    print(run.stdout.strip())
    return json.loads(out.read_text())
