"""`run_bench_script` runs a repository script in its own process, passes its options and `--out`,
and returns the JSON it wrote; a missing script says where the scripts are."""
from __future__ import annotations

import pytest

from dspark_lite.harness.serving.bench_scripts import run_bench_script

ECHO = '''
import argparse, json
parser = argparse.ArgumentParser()
parser.add_argument("--calls", type=int)
parser.add_argument("--max-batch", type=int)
parser.add_argument("--out")
args = parser.parse_args()
open(args.out, "w").write(json.dumps({"calls": args.calls, "max_batch": args.max_batch}))
print("timed", args.calls, "calls")
'''


def test_the_script_runs_with_its_options_and_its_json_comes_back(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    (tmp_path / "echo.py").write_text(ECHO)
    out = run_bench_script("echo.py", "echo.json", scripts=tmp_path, calls=3, max_batch=16)
    assert out == {"calls": 3, "max_batch": 16}
    assert (tmp_path / "results" / "tables" / "echo.json").exists()
    assert capsys.readouterr().out.strip() == "timed 3 calls"


def test_a_failing_script_says_what_it_wrote_to_stderr(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    (tmp_path / "fails.py").write_text("import sys\nsys.exit('no such option')\n")
    with pytest.raises(RuntimeError, match="no such option"):
        run_bench_script("fails.py", "fails.json", scripts=tmp_path, calls=3)


def test_a_missing_script_says_to_run_from_a_clone(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="clone of the repository"):
        run_bench_script("bench_scheduler.py", "scheduler_speed.json", scripts=tmp_path, requests=4)
