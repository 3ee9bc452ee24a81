"""ci/compare_results.py reads two builds' results and says, per number, identical / inside the
seed spread / differs / timed, from the files `make book` writes."""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))

import compare_results  # noqa: E402


def write(folder: Path, tau_dflash_math: list[float], ece: float, gain: float) -> Path:
    folder.mkdir()
    per_seed = {"dflash": {"math": tau_dflash_math, "code": [4.0, 4.1, 4.2], "chat": [3.0, 3.1, 3.2]}}
    (folder / "table1_toy.json").write_text(json.dumps({"results": {"tau_per_seed": per_seed}}))
    (folder / "confidence.json").write_text(json.dumps({"results": {"calibration": {"raw": {"mean ECE of a_k": ece}}}}))
    (folder / "serving.json").write_text(json.dumps({"results": {"gain_over_mtp1": gain}}))
    return folder


def test_each_number_is_read_against_the_seed_spread(tmp_path: Path, capsys) -> None:
    a = write(tmp_path / "a", [4.0, 4.2, 4.4], 0.03, 120.0)
    b = write(tmp_path / "b", [4.1, 4.3, 4.5], 0.04, 150.0)  # math seed mean +0.1, inside A's spread 0.4
    said = {what: compare_results.verdict(x, y, spread, kind) for what, x, y, spread, kind in compare_results.rows(a, b)}
    assert said["04 tau dflash math (seed mean)"] == "inside"
    assert said["04 tau dflash code (seed mean)"] == "identical"
    assert said["05 raw: mean ECE of a_k"] == "differs"  # no seed spread measured for ECE: any change shows
    assert said["06b gain_over_mtp1 (%)"] == "timed"
    assert compare_results.verdict(4.0, 4.6, 0.4, "") == "differs"
    assert compare_results.main([str(a), str(b)]) == 0
    assert "1 inside" in capsys.readouterr().out


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    import pytest

    with pytest.raises(SystemExit):
        compare_results.main([str(tmp_path / "none"), str(tmp_path)])


def test_the_lean_drafters_are_read_against_their_own_seeds(tmp_path: Path) -> None:
    for name, taus in (("a", [3.0, 3.4, 3.2]), ("b", [3.3, 3.5, 3.4])):  # seed mean +0.2, inside A's range 0.4
        (tmp_path / name).mkdir()
        table = {"ablation_tau_per_seed": {"dflash@8x2": {"math": taus, "code": [4.0, 4.0, 4.0], "chat": taus[:1]}},
                 "depth_tau": {"DFlash, 2 layers": {"math": 9.9}}}  # the seed means: left out when seeds are kept
        (tmp_path / name / "table1_toy.json").write_text(json.dumps({"results": table}))
    said = {what: compare_results.verdict(x, y, spread, kind)
            for what, x, y, spread, kind in compare_results.rows(tmp_path / "a", tmp_path / "b")}
    assert said["04 Figures 3-4 tau dflash@8x2 math (seed mean)"] == "inside"
    assert said["04 Figures 3-4 tau dflash@8x2 code (seed mean)"] == "identical"
    assert said["04 Figures 3-4 tau dflash@8x2 chat (seed mean)"] == "differs"  # one seed: no spread
    assert not any("Figure 3 tau" in what for what in said)
