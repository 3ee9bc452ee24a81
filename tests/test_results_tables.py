"""Every table a chapter shows has a title: `results.titled` (chapter 00 and every chapter after it)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from dspark_lite.harness.book import results


def cells(html: str) -> list[str]:
    """The text of every header and data cell of a rendered table, in order."""
    return re.findall(r"<t[hd][^>]*>([^<]*)</t[hd]>", html)


def frame() -> pd.DataFrame:
    return pd.DataFrame({"tau": [4.2166, 1.5], "rounds": [120, 80], "note": ["x", "y"]},
                        index=pd.Index(["math", "chat"], name="tokens per second"))


def test_the_caption_is_in_the_rendered_table() -> None:
    html = results.titled(frame(), "tau per domain at gamma 8, lean recipe (Figure 4)", 2).to_html()
    assert "<caption>tau per domain at gamma 8, lean recipe (Figure 4)</caption>" in html
    assert "tokens per second" in cells(html)  # the index name a reader saw before stays


def test_digits_show_floats_as_round_did_and_leave_integers_and_text() -> None:
    shown = cells(results.titled(frame(), "t", 2).to_html())
    assert "4.22" in shown and "1.50" in shown and "4.220000" not in shown and "4.2166" not in shown
    assert "120" in shown and "80" in shown and "x" in shown
    one = cells(results.titled(frame(), "t", 1).to_html())
    assert "4.2" in one and "1.5" in one


def test_without_digits_floats_read_as_python_prints_them() -> None:
    df = pd.DataFrame({"value": [5.0, 0.1, np.nan]}, index=pd.Index([0.0, 0.1 + 0.2, 0.9], name="threshold"))
    shown = cells(results.titled(df, "knobs").to_html())
    assert {"5.0", "0.1", "NaN", "0.3", "0.9"} <= set(shown)
    assert not any(text.endswith("00000") for text in shown)


def test_the_dataframe_is_not_modified() -> None:
    df = frame()
    before = df.copy()
    results.titled(df, "t", 2).to_html()
    results.titled(df, "t").to_html()
    pd.testing.assert_frame_equal(df, before)
    assert df.loc["math", "tau"] == 4.2166


# The verdict box and the preface's scoreboard (issue 64).
def test_the_verdict_box_colours_each_outcome_and_writes_its_rows(tmp_path, monkeypatch) -> None:
    from dspark_lite.harness.book import verdicts
    from dspark_lite.harness.result_files import load_results

    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path))
    rows = [("DSpark beats DFlash in every domain", "+16.3%", "math ... reproduced", verdicts.REPRODUCED),
            ("chat is hardest", "3.49", "code 2.1 < chat 2.4", verdicts.CONTRADICTED),
            ("the gain grows with gamma", "+10 points", "+2 [-3, +7]", verdicts.INSIDE_NOISE),
            ("the head is cheap", "1%", "CPU only", None)]
    html = results.run_shows(rows, chapter="04_markov_head", profile="smoke").to_html()
    for name in verdicts.OUTCOMES:
        assert name in html
        assert results.OUTCOME_COLOURS[name][0] in html  # each outcome's own colour
    saved = load_results(tmp_path)["verdicts_04_markov_head"]["results"]
    assert [c["outcome"] for c in saved["claims"]] == list(verdicts.OUTCOMES)
    with pytest.raises(ValueError, match="outcome"):
        results.run_shows([("old style", "x", "y", True)], chapter="04_markov_head", profile="smoke")
    with pytest.raises(ValueError, match="stem"):
        results.run_shows(rows, chapter="04 markov head", profile="smoke")


def test_the_scoreboard_gathers_every_box_in_reading_order(tmp_path, monkeypatch) -> None:
    import json

    from dspark_lite.harness.book import verdicts
    from dspark_lite.harness.result_files import load_results

    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    book = tmp_path / "chapters"
    book.mkdir()
    for stem, title in (("04_markov_head", "# 4. The Markov head"), ("s04a_depth", "# Study 4a. Depth"),
                        ("90_results", "# Results")):
        (book / f"{stem}.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": title}]}))
    assert results.book_titles(book) == {"04_markov_head": "4. The Markov head", "s04a_depth": "Study 4a. Depth",
                                         "90_results": "Results"}
    results.run_shows([("a", "p", "m", verdicts.INSIDE_NOISE)], chapter="s04a_depth", profile="smoke")
    results.run_shows([("b", "p", "m", verdicts.REPRODUCED), ("c", "p", "m", None)], chapter="04_markov_head",
                      profile="smoke")
    board = results.scoreboard(load_results(), results.book_titles(book))
    assert list(board["claim"]) == ["b", "c", "a"] and list(board["where"])[-1] == "Study 4a. Depth"
    assert results.outcome_counts(board) == {verdicts.REPRODUCED: 1, verdicts.CONTRADICTED: 0,
                                             verdicts.INSIDE_NOISE: 1, verdicts.NOT_TESTABLE: 1}
    assert "#fff3cd" in results.coloured(board, "t").to_html()


def test_smooth_is_a_running_mean_that_waits_for_its_window() -> None:
    from dspark_lite.harness.book import plots

    found = plots.smooth([1, 2, 3, 4], 2)
    assert np.isnan(found[0]) and list(found[1:]) == [1.5, 2.5, 3.5]
    with pytest.raises(ValueError, match="window"):
        plots.smooth([1, 2], 0)
