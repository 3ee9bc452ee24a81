"""Where parallel drafting wins (chapter 03, section 3.9): tau(DFlash) / tau(EAGLE-style) over the
drafters' capacity ratio and the domains, and where each drafter loses inside a block.

The sweep trains DFlash once and the EAGLE-style baseline at several sizes (`CrossoverStudy.eagle_shapes`),
every one on the lean recipe of chapter 04's ablations at Table 1's block size (`lean_recipe`), from
the same seeds, on the same replies, and measures tau on the same held-out prompts. The capacity
ratio of a point is the baseline's non-embedding parameters over DFlash's (Qwen3-4B's:
`regime.paper_parameter_shares`, about 0.28).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from . import regime, zoo
from .evaluation import DomainAcceptance
from .profiles import CrossoverStudy, DrafterRecipe, HeadStudy
from .world import ToyWorld


def lean_recipe(recipe: DrafterRecipe, heads: HeadStudy) -> DrafterRecipe:
    """The head ablations' lean training (`zoo.ablation_recipe`) at the recipe's own block size and
    depth, for every kind, the EAGLE-style baseline included."""
    return zoo.ablation_recipe(recipe, heads, recipe.gamma, recipe.dflash_layers)


def eagle_recipe(recipe: DrafterRecipe, shape: tuple[int, int, int | None]) -> DrafterRecipe:
    """`recipe` with the baseline's layer of `shape` = (MLP width, attention heads, head width)."""
    intermediate, heads, head_dim = shape
    return replace(recipe, eagle_intermediate_size=intermediate, eagle_num_heads=heads, eagle_head_dim=head_dim)


def capacity_ratio(world: ToyWorld, recipe: DrafterRecipe) -> float:
    """The baseline's non-embedding parameters over DFlash's, at the recipe's shapes."""
    eagle = regime.non_embedding_parameters(zoo.build_eagle(world, recipe))
    return eagle / regime.non_embedding_parameters(zoo.build_dflash(world, recipe))


def sweep(world: ToyWorld, recipe: DrafterRecipe, heads: HeadStudy, study: CrossoverStudy, seeds: Sequence[int]
          ) -> tuple[dict[str, DomainAcceptance], dict[float, dict[str, DomainAcceptance]]]:
    """DFlash's seed-mean acceptance per domain, and the baseline's at each of `study.eagle_shapes`
    keyed by its capacity ratio; every drafter on the lean recipe, trained from `seeds` (cached)."""
    lean = lean_recipe(recipe, heads)
    zoo.load_or_train_seeds(world, ["dflash"], lean, seeds)
    dflash = _measured(world, "dflash", lean, study, seeds)
    eagles = {}
    for shape in study.eagle_shapes:
        r = eagle_recipe(lean, shape)
        zoo.load_or_train_seeds(world, ["eagle"], r, seeds)
        eagles[capacity_ratio(world, r)] = _measured(world, "eagle", r, study, seeds)
    return dflash, eagles


def loss_ablation(world: ToyWorld, recipe: DrafterRecipe, heads: HeadStudy, study: CrossoverStudy, seeds: Sequence[int]
                  ) -> tuple[float, dict[str, DomainAcceptance], dict[str, DomainAcceptance]]:
    """The book's earlier baseline ("eagle-tv": `zoo.TV_BASELINE`, trained on CE + TV) and the same
    layer trained on Eagle3's loss, both on the lean recipe from `seeds`: (their capacity ratio,
    Eagle3's loss's acceptance, CE + TV's). Shared with `sweep` when its shapes hold that layer."""
    lean = lean_recipe(recipe, heads)
    tv_recipe = zoo.tv_baseline_recipe(lean)
    eagle3 = replace(tv_recipe, eagle_loss="eagle3")
    zoo.load_or_train_seeds(world, ["eagle-tv"], lean, seeds)
    zoo.load_or_train_seeds(world, ["eagle"], eagle3, seeds)
    return (capacity_ratio(world, tv_recipe), _measured(world, "eagle", eagle3, study, seeds),
            _measured(world, "eagle-tv", lean, study, seeds))


def _measured(world: ToyWorld, kind: str, recipe: DrafterRecipe, study: CrossoverStudy, seeds: Sequence[int]
              ) -> dict[str, DomainAcceptance]:
    return zoo.measured_seeds(world, kind, study.eval_prompts, study.eval_samples, recipe, seeds)
