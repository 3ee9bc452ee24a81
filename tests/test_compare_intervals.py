"""ci/compare_intervals.py finds every interval two builds wrote and says whether each holds the
other build's estimate, against the rates honest intervals would give."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ci"))

import compare_intervals  # noqa: E402


def write(folder: Path, chat_gain: list[float], macro: float) -> Path:
    folder.mkdir()
    crossover = {"map": [{"capacity_ratio": 0.238, "domain": "math", "gain_percent": [70.0, 60.0, 80.0]},
                         {"capacity_ratio": 0.238, "domain": "chat", "gain_percent": chat_gain}],
                 "seeds": [0, 1]}  # a list of three numbers that is not an interval: never read
    chapter03 = {"crossover": crossover, "dflash_minus_eagle_interval": {"math": [1.3, 1.1, 1.5]},
                 "tau_per_seed": {"dflash": {"math": [4.2, 4.1, 4.3]}}}
    table1 = {"macro_gain_over_dflash": macro, "macro_gain_over_dflash_interval": [macro - 4, macro + 4],
              "tau": {"dspark_markov": {"math": 4.5}, "dflash": {"math": 4.2}},
              "markov_minus_dflash_interval": {"math": [0.1, 0.5]}}
    (folder / "parallel_drafting.json").write_text(json.dumps({"results": chapter03}))
    (folder / "table1_toy.json").write_text(json.dumps({"results": table1}))
    return folder


def test_every_interval_is_found_with_its_estimate(tmp_path: Path) -> None:
    found = compare_intervals.intervals(write(tmp_path / "a", [13.5, 10.8, 16.3], 18.7))
    assert found == {
        "parallel_drafting/crossover/map/0.24:math/gain_percent": (70.0, 60.0, 80.0),
        "parallel_drafting/crossover/map/0.24:chat/gain_percent": (13.5, 10.8, 16.3),
        "parallel_drafting/dflash_minus_eagle_interval/math": (1.3, 1.1, 1.5),
        "table1_toy/macro_gain_over_dflash_interval": (18.7, 14.7, 22.7),
        "table1_toy/markov_minus_dflash_interval/math": (pytest.approx(0.3), 0.1, 0.5),  # Markov's tau - DFlash's
    }


def test_holds_and_disjoint_pairs_are_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = write(tmp_path / "a", [13.5, 10.8, 16.3], 18.7)
    b = write(tmp_path / "b", [-2.6, -7.9, 3.3], 12.8)  # chat: disjoint; macro: 12.8 outside A's, 18.7 outside B's
    assert compare_intervals.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "each holds the other's estimate in 6 of 10 cases" in out
    assert "disjoint pairs: 1 " in out
    assert out.count("DISJOINT") == 1


def test_the_honest_rates_are_the_normal_distributions() -> None:
    hold, disjoint = compare_intervals.honest_rates()
    z = stats.norm.ppf(0.975)
    # B - A has twice the variance of either: |B - A| < z * sd(A) holds; the intervals meet while |B - A| < 2 z sd(A)
    assert hold == pytest.approx(1 - 2 * stats.norm.sf(z / 2 ** 0.5))
    assert disjoint == pytest.approx(2 * stats.norm.sf(z * 2 ** 0.5))


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        compare_intervals.main([str(tmp_path / "none"), str(tmp_path)])


def test_an_interval_with_its_seeds_is_read_by_the_interval_rule(tmp_path) -> None:
    """Issue 65: a result file keeps each seed's estimate beside a seeded interval, and the script applies
    the rule from the file alone: the wider of the stored interval and the seeds' t interval."""
    import json

    from ci import compare_intervals

    (tmp_path / "table1_toy.json").write_text(json.dumps({"results": {
        "macro_gain_over_dflash": 10.0,
        "e2e_markov_over_dflash_percent": [10.0, 9.0, 11.0, [0.0, 10.0, 20.0]]}}))
    found = compare_intervals.intervals(tmp_path)["table1_toy/e2e_markov_over_dflash_percent"]
    half = 4.303 * 10.0 / 3 ** 0.5
    assert found[0] == 10.0 and abs(found[1] - (10.0 - half)) < 1e-2 and abs(found[2] - (10.0 + half)) < 1e-2
