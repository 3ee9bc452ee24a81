"""One seaborn theme and palette for every figure in the book, and the check that a figure fits
the page (chapter 00).

The book's text column is about PAGE_WIDTH_PX wide; a wider image is scaled down to it, and its
text with it. `figure_report` measures a figure's width and smallest text, and `figure_problems`
names what is wrong when it is wider than MAX_WIDTH_IN or any text would render below MIN_FONT_PX.
The book build (ci/kernel_setup.py) measures every figure a chapter shows with `figure_report`
and stores the measurement in the PNG itself (text chunk PNG_KEY), where ci/check_notebooks.py
and ci/browser_check.py read it.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.text import Text

DOMAIN_COLORS = {"math": "#1b9e77", "code": "#7570b3", "chat": "#d95f02"}
PAGE_WIDTH_PX = 690  # the book's text column as Chromium shows it (BOOK_DESIGN.md: about 700 px)
MAX_WIDTH_IN = 7.0  # at dpi 100, the page's width
MIN_FONT_PX = 9.0  # the smallest legible text, as rendered on the page
PNG_KEY = "dspark-figure"  # the PNG text chunk that carries `figure_report`


ALTAIR_FONT_PX = 12  # the interactive figures' axis, legend and header text (Vega-Lite's default is 10-11)


def set_theme() -> None:
    """Apply the book's figure style: matplotlib's, and the interactive (Altair) figures' text sizes."""
    import altair as alt

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (7.0, 3.6)})
    text = {"labelFontSize": ALTAIR_FONT_PX, "titleFontSize": ALTAIR_FONT_PX}
    alt.theme.register("dspark", enable=True)(
        lambda: {"config": {"axis": text, "legend": text, "header": text, "title": {"fontSize": ALTAIR_FONT_PX + 1}}})


def _texts(artist: Artist) -> Iterator[Text]:
    """Every visible, non-empty text under `artist` (an invisible parent hides its children)."""
    if not artist.get_visible():
        return
    if isinstance(artist, Text) and artist.get_text().strip():
        yield artist
    for child in artist.get_children():
        yield from _texts(child)


def figure_report(fig: Figure, dpi: float | None = None) -> dict[str, Any]:
    """The figure's width (inches) and smallest text: its size in points, in pixels of an image
    saved at `dpi` (default: the figure's), and the text itself."""
    dpi = float(dpi or fig.dpi)
    texts = list(_texts(fig))
    smallest = min(texts, key=lambda t: t.get_fontsize(), default=None)
    points = float(smallest.get_fontsize()) if smallest is not None else None
    return {"width_in": round(float(fig.get_figwidth()), 3), "dpi": dpi,
            "min_font_pt": points, "min_font_image_px": None if points is None else round(points * dpi / 72, 2),
            "min_font_text": None if smallest is None else smallest.get_text().strip()[:40]}


def rendered_font_px(report: dict[str, Any], image_width_px: float, page_width_px: float = PAGE_WIDTH_PX) -> float | None:
    """The smallest text of a figure, in pixels, once its image (`image_width_px` wide) is shown in
    a column `page_width_px` wide (scaled down if wider, never up)."""
    if report.get("min_font_image_px") is None:
        return None
    return report["min_font_image_px"] * min(1.0, page_width_px / image_width_px)


def figure_problems(report: dict[str, Any], image_width_px: float | None = None) -> list[str]:
    """What is wrong with a measured figure (empty: it fits the page)."""
    width_px = image_width_px or report["width_in"] * report["dpi"]
    problems = []
    if report["width_in"] > MAX_WIDTH_IN:
        problems.append(f"the figure is {report['width_in']:g} in wide, wider than the page "
                        f"({MAX_WIDTH_IN:g} in at dpi 100): use more rows, or fewer or narrower panels")
    px = rendered_font_px(report, width_px)
    if px is not None and px < MIN_FONT_PX:
        problems.append(f"its smallest text ({report['min_font_text']!r}, {report['min_font_pt']:g} pt) renders at "
                        f"{px:.1f} px on the page (image {width_px:.0f} px wide, page {PAGE_WIDTH_PX} px); "
                        f"at least {MIN_FONT_PX:g} px is legible")
    return problems


def png_report(png: bytes) -> tuple[dict[str, Any] | None, int]:
    """The `figure_report` stored in a PNG by the book build (None if it has none) and the
    image's width in pixels."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        text = image.info.get(PNG_KEY)
        return (json.loads(text) if text else None), image.width


def smooth(values: Any, window: int) -> "Any":
    """The running mean of a training curve over `window` steps (NaN until the first window is full):
    how the book draws a noisy loss or acceptance curve."""
    import numpy as np
    import pandas as pd

    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    return pd.Series(np.asarray(values, dtype=float)).rolling(window).mean()
