"""Chapter 04's page modules say what the run found, and their verdicts follow the numbers given."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from dspark_lite.harness.book import verdicts  # noqa: E402
from dspark_lite.harness.book.pages import ch04, ch04_ablations  # noqa: E402

DOMAINS = ch04.DOMAINS


@pytest.fixture
def said(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the page modules say, one string a call, instead of displaying it (figures and tables dropped)."""
    out: list[str] = []
    for module in (ch04, ch04_ablations):
        monkeypatch.setattr(module, "say", lambda *paragraphs: out.append("\n\n".join(paragraphs)))
        monkeypatch.setattr(module, "display", lambda *objects: None)
    monkeypatch.setattr(ch04.plt, "show", lambda: None)
    return out


def report(tau: float, seed: int, conditional: list[float] | None = None) -> SimpleNamespace:
    """A drafter's report on one domain: 2 seeds x 30 generations of 10 rounds, about `tau` tokens a round."""
    rng = np.random.default_rng(seed)
    parts = np.stack([np.stack([np.round(10 * tau + rng.normal(0, 1, 30)), np.full(30, 10.0)], axis=-1)
                      for _ in range(2)])
    return SimpleNamespace(tau=verdicts.pooled_tau(parts), seed_taus=list(parts[..., 0].sum(1) / parts[..., 1].sum(1)),
                           per_generation=parts.tolist(), conditional=conditional or [0.8, 0.8, 0.8, 0.8])


def acceptance(taus: dict[str, dict[str, float]]) -> dict[str, dict[str, SimpleNamespace]]:
    return {kind: {d: report(taus[kind][d], seed=10 * i + j) for j, d in enumerate(DOMAINS)}
            for i, kind in enumerate(ch04.KINDS)}


def test_a_collision_is_resolved_below_a_third_of_dflash_and_the_sentence_says_so(said: list[str]) -> None:
    mixed = {"opener": {"target": 0.0, "DFlash": 0.30, "DSpark-Markov": 0.05, "DSpark-RNN": 0.04},
             "skip": {"target": 0.0, "DFlash": 0.30, "DSpark-Markov": 0.10, "DSpark-RNN": 0.02}}
    assert ch04.resolves(mixed, "opener", "DSpark-Markov") and not ch04.resolves(mixed, "skip", "DSpark-Markov")
    ch04.say_collisions(mixed, [SimpleNamespace(name="opener"), SimpleNamespace(name="skip")])
    opener, skip = said[0].split("\n\n")
    assert "DFlash mixes two phrasings in 30%" in opener and "the Markov head resolves the opener collision" in opener
    assert 'reads only " to", does not resolve it (it mixes less often than DFlash)' in skip
    assert skip.endswith("can carry the adjective, resolves it.")


def test_table1_calls_a_domain_won_only_beyond_the_noise(said: list[str]) -> None:
    ahead = {"eagle": dict.fromkeys(DOMAINS, 3.0), "dflash": {"math": 4.0, "code": 3.5, "chat": 3.0},
             "dspark-markov": {"math": 5.0, "code": 4.5, "chat": 3.0}, "dspark-rnn": dict.fromkeys(DOMAINS, 4.0)}
    table = ch04.Table1(acceptance(ahead), seed=0)
    assert table.markov_wins == ["math", "code"] and table.hardest == "chat"
    assert table.domain_order == ["math", "code", "chat"]
    table.say(eagle_layers=1, target_layers=4)
    text = said[0]
    assert "beyond the noise, in math and code only" in text
    assert "hardest domain is chat (as in the paper)" in text and "math, code, chat (as in the paper)" in text
    assert f"macro-average gain, the ratio of the macro averages, is {table.macro_gain:+.1f}%" in text
    assert "ahead of the autoregressive drafter, holds at toy scale" in text and "1 layer against our target's 4" in text


def test_the_per_slot_verdict_follows_the_falls(said: list[str]) -> None:
    rng = np.random.default_rng(0)
    curve = lambda fall: np.clip(0.9 - fall * np.linspace(0, 1, 4) + rng.normal(0, 0.01, (2, 20, 4)), 0, 1)
    per_slot = {kind: {d: curve(0.3 if kind in ("eagle", "dflash") else 0.0) for d in DOMAINS} for kind in ch04.KINDS}
    falls = ch04.figure2_per_slot(per_slot, n_seeds=2, gamma=4, seed=0)
    assert falls.flatter_on == DOMAINS
    ch04.say_slot_falls(falls, n_seeds=2, gamma=4)
    assert "flatter than DFlash's" in said[0] and "in every domain (as in the paper)" in said[0]


def test_lean_drafters_train_each_kind_and_size_once(monkeypatch: pytest.MonkeyPatch) -> None:
    trained: list[tuple[str, ...]] = []
    history = SimpleNamespace(seconds=2.0)

    def train(world, kinds, recipe, seeds):
        trained.append(tuple(kinds))
        return {kind: [(None, history) for _ in seeds] for kind in kinds}

    monkeypatch.setattr(ch04_ablations.zoo, "ablation_recipe", lambda recipe, study, gamma, layers: (gamma, layers))
    monkeypatch.setattr(ch04_ablations.zoo, "load_or_train_seeds", train)
    monkeypatch.setattr(ch04_ablations.zoo, "measured_seeds", lambda world, kind, *rest: {
        d: SimpleNamespace(tau=3.0 + len(kind) / 10, seed_taus=[3.0], per_generation=[]) for d in DOMAINS})
    study = SimpleNamespace(ablation_eval_prompts=2, ablation_eval_samples=1)
    lean = ch04_ablations.LeanDrafters(None, None, study, seeds=[0, 1])
    first = lean.train(("dflash", "dspark-markov"), 4, 1)
    again = lean.train(("dflash", "dspark-markov"), 4, 1)
    assert trained == [("dflash", "dspark-markov"), ()] and first == again
    assert first["dflash"] == dict.fromkeys(DOMAINS, 3.6) and lean.runs[("dflash", 4, 1)][1] == 4.0


def test_the_head_cost_sentence_reads_the_table(said: list[str]) -> None:
    draft_s = {"DFlash": {2: 0.010, 4: 0.010}, "DSpark-Markov": {2: 0.0102, 4: 0.0104}}
    overhead = ch04_ablations.overhead_table(draft_s, {3: 0.010, 5: 0.010}, [2, 4])
    assert overhead.loc[4, "head overhead (ms)"] == pytest.approx(0.4)
    assert overhead.loc[4, "round overhead (%)"] == pytest.approx(2.0)
    target = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(numel=lambda: 70_000, is_cuda=False)]))
    ch04_ablations.say_overhead(overhead, 4, target)
    assert "about 100 microseconds per slot at gamma = 4" in said[0] and "grows with gamma" in said[0]
    assert "0.40 ms, 2.0% of the round (under a tenth of it)" in said[0] and "0.07M parameters on a CPU" in said[0]
    assert isinstance(overhead, pd.DataFrame)


def test_figure3_runs_a_shallow_dspark_and_both_drafters_at_the_backbones_depth():
    """As the paper's Figure 3: a 2-layer DSpark against DFlash at the backbone's 5 layers, with DSpark at
    the backbone's depth too (what the head adds at equal depth); a deeper DFlash only when the study asks."""
    from dspark_lite.harness.toy.profiles import get_profile

    full = get_profile("full")
    assert ch04_ablations.depth_runs(full.drafter, full.heads) == [
        ("dspark-markov", 2), ("dspark-markov", 5), ("dflash", 5)]
    study = SimpleNamespace(depth_layers=(1, 2), deep_dflash_layers=7)
    assert ch04_ablations.depth_runs(SimpleNamespace(dflash_layers=2), study) == [
        ("dspark-markov", 1), ("dspark-markov", 2), ("dflash", 2), ("dflash", 7)]
