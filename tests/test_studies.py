"""The study machinery over the zoo's drafters (harness/toy/studies.py, chapter 04's Figures 3 and 4):
the lean-drafter grid trains each kind, block size and depth once, and a depth study's runs."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from dspark_lite.harness.toy import studies
from dspark_lite.harness.toy.corpus import DOMAINS


def test_lean_drafters_train_each_kind_and_size_once(monkeypatch: pytest.MonkeyPatch) -> None:
    trained: list[tuple[str, ...]] = []
    history = SimpleNamespace(seconds=2.0)

    def train(world, kinds, recipe, seeds):
        trained.append(tuple(kinds))
        return {kind: [(None, history) for _ in seeds] for kind in kinds}

    monkeypatch.setattr(studies.zoo, "ablation_recipe", lambda recipe, study, gamma, layers: (gamma, layers))
    monkeypatch.setattr(studies.zoo, "load_or_train_seeds", train)
    monkeypatch.setattr(studies.zoo, "measured_seeds", lambda world, kind, *rest: {
        d: SimpleNamespace(tau=3.0 + len(kind) / 10, seed_taus=[3.0, 3.2], per_generation=[[[3, 1]], [[4, 1]]])
        for d in DOMAINS})
    study = SimpleNamespace(ablation_eval_prompts=2, ablation_eval_samples=1)
    lean = studies.LeanDrafters(None, None, study, seeds=[0, 1])
    first = lean.train(("dflash", "dspark-markov"), 4, 1)
    again = lean.train(("dflash", "dspark-markov"), 4, 1)
    assert trained == [("dflash", "dspark-markov"), ()] and first == again
    assert first["dflash"] == dict.fromkeys(DOMAINS, 3.6) and lean.runs[("dflash", 4, 1)][1] == 4.0
    assert lean.seed_taus("dflash", 4, 1) == dict.fromkeys(DOMAINS, [3.0, 3.2])
    assert lean.parts("dspark-markov", 4, 1)["chat"] == [[[3, 1]], [[4, 1]]]
    with pytest.raises(KeyError):
        lean.tau("dflash", 8, 1)  # never trained


def test_a_depth_study_runs_a_shallow_dspark_and_both_drafters_at_the_backbones_depth() -> None:
    """As the paper's Figure 3: a 2-layer DSpark against DFlash at the backbone's 5 layers, with DSpark at
    the backbone's depth too (what the head adds at equal depth); a deeper DFlash only when the study asks."""
    from dspark_lite.harness.toy.profiles import get_profile

    full = get_profile("full")
    assert studies.depth_runs(full.drafter, full.heads) == [("dspark-markov", 2), ("dspark-markov", 5), ("dflash", 5)]
    study = SimpleNamespace(depth_layers=(1, 2), deep_dflash_layers=7)
    assert studies.depth_runs(SimpleNamespace(dflash_layers=2), study) == [
        ("dspark-markov", 1), ("dspark-markov", 2), ("dflash", 2), ("dflash", 7)]
