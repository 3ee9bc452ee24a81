"""Every table a chapter shows has a title: `results.titled` (chapter 00 and every chapter after it)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

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
