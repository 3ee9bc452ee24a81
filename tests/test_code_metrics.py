"""ci/code_metrics.py's chapter counts: which of the package's names a notebook uses, by layer."""
from __future__ import annotations

from pathlib import Path

from ci.code_metrics import names_used

PACKAGE = Path(__file__).resolve().parents[1] / "dspark_lite"


def test_names_are_counted_across_cells_by_layer() -> None:
    cells = [
        "from dspark_lite import scheduler\nfrom dspark_lite.harness.book import results\n"
        "from dspark_lite.stepcurve import StepCurve\nimport numpy as np",
        "%matplotlib inline\nl = scheduler.schedule(c, StepCurve.analytic(8, 4))\nresults.say(f'{l}')\n"
        "results.say('again')\nnp.zeros(3)",
        "this is not python (",
    ]
    used = names_used(cells, PACKAGE)
    assert used == {"method": {"scheduler.schedule", "stepcurve.StepCurve"}, "harness": {"harness.book.results.say"}}
