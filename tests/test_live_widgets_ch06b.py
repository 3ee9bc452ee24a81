"""Chapter 06b's live load controls (dspark_lite.harness.book.live_load): moving a control recomputes
Algorithm 1's choice through the one function behind the precomputed figure too (`load_state`), so
what a reader sees in a kernel is a direct call's result and the book's figure at its grid points.
Synthetic confidences (tests/synthetic.py), tiny sizes."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
import pytest

from dspark_lite.harness.book import interactive, live_load
from dspark_lite.record import sigmoid
from dspark_lite.stepcurve import StepCurve
from synthetic import synthetic_rollouts

CONC, MAX_B, SEED = [2, 8, 32], 192, 5


def confidences() -> np.ndarray:
    return sigmoid(synthetic_rollouts(200, 5, seed=2)[0])


def direct(R: int, curve: StepCurve) -> pd.DataFrame:
    """What the controls must show at R and `curve`: a direct call on the figure's blocks for R."""
    return pd.DataFrame(live_load.load_state(live_load.draw_blocks(confidences(), CONC, SEED)[R], curve))


def test_the_precomputed_figure_is_load_state_over_its_grid():
    c = confidences()
    grid = live_load.load_states(c, CONC, [4, 24], [1.0, 2.0], MAX_B, seed=SEED)
    pd.testing.assert_frame_equal(grid, interactive.load_states(c, CONC, [4, 24], [1.0, 2.0], MAX_B, seed=SEED))
    point = grid[(grid["R"] == 8) & (grid["knee"] == 24) & (grid["slope"] == 2.0)].drop(columns=["R", "knee", "slope"])
    pd.testing.assert_frame_equal(point.reset_index(drop=True), direct(8, StepCurve.analytic(MAX_B, 24, slope=2.0)))


def test_moving_a_control_recomputes_through_algorithm_1():
    measured = {R: StepCurve.analytic(R * 6, max(1, R // 2), base_sps=50.0, slope=1.0) for R in CONC}  # one table per R
    explorer = live_load.LoadExplorer(confidences(), CONC, MAX_B, seed=SEED, tables={"measured": measured}, knee=96)
    before = explorer.state.copy()
    pd.testing.assert_frame_equal(before, direct(8, StepCurve.analytic(MAX_B, 96, slope=1.0)))

    explorer.R.value = 32  # more requests: the same curve now prices a larger batch
    explorer.knee.value = 8  # and the knee comes down: DSpark must send less
    after = explorer.state
    pd.testing.assert_frame_equal(after, direct(32, StepCurve.analytic(MAX_B, 8, slope=1.0)))
    assert not after.equals(before)
    dspark = after.set_index("scheduler").loc["dspark"]
    assert dspark["budget"] < before.set_index("scheduler").loc["dspark", "budget"]
    assert sum(dspark[f"l={l}"] for l in range(6)) == 32  # every request gets a length
    assert "R = 32, knee 8" in explorer.view.value

    explorer.table.value = "measured"  # one of the chapter's own tables: the one profiled for R
    pd.testing.assert_frame_equal(explorer.state, direct(32, measured[32]))
    assert explorer.knee.disabled and explorer.slope.disabled


def test_the_build_shows_no_live_controls(monkeypatch):
    monkeypatch.delenv("DSPARK_LIVE_WIDGETS", raising=False)
    assert not live_load.live_kernel()  # pytest is no kernel
    assert live_load.show_live(confidences(), CONC, MAX_B) is None
    with pytest.raises(ValueError, match=r"\[N, gamma\]"):
        live_load.draw_blocks(np.ones(4), CONC)


def test_a_move_in_a_running_kernel_equals_a_direct_call():
    """The same move in a real IPython kernel (jupyter_client): the controls show there, and the
    state after the move is a direct call's."""
    manager = pytest.importorskip("jupyter_client.manager")
    code = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        import numpy as np
        import pandas as pd
        from dspark_lite.harness.book import live_load
        from dspark_lite.record import sigmoid
        from dspark_lite.stepcurve import StepCurve
        from synthetic import synthetic_rollouts
        c = sigmoid(synthetic_rollouts(200, 5, seed=2)[0])
        explorer = live_load.show_live(c, {CONC}, {MAX_B}, seed={SEED}, knee=96)
        start = time.perf_counter()
        explorer.slope.value = 2.5
        seconds = time.perf_counter() - start
        blocks = live_load.draw_blocks(c, {CONC}, {SEED})[8]
        want = live_load.load_state(blocks, StepCurve.analytic({MAX_B}, 96, slope=2.5))
        print("RESULT", json.dumps({{"live": live_load.live_kernel(), "seconds": seconds,
                                    "same": bool(explorer.state.equals(pd.DataFrame(want)))}}))
    """)
    km, kc = manager.start_new_kernel(kernel_name="python3")
    try:
        lines = []
        kc.execute_interactive(code, timeout=120, output_hook=lambda msg: lines.append(msg["content"].get("text", "")
                                                                                    if msg["msg_type"] == "stream" else ""))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    found = [json.loads(line.split("RESULT", 1)[1]) for line in "".join(lines).splitlines() if line.startswith("RESULT")]
    assert found, "".join(lines)
    assert found[0]["live"] and found[0]["same"] and found[0]["seconds"] < 1.0
