"""The full-size dry run (issue 19): chapter 07's path at the real Qwen3-4B shapes, on this CPU, in bf16.

A random target of Qwen3-4B's shape (vocabulary 151,936, 36 layers), a random 1.39B DSpark
drafter (mask id 151,669, target layers 1, 9, 17, 25, 33) and a random one-layer Eagle3 chain
(issue 31: the same layers fused by fc), each written in DeepSpec's released layout and read back
by the loader, one prompt through the engine per drafter for a few rounds, and the results writer. It runs in its own process, so its peak resident memory is its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dspark_lite.harness.result_files import results_dir

REPO = Path(__file__).resolve().parent.parent
RAM_LIMIT_GIB = 20.0  # this machine has 24 GB; target 7.5 GiB + drafter 1.1 GiB + working memory must fit well under it


def test_full_size_dry_run_on_the_cpu(tmp_path: Path) -> None:
    code = ("import json, sys; from dspark_lite.harness.gpu import headless; "
            f"print('DRY-RUN ' + json.dumps(headless.full_size_dry_run({str(tmp_path)!r}, new_tokens=24)))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "DSPARK_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(done.stdout.split("DRY-RUN ", 1)[1].splitlines()[0])
    assert report["vocab_size"] == 151936 and report["target_layers"] == 36 and report["mask_token_id"] == 151669
    assert report["dtype"] == "bfloat16" and report["rope_dtype"] == {"dspark": "float32", "eagle3": "float32"}
    dspark, eagle3 = report["kinds"]["dspark"], report["kinds"]["eagle3"]
    assert dspark["target_layer_ids"] == eagle3["target_layer_ids"] == [1, 9, 17, 25, 33]
    assert dspark["drafter_class"] == "DSparkDrafter" and eagle3["drafter_class"] == "EagleDrafter"
    # own weights; the 0.78B embedding/LM-head copies are shared with the target
    assert 0.60 < dspark["drafter_parameters_b"] < 0.65
    assert 0.14 < eagle3["drafter_parameters_b"] < 0.16  # fc 2560 x 12800 and one layer of 2 x 2560 inputs
    for run in (dspark, eagle3):
        assert run["rounds"] >= 2 and 1 <= run["tau"] <= 8 and run["tokens"] >= 24
    saved = json.loads(Path(report["results_file"]).read_text())["results"]
    assert saved["environment"]["mode"] == "random-weights" and "table1" not in saved
    assert saved["engine_overheads"]["dspark"]["verify ms/round"] > 0
    assert saved["engine_overheads"]["eagle3"]["verify ms/round"] > 0
    assert report["peak_rss_gib"] < RAM_LIMIT_GIB, report
    note = results_dir() / "full_size_dry_run.json"  # the build's results folder (git-ignored), for the record
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(json.dumps(report, indent=1) + "\n")
    print(f"full-size dry run: {report['seconds']:.0f} s ({report['seconds_building']:.0f} s building and saving), "
          f"peak RSS {report['peak_rss_gib']:.1f} GiB; " + "; ".join(
              f"{kind}: {run['rounds']} rounds, tau {run['tau']:.2f}" for kind, run in report["kinds"].items()))
