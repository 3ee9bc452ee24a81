"""Chapter 05's live threshold controls (`interactive.ThresholdExplorer`): moving a control
recomputes the figure's numbers from the recorded rounds, and they are what a direct call of
`interactive.threshold_state` gives, which is also what the precomputed figure holds at a point of
its grid. One test moves the controls in this process; one in a real IPython kernel, as a reader's
JupyterLab or Colab session would."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ipywidgets")

from dspark_lite import calibration
from dspark_lite.harness.book import interactive
from dspark_lite.record import Rounds
from synthetic import synthetic_rollouts

REPO = Path(__file__).resolve().parents[1]


def recorded(blocks: int = 300, gamma: int = 5, seed: int = 2) -> Rounds:
    """Synthetic full blocks (over-confident logits of a known model) in three domains."""
    logits, accepted = synthetic_rollouts(blocks, gamma, seed=seed)[:2]
    domains = np.array(["math", "code", "chat"])[np.arange(blocks) % 3]
    return Rounds.of(np.full(blocks, gamma), accepted, logits, domain=domains)


def confidences(rounds: Rounds) -> dict:
    """The raw head and STS fitted on the first half of the blocks, as the chapter names them."""
    half = len(rounds) // 2
    return {"raw": None, "STS": calibration.SequentialTemperatureScaling().fit(rounds.logits[:half],
                                                                               rounds.accepted[:half])}


def test_each_move_recomputes_what_a_direct_call_gives():
    rounds = recorded()
    named = confidences(rounds)
    explorer = interactive.ThresholdExplorer(rounds, named, threshold=0.0)
    for control, value in ((explorer.threshold, 0.6), (explorer.calibration, "STS"), (explorer.gamma, 2)):
        shown = explorer.state.copy()
        control.value = value
        direct = interactive.threshold_state(rounds, explorer.threshold.value, named[explorer.calibration.value],
                                             explorer.gamma.value)
        pd.testing.assert_frame_equal(explorer.state, direct)
        assert not np.allclose(explorer.state["tau"], shown["tau"]), f"moving {control.description} changed nothing"
        assert f"{direct['tau'].iloc[0]:.2f}" in explorer.view.value  # what the reader sees is the new state
        assert explorer.seconds < 0.5  # a move answers well under a second
    states = interactive.threshold_states(rounds, [0.0, 0.6], named, [2, 5])  # the precomputed figure's grid
    point = states[(states["calibration"] == "STS") & (states["gamma"] == 2) & (states["threshold"] == 0.6)]
    pd.testing.assert_frame_equal(point.drop(columns=["calibration", "gamma"]).reset_index(drop=True), explorer.state)


def test_threshold_state_refuses_a_gamma_the_record_does_not_hold():
    with pytest.raises(ValueError, match="gamma must be between 1 and"):
        interactive.threshold_state(recorded(gamma=3), 0.5, None, gamma=4)


def test_the_figure_binds_confidences_and_gamma_when_its_states_hold_several():
    rounds = recorded()
    states = interactive.threshold_states(rounds, [0.0, 0.3, 0.6], confidences(rounds), [1, 3, 5])
    bound = {p["name"]: p for p in interactive.threshold_chart(states, domain="chat").to_dict()["params"]}
    assert bound["calibration"]["bind"]["options"] == ["raw", "STS"] and bound["calibration"]["value"] == "raw"
    assert (bound["gamma"]["bind"]["min"], bound["gamma"]["bind"]["max"], bound["gamma"]["bind"]["step"]) == (1, 5, 2)


def test_no_live_controls_outside_a_kernel(monkeypatch):
    monkeypatch.delenv("DSPARK_LIVE_WIDGETS", raising=False)
    assert not interactive.live_kernel()  # pytest is no IPython kernel
    assert interactive.show_threshold_explorer(recorded(), {"raw": None}) is None


def test_a_kernel_shows_the_controls_and_recomputes_on_a_move(tmp_path, monkeypatch):
    """In a real IPython kernel (nbclient, the notebook runner's client): the live controls are
    displayed as a widget, and setting the slider's value recomputes the state a direct call gives."""
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    setup = ("import sys; sys.path[:0] = [{tests!r}, {repo!r}]\n"
             "import numpy as np, pandas as pd\n"
             "from test_live_widgets_ch05 import recorded, confidences\n"
             "from dspark_lite.harness.book import interactive\n"
             "rounds = recorded(); named = confidences(rounds)\n"
             "explorer = interactive.show_threshold_explorer(rounds, named, threshold=0.1)\n"
             "assert explorer is not None, 'a kernel must get the live controls'").format(
        tests=str(REPO / "tests"), repo=str(REPO))
    move = ("before = explorer.state.copy()\n"
            "explorer.threshold.value = 0.7\n"
            "direct = interactive.threshold_state(rounds, 0.7, None, explorer.gamma.value)\n"
            "pd.testing.assert_frame_equal(explorer.state, direct)\n"
            "assert not np.allclose(before['tau'], explorer.state['tau'])\n"
            "print('moved', round(explorer.seconds, 4))")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(move)])
    monkeypatch.delenv("DSPARK_LIVE_WIDGETS", raising=False)  # the kernel guesses, as a reader's does
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = [o for o in notebook.cells[0].outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert shown, "the controls were not displayed as a widget"
    assert "moved" in "".join(o.get("text", "") for o in notebook.cells[1].outputs)
