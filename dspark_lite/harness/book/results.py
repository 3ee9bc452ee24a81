"""The book's results on the page (chapter 00 and every chapter after it): what a run measured, said
as the cell's Markdown output (`say`), values as words (`plain`), titled tables, the verdict box
and the results page's headline rows. The files themselves are `result_files`'; chapter 07's GPU
runs are read by `harness.gpu.runs`, and every chapter's Colab cell is written by ci/colab_cells.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..result_files import HEADLINES, lookup, save_result
from . import verdicts
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


# The verdict box's colours (background, text), one per outcome, in the notebook's HTML and the book alike.
OUTCOME_COLOURS = {
    verdicts.REPRODUCED: ("#d4edda", "#155724"),
    verdicts.CONTRADICTED: ("#f8d7da", "#721c24"),
    verdicts.INSIDE_NOISE: ("#fff3cd", "#6b4f00"),
    verdicts.NOT_TESTABLE: ("#e9ecef", "#383d41"),
}
VERDICTS_FILE = "verdicts_{chapter}"  # the result file a chapter's verdict box writes (the preface's scoreboard)


def _outcome_style(value: str) -> str:
    background, colour = OUTCOME_COLOURS.get(value, ("", ""))
    return f"background-color: {background}; color: {colour}; font-weight: 600" if background else ""


def run_shows(rows: list[tuple[str, str, str, str | None]], chapter: str, profile: str) -> "Any":
    """The box that ends a chapter or a study: what the paper claims, what this run measured, and
    the outcome (`verdicts.outcome`, `outcome_in_every` or `exact`: reproduced, contradicted, inside
    the noise; None for a claim this machine cannot test), as a table with each outcome coloured.
    The rows are also written to the results folder (`verdicts_<chapter>.json`, `chapter` being the
    notebook's stem), where the preface's scoreboard reads every box."""
    import pandas as pd

    if not isinstance(chapter, str) or not chapter.replace("_", "").isalnum():
        raise ValueError(f"chapter must be the notebook's stem (letters, digits, underscores), got {chapter!r}")
    table = []
    for row in rows:
        if len(row) != 4 or not (row[3] is None or row[3] in verdicts.OUTCOMES):
            raise ValueError(f"each row is (claim, paper, this run, outcome), the outcome one of "
                             f"{verdicts.OUTCOMES[:3]} (from verdicts.outcome, outcome_in_every or exact) or None "
                             f"for not testable here; got {row!r}")
        claim, paper, measured, found = row
        table.append((str(claim), str(paper), str(measured), found or verdicts.NOT_TESTABLE))
    save_result(VERDICTS_FILE.format(chapter=chapter),
                {"chapter": chapter, "claims": [dict(zip(("claim", "paper", "this run", "outcome"), r)) for r in table]},
                profile)
    frame = pd.DataFrame(table, columns=["claim", "paper", "this run", "verdict"])
    return (frame.style.hide(axis="index").set_caption("What this run shows")
            .map(_outcome_style, subset=["verdict"]))


def book_titles(folder: str | Path = ".") -> dict[str, str]:
    """{notebook stem: its title} for the book's notebooks in `folder` (chapters/), in reading order:
    the main path (00-89), then the studies (s...), then the reference pages (90-99). The title is the
    first cell's heading, without the '#'."""
    import json

    def order(path: Path) -> tuple[int, str]:
        stem = path.stem
        return (1 if stem.startswith("s") else 2 if stem[:2] >= "90" else 0, stem)

    titles = {}
    for path in sorted(Path(folder).glob("*.ipynb"), key=order):
        cells = json.loads(path.read_text(encoding="utf-8")).get("cells") or [{}]
        first = "".join(cells[0].get("source", "")).lstrip()
        titles[path.stem] = first.splitlines()[0].lstrip("# ").strip() if first.startswith("#") else path.stem
    return titles


def scoreboard(found: dict[str, dict[str, Any]], titles: Mapping[str, str]) -> "Any":
    """Every verdict box's claims among the result files `found` (`load_results()`), in the order of
    `titles` ({notebook stem: its title}, reading order): a frame with the chapter or study, the
    claim, the paper's and this run's values and the outcome. Boxes of notebooks not in `titles` are
    left out; a notebook whose box is missing has no rows."""
    import pandas as pd

    rows = []
    for stem, title in titles.items():
        record = found.get(VERDICTS_FILE.format(chapter=stem))
        for claim in (record["results"]["claims"] if record else []):
            rows.append({"where": title, **claim})
    return pd.DataFrame(rows, columns=["where", "claim", "paper", "this run", "outcome"])


def outcome_counts(board: "Any") -> dict[str, int]:
    """{outcome: how many claims}, every outcome listed (zero included), in `verdicts.OUTCOMES` order."""
    return {name: int((board["outcome"] == name).sum()) for name in verdicts.OUTCOMES}


def coloured(frame: "Any", title: str, column: str = "outcome") -> "Any":
    """A titled table whose `column` of outcomes is coloured as the verdict box colours them."""
    return titled(frame.reset_index(drop=True), title).hide(axis="index").map(_outcome_style, subset=[column])


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
