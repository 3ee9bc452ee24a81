"""Tests for dspark_lite.record: the one record of rounds (chapters 02-07) and its checks."""
from __future__ import annotations

import json

import numpy as np
import pytest

from dspark_lite import checks
from dspark_lite.record import Rounds, logit, sigmoid
from dspark_lite.scheduler import survival

NAN = np.nan


def example() -> Rounds:
    """Two domains; a short round (ended by an end token) and a round without a confidence head."""
    z = np.array([[2.0, 1.0, -0.5], [0.3, NAN, NAN], [NAN, NAN, NAN], [40.0, 0.0, -3.0]])
    return Rounds.of([3, 1, 3, 3], [2, 1, 0, 3], z, ended_in_draft=[False, True, False, False],
                     domain=["math", "math", "math", "chat"])


def test_full_blocks_keep_the_rounds_with_a_whole_block_of_confidences():
    full = example().full_blocks()
    assert len(full) == 2 and full.width == 3 and full.counts() == {"chat": 1, "math": 1}
    assert full.accepted.tolist() == [2, 3] and full.domain.tolist() == ["math", "chat"]
    np.testing.assert_allclose(full.confidences()[0], sigmoid([2.0, 1.0, -0.5]))
    with pytest.raises(ValueError, match="no round proposed a full block of gamma = 4"):
        example().full_blocks(4)


def test_a_saturated_logit_keeps_its_information():
    """A float32 sigmoid rounds z = 40 to exactly 1.0, whose logit is infinite; the record keeps 40."""
    import torch

    assert float(torch.sigmoid(torch.tensor(40.0))) == 1.0
    full = example().full_blocks()
    assert full.logits[1, 0] == 40.0 and full.confidences()[1, 0] == 1.0
    assert np.isfinite(logit(sigmoid(np.array([16.0, -16.0])))).all()


def test_columns_are_read_only_and_rows_select_like_numpy():
    r = example()
    with pytest.raises(ValueError):
        r.accepted[0] = 9
    assert r[r.domain == "chat"].accepted.tolist() == [3] and len(r[1:3]) == 2
    assert r.emitted.tolist() == [3, 1, 1, 4]  # the ended round emits its drafts only
    assert r.labelled("code").domains == ["code"]


def test_concat_pads_logits_and_round_trips_through_npz_and_json(tmp_path):
    wide, narrow = example(), Rounds.of([1], [0], [[0.5]], domain="code")
    both = Rounds.concat([narrow, wide])
    assert both.width == 3 and len(both) == 5 and np.isnan(both.logits[0, 1:]).all()
    np.savez(tmp_path / "r.npz", **both.to_arrays())
    with np.load(tmp_path / "r.npz") as arrays:
        again = Rounds.from_arrays(arrays)
    from_json = Rounds.from_json(json.loads(json.dumps(both.to_json())))
    for other in (again, from_json):
        for name in ("proposed", "accepted", "ended_in_draft", "domain"):
            assert getattr(other, name).tolist() == getattr(both, name).tolist(), name
        np.testing.assert_array_equal(other.logits, both.logits)
    assert len(Rounds.concat([])) == 0 and len(Rounds.from_json(Rounds.of([], []).to_json())) == 0


@pytest.mark.parametrize("kwargs, message", [
    (dict(proposed=[2], accepted=[3]), "accepted <= proposed"),
    (dict(proposed=[2, 2], accepted=[1]), "1-D of one length"),
    (dict(proposed=[2], accepted=[1], ended_in_draft=[True]), "ended_in_draft needs accepted == proposed"),
    (dict(proposed=[1], accepted=[1], logits=[[0.1, 0.2]]), "past a round's proposed drafts must be NaN"),
    (dict(proposed=[2], accepted=[1], logits=[[0.1]]), "logits must be shaped"),
    (dict(proposed=[2], accepted=[1], domain=["a", "b"]), "domain must be 1 strings"),
    (dict(proposed=[1.5], accepted=[1]), "integers"),
])
def test_bad_records_are_refused_with_clear_messages(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Rounds.of(**kwargs)


def test_confidences_are_probabilities_in_the_closed_unit_interval():
    assert checks.confidences([[0.0, 1.0]]).tolist() == [[0.0, 1.0]]  # one range everywhere: [0, 1]
    for bad, message in ((1.5, "must lie in \\[0, 1\\]; got 1.5 at row 0, position k=2"),
                         (NAN, "must be finite probabilities")):
        with pytest.raises(ValueError, match=message):
            checks.confidences([[0.5, bad]])
    with pytest.raises(ValueError, match="must not be NaN"):
        checks.logits([[0.5, NAN]])
    np.testing.assert_allclose(survival([0.5, 0.5, 1.0]), [0.5, 0.25, 0.25])
