"""The engine at both ends of the transformers range pyproject.toml declares (issue 19):
tests/engine_check.py (speculative greedy output with DSpark and model drafters equal to the
target's own greedy `generate`, target-only decoding cached and uncached, the KV cache
self-check) at the installed pin, and in a subprocess on DeepSpec's pin, transformers 5.10.2,
overlaid on this venv from .venv-tf510 (`make test` builds it from
tests/requirements-transformers-5.10.txt)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

ROOT = Path(__file__).resolve().parents[1]
OVERLAY = ROOT / ".venv-tf510"
OVERLAY_PINS = Path(__file__).with_name("requirements-transformers-5.10.txt")
PIN = "5.24.0"  # requirements.txt


def overlay_version() -> str | None:
    """The transformers version installed in the overlay, or None without one."""
    found = sorted(OVERLAY.glob("transformers-*.dist-info"))
    return found[0].name.removeprefix("transformers-").removesuffix(".dist-info") if found else None


def test_engine_at_the_pin():
    from engine_check import run_checks

    assert transformers.__version__ == PIN, "the book's environment pins this transformers (requirements.txt)"
    report = run_checks()
    assert report["cache_keyword"] == "cache"


def test_engine_at_deepspecs_transformers_pin():
    pinned = next(line.split("==")[1].strip() for line in OVERLAY_PINS.read_text().splitlines()
                  if line.startswith("transformers=="))
    if overlay_version() is None:
        pytest.skip(f"no transformers overlay at {OVERLAY}; build it with `make .venv-tf510/.installed` "
                    f"(pip install --no-deps --target .venv-tf510 -r {OVERLAY_PINS.relative_to(ROOT)})")
    assert overlay_version() == pinned, f"{OVERLAY} holds transformers {overlay_version()}; rebuild it for {pinned}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(OVERLAY), str(ROOT)]), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "engine_check.py")], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"engine_check failed on transformers {pinned}:\n{done.stdout}\n{done.stderr[-4000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["transformers"] == pinned and report["cache_keyword"] == "past_key_values"
