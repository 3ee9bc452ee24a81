"""The book's results on the page (chapter 00 and every chapter after it): what a run measured, said
as the cell's Markdown output (`say`), values as words (`plain`), titled tables, the verdict box
and the results page's headline rows. The files themselves are `result_files`'; chapter 07's GPU
runs are read by `harness.gpu.runs`, and every chapter's Colab cell is written by ci/colab_cells.py.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..result_files import HEADLINES, lookup
from .verdicts import word_list


def plain(value: Any, digits: int = 3) -> str:
    """A value as words for a printed sentence, not a Python repr: a mapping as
    "math 0.03, code 0.27 and chat 0.37", a list as "math, code and chat" ("none" when empty), a
    truth value as "yes" / "no", a float rounded to `digits` decimals."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.{digits}g}" if abs(value) >= 10 ** digits else f"{round(float(value), digits):g}"
    if isinstance(value, np.integer):
        return str(int(value))
    if isinstance(value, Mapping):
        nested = (Mapping, list, tuple, np.ndarray)
        parts = [f"{k} {'(' + plain(v, digits) + ')' if isinstance(v, nested) else plain(v, digits)}"
                 for k, v in value.items()]
    elif isinstance(value, (list, tuple, np.ndarray)):
        parts = [plain(v, digits) for v in value]
    else:
        return str(value)
    return word_list(parts) if parts else "none"


def say(*paragraphs: str) -> None:
    """What this run measured, said in words as the cell's Markdown output (CommonMark plus LaTeX),
    so the sentence sits beside its evidence in JupyterLab, Colab and the rendered book alike.
    Each argument is one paragraph; empty ones are left out."""
    from IPython.display import Markdown, display

    text = "\n\n".join(p.strip() for p in paragraphs if p and p.strip())
    if not text:
        raise ValueError("say() needs at least one non-empty paragraph")
    display(Markdown(text))


def run_shows(rows: list[tuple[str, str, str, bool | None]]) -> "Any":
    """The box that ends a chapter: what the paper claims, what this run measured, and whether it
    reproduced (True, False, or None for a claim this machine cannot test), as a table."""
    import pandas as pd

    verdict = {True: "reproduced", False: "not reproduced", None: "not testable here"}
    for row in rows:
        if len(row) != 4 or row[3] not in verdict:
            raise ValueError(f"each row is (claim, paper, this run, True/False/None), got {row!r}")
    frame = pd.DataFrame([(claim, paper, measured, verdict[ok]) for claim, paper, measured, ok in rows],
                         columns=["claim", "paper", "this run", "verdict"])
    return frame.style.hide(axis="index").set_caption("What this run shows")


def _float_text(value: Any) -> Any:
    """A float as Python prints it, to 6 significant digits (0.3, 5.0, 1e-07); anything else as is."""
    if isinstance(value, (float, np.floating)):
        return str(float(f"{float(value):.6g}"))
    return value


def titled(df: "Any", title: str, digits: int | None = None) -> "Any":
    """A table as the book shows it, with its title, in the book's table style: the
    Styler of `df` with `title` as its caption, floats shown with `digits` decimals (as
    `df.round(digits)` showed them; integers and text unchanged), or as Python prints them when
    `digits` is None; a missing value as "NaN". Index and column labels stay as the DataFrame
    showed them; `df` is not modified."""
    styler = df.style.set_caption(title).set_table_attributes('class="dataframe"')  # the page's table style
    styler = styler.format_index(_float_text, axis=0).format_index(_float_text, axis=1)
    if digits is None:
        return styler.format(_float_text, na_rep="NaN")
    return styler.format(precision=digits, na_rep="NaN")


def headline_rows(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per headline number: its measured value and provenance, or 'not yet measured'."""
    rows = []
    for chapter, name, path, label, paper in HEADLINES:
        record = found.get(name)
        value = lookup(record["results"], path) if record else None
        prov = record["provenance"] if record and value is not None else {}
        rows.append({
            "chapter": chapter, "measurement": label,
            "ours": "not yet measured" if value is None else (f"{value:.3g}" if isinstance(value, float) else value),
            "paper": paper, "profile": prov.get("profile", ""), "machine": prov.get("cpu", ""),
            "date": prov.get("date", ""),
        })
    return rows
