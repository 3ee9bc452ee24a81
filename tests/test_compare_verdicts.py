"""ci/compare_verdicts.py reads each chapter's box "What this run shows" from executed notebooks
and sets two builds' verdicts side by side."""
from __future__ import annotations

import json
from pathlib import Path

from ci import compare_verdicts
from dspark_lite.harness.book.results import run_shows
from dspark_lite.harness.book.verdicts import INSIDE_NOISE, REPRODUCED


def _executed(folder: Path, rows: list[tuple[str, str, str, str | None]]) -> Path:
    folder.mkdir()
    page = run_shows(rows, chapter="04_markov_head", profile="smoke").to_html()
    cell = {"cell_type": "code", "id": "x", "metadata": {}, "source": "", "execution_count": 1,
            "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"text/html": page}}]}
    (folder / "04_markov_head.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                             "nbformat_minor": 5}))
    return folder


def test_two_builds_verdicts_side_by_side(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    a = _executed(tmp_path / "a", [("DSpark above DFlash", "+16%", "+27% [+23, +31]", REPRODUCED),
                                   ("DSpark above EAGLE", "+31%", "+3% [-2, +8]", INSIDE_NOISE),
                                   ("head is cheap", "1%", "6% (CPU)", None)])
    b = _executed(tmp_path / "b", [("DSpark above DFlash", "+16%", "+29% [+25, +33]", REPRODUCED),
                                   ("DSpark above EAGLE", "+31%", "+7% [+4, +11]", REPRODUCED),
                                   ("head is cheap", "1%", "5% (CPU)", None)])
    assert compare_verdicts.boxes(a)["04_markov_head"][1] == ("DSpark above EAGLE", "+3% [-2, +8]", "inside the noise")
    assert compare_verdicts.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "- DSpark above DFlash: reproduced in both" in out
    assert "- DSpark above EAGLE: inside the noise | reproduced" in out and "second: +7% [+4, +11]" in out
    assert out.rstrip().endswith("2 verdicts the same, 1 different")
