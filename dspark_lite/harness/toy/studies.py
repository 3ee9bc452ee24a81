"""Study machinery over the zoo's drafters: a grid of lean drafters (one per kind, block size and
depth), each trained from several seeds with the lean recipe and measured once (`LeanDrafters`),
and the runs of a depth-against-head study (`depth_runs`). Chapter 04's Figures 3 and 4 build
them; any study that compares drafters of several sizes can.

Not imported by the world or the zoo, so editing it keeps every artifact's key.
"""
from __future__ import annotations

from typing import Any, Sequence

from . import zoo
from .corpus import DOMAINS
from .profiles import DrafterRecipe, HeadStudy
from .world import ToyWorld


class LeanDrafters:
    """Drafters trained (or loaded) with the lean recipe (`zoo.ablation_recipe`) from every seed, all
    kinds of one (gamma, layers) at once, and measured once on `study`'s held-out prompts:
    runs[(kind, gamma, layers)] = (its report per domain over every seed, training seconds of all
    seeds)."""

    def __init__(self, world: ToyWorld, recipe: Any, study: Any, seeds: Sequence[int]) -> None:
        self.world, self.recipe, self.study, self.seeds = world, recipe, study, list(seeds)
        self.runs: dict[tuple[str, int, int], tuple[dict[str, Any], float]] = {}

    def train(self, kinds: tuple[str, ...], gamma: int, layers: int) -> dict[str, dict[str, float]]:
        """Train and measure the drafters of `kinds` not done yet; the seed-mean tau per domain of each."""
        todo = [kind for kind in kinds if (kind, gamma, layers) not in self.runs]
        lean_recipe = zoo.ablation_recipe(self.recipe, self.study, gamma, layers)
        runs = zoo.load_or_train_seeds(self.world, todo, lean_recipe, self.seeds)
        for kind in todo:
            report = zoo.measured_seeds(self.world, kind, self.study.ablation_eval_prompts,
                                        self.study.ablation_eval_samples, lean_recipe, self.seeds)
            self.runs[(kind, gamma, layers)] = (report, sum(history.seconds for _, history in runs[kind]))
        return {kind: self.tau(kind, gamma, layers) for kind in kinds}

    def tau(self, kind: str, gamma: int, layers: int) -> dict[str, float]:
        """The seed-mean tau per domain of one trained run."""
        return {d: self.runs[(kind, gamma, layers)][0][d].tau for d in DOMAINS}

    def seed_taus(self, kind: str, gamma: int, layers: int) -> dict[str, Any]:
        """Each seed's tau per domain of one trained run."""
        return {d: self.runs[(kind, gamma, layers)][0][d].seed_taus for d in DOMAINS}

    def parts(self, kind: str, gamma: int, layers: int) -> dict[str, Any]:
        """The per-generation (tokens, rounds) of one trained run per domain, one list per seed: what the
        verdicts' paired intervals resample."""
        return {d: self.runs[(kind, gamma, layers)][0][d].per_generation for d in DOMAINS}


def depth_runs(recipe: DrafterRecipe, study: HeadStudy) -> list[tuple[str, int]]:
    """The (kind, layers) of a depth-against-head study (the paper's Figure 3): DSpark-Markov at
    `study.depth_layers` and at the backbone's depth, DFlash at the backbone's depth and at
    `study.deep_dflash_layers` (the paper's: a 2-layer DSpark against a 5-layer DFlash, the
    backbone's depth)."""
    return ([("dspark-markov", n) for n in sorted({*study.depth_layers, recipe.dflash_layers})]
            + [("dflash", n) for n in sorted({recipe.dflash_layers, study.deep_dflash_layers})])
