"""ci/compare_verdicts.py reads each chapter's box "What this run shows" from executed notebooks
and sets two builds' verdicts side by side."""
from __future__ import annotations

import json
from pathlib import Path

from ci import compare_verdicts
from dspark_lite.harness.book.results import run_shows


def _executed(folder: Path, rows: list[tuple[str, str, str, bool | None]]) -> Path:
    folder.mkdir()
    page = run_shows(rows).to_html()
    cell = {"cell_type": "code", "id": "x", "metadata": {}, "source": "", "execution_count": 1,
            "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"text/html": page}}]}
    (folder / "04_markov_head.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                             "nbformat_minor": 5}))
    return folder


def test_two_builds_verdicts_side_by_side(tmp_path: Path, capsys) -> None:
    a = _executed(tmp_path / "a", [("DSpark above DFlash", "+16%", "+27% [+23, +31]", True),
                                   ("DSpark above EAGLE", "+31%", "+3% [-2, +8]", False),
                                   ("head is cheap", "1%", "6% (CPU)", None)])
    b = _executed(tmp_path / "b", [("DSpark above DFlash", "+16%", "+29% [+25, +33]", True),
                                   ("DSpark above EAGLE", "+31%", "+7% [+4, +11]", True),
                                   ("head is cheap", "1%", "5% (CPU)", None)])
    assert compare_verdicts.boxes(a)["04_markov_head"][1] == ("DSpark above EAGLE", "+3% [-2, +8]", "not reproduced")
    assert compare_verdicts.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "- DSpark above DFlash: reproduced in both" in out
    assert "- DSpark above EAGLE: not reproduced | reproduced" in out and "second: +7% [+4, +11]" in out
    assert out.rstrip().endswith("2 verdicts the same, 1 different")
