"""Issue 44's refactor leaves behaviour unchanged: today's tree against the fixture that
tests/behaviour_pin.py wrote on the tree before it (same tokens, same loss curve, same
confidences, same scheduler choices)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from behaviour_pin import FIXTURE, KINDS, measure


@pytest.fixture(scope="module")
def pinned_and_now() -> tuple[dict, dict]:
    return json.loads(FIXTURE.read_text()), measure()


@pytest.mark.parametrize("kind", KINDS)
def test_every_drafter_trains_and_decodes_as_before(pinned_and_now, kind: str) -> None:
    pinned, now = (side["drafters"][kind] for side in pinned_and_now)
    np.testing.assert_allclose(now["loss"], pinned["loss"], rtol=1e-5)
    for name, tokens in pinned["tokens"].items():
        if name.endswith("confidences"):
            np.testing.assert_allclose(now["tokens"][name], tokens, atol=1e-5)
        else:
            assert now["tokens"][name] == tokens, name


def test_the_schedulers_choose_as_before(pinned_and_now) -> None:
    pinned, now = pinned_and_now
    assert now["schedule"] == pinned["schedule"]
    assert now["asynchronous_schedule"] == pinned["asynchronous_schedule"]


def test_the_pin_fails_on_a_changed_loss(pinned_and_now) -> None:
    pinned, now = pinned_and_now
    changed = [x * 1.001 for x in now["drafters"]["dflash"]["loss"]]
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(changed, pinned["drafters"]["dflash"]["loss"], rtol=1e-5)
