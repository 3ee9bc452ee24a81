"""The book's trained drafters, built from a profile's recipe and kept in the artifact cache
(chapter 03; chapter 04 adds DSpark's kinds).

`load_or_train_drafter(world, "dflash")` returns the same trained drafter to every notebook
that asks: the first call regenerates the training replies with the target (cached too),
trains, and stores the drafter's own weights (safetensors; the shared embedding and LM head
stay the target's) with its training curves.
"""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from . import cache, drafters, dspark, training
from .profiles import DrafterRecipe, HeadStudy
from .training import DrafterTrainConfig, DrafterTrainHistory, TrainingSequences
from .world import ToyWorld

WEIGHTS, HISTORY = "drafter.safetensors", "history.json"


def train_config(recipe: DrafterRecipe, **overrides) -> DrafterTrainConfig:
    """The recipe's `DrafterTrainConfig` (fields of the config can be overridden)."""
    fields = {name: getattr(recipe, name) for name in (
        "steps", "sequences_per_batch", "anchors_per_sequence", "lr", "warmup_steps",
        "ce_weight", "tv_weight", "loss_decay")}
    return DrafterTrainConfig(**{**fields, **overrides})


def build_dflash(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> drafters.DFlashDrafter:
    """An untrained parallel drafter of the recipe's shape."""
    cfg = drafters.DFlashConfig(recipe.target_layer_ids, mask_token_id=world.tokenizer.mask_token_id,
                                block_size=recipe.block_size, num_layers=recipe.dflash_layers)
    return drafters.DFlashDrafter(world.target, cfg, seed=seed)


def build_eagle(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> drafters.EagleDrafter:
    """An untrained EAGLE-3 style drafter of the recipe's shape (TTT horizon = block size)."""
    cfg = drafters.EagleConfig(recipe.target_layer_ids, ttt_length=recipe.block_size, num_layers=recipe.eagle_layers)
    return drafters.EagleDrafter(world.target, cfg, seed=seed)


def dspark_builder(head_type: str) -> Callable[[ToyWorld, DrafterRecipe, int], dspark.DSparkDrafter]:
    """A builder of untrained DSpark drafters with a `head_type` head on the recipe's backbone."""

    def build(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> dspark.DSparkDrafter:
        cfg = dspark.DSparkConfig(recipe.target_layer_ids, mask_token_id=world.tokenizer.mask_token_id,
                                  block_size=recipe.block_size, num_layers=recipe.dflash_layers,
                                  head_type=head_type, markov_rank=recipe.markov_rank)
        return dspark.DSparkDrafter(world.target, cfg, seed=seed)

    return build


BUILDERS: dict[str, Callable[[ToyWorld, DrafterRecipe, int], nn.Module]] = {
    "dflash": build_dflash,
    "eagle": build_eagle,
    "dspark-markov": dspark_builder("markov"),
    "dspark-rnn": dspark_builder("rnn"),
}


def training_steps(kind: str, recipe: DrafterRecipe) -> int:
    """How many steps the recipe trains a drafter of `kind`."""
    if kind == "eagle":
        return recipe.eagle_steps
    return recipe.dspark_steps if kind.startswith("dspark") else recipe.steps


def ablation_recipe(recipe: DrafterRecipe, study: HeadStudy, block_size: int, layers: int) -> DrafterRecipe:
    """The lean recipe of chapter 04's ablations: every kind trains `study.ablation_steps` on
    smaller batches, with anchors per sequence scaled so each block size sees as many slots."""
    return replace(recipe, block_size=block_size, dflash_layers=layers, steps=study.ablation_steps,
                   dspark_steps=study.ablation_steps, sequences_per_batch=study.ablation_sequences_per_batch,
                   anchors_per_sequence=max(1, study.ablation_block_tokens // block_size))


def _world_config(world: ToyWorld) -> dict:
    """What identifies the world a drafter was trained on: the cached target's folder name
    (a hash of the corpus, tokenizer and target recipe and code)."""
    return {"target": world.target_dir.name}


def training_replies(world: ToyWorld, recipe: DrafterRecipe | None = None, seed: int = 0) -> TrainingSequences:
    """The target's own replies to evenly spaced training prompts (cached; paper section 3.3)."""
    recipe = recipe or world.profile.drafter
    config = {**_world_config(world), "replies": recipe.training_replies, "tokens": recipe.reply_tokens, "seed": seed}

    def build(folder: Path) -> None:
        prompts = list(world.split("train")["prompt"])
        stride = max(1, len(prompts) // recipe.training_replies)
        generator = torch.Generator().manual_seed(seed)
        training.generate_training_sequences(
            world.target, world.tokenizer, prompts[::stride][: recipe.training_replies], recipe.reply_tokens,
            temperature=1.0, generator=generator, batch_size=64).save(folder / "replies.pt")

    return cache.load_or_build("replies", config, build, lambda folder: TrainingSequences.load(folder / "replies.pt"),
                               code=[training])


def load_or_train_drafter(world: ToyWorld, kind: str, recipe: DrafterRecipe | None = None,
                          seed: int = 0) -> tuple[nn.Module, DrafterTrainHistory]:
    """The trained drafter of `kind` (a key of BUILDERS) for this world and recipe, with its
    training curves; trained on the first call, loaded from the cache afterwards."""
    if kind not in BUILDERS:
        raise ValueError(f"unknown drafter kind {kind!r}; expected one of {sorted(BUILDERS)}")
    recipe = recipe or world.profile.drafter
    build_drafter = BUILDERS[kind]
    config = {**_world_config(world), "kind": kind, "recipe": asdict(recipe), "seed": seed}
    code = [drafters, training] + ([dspark] if kind.startswith("dspark") else [])

    def build(folder: Path) -> None:
        replies = training_replies(world, recipe)
        drafter = build_drafter(world, recipe, seed)
        cfg = train_config(recipe, steps=training_steps(kind, recipe))
        history = training.train_drafter(drafter, world.target, replies, cfg, seed=seed, desc=f"train {kind}")
        save_file({k: v.contiguous() for k, v in drafter.state_dict().items()}, str(folder / WEIGHTS))
        (folder / HISTORY).write_text(json.dumps(asdict(history)))

    def load(folder: Path) -> tuple[nn.Module, DrafterTrainHistory]:
        drafter = build_drafter(world, recipe, seed)
        drafter.load_state_dict(load_file(str(folder / WEIGHTS), device=str(drafter.device)))
        drafter.eval()
        return drafter, DrafterTrainHistory(**json.loads((folder / HISTORY).read_text()))

    return cache.load_or_build(f"drafter-{kind}", config, build, load, code=code)


def with_block_size(recipe: DrafterRecipe, block_size: int) -> DrafterRecipe:
    """The recipe with another gamma (for sweeps over the block size)."""
    return replace(recipe, block_size=block_size)
