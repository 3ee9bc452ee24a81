"""The book's trained drafters, built from a profile's recipe and kept in the artifact cache
(chapter 03; chapter 04 adds DSpark's kinds, chapter 05 the confidence drafter).

`load_or_train_drafter(world, "dflash")` returns the same trained drafter to every notebook
that asks: the first call regenerates the training replies with the target (cached too),
trains, and stores the drafter's own weights (safetensors; the shared embedding and LM head
stay the target's) with its training curves. `load_or_train_seeds` trains several kinds from
several seeds at once (`drafter_seeds`: the profile's count, from $DSPARK_SEED), and
`measured_seeds` measures them as one seed-mean report per domain.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from . import cache, evaluation, replies
from ... import dflash, dspark, eagle, loss, progress as bars, training
from ...hidden_drafter import DrafterConfig
from ...record import Rounds
from ...resume import Checkpointer
from ...progress import progress
from ...runtime import device_generator, model_device
from .profiles import ConfidenceStudy, DrafterRecipe, HeadStudy, Profile
from ...training import DrafterTrainConfig, DrafterTrainHistory
from ...training_data import TrainingSequences
from .workers import fork_map, one_thread, worker_processes
from .world import ToyWorld

WEIGHTS, HISTORY = "drafter.safetensors", "history.json"
SEED_VAR = "DSPARK_SEED"


def drafter_seeds(profile: Profile) -> list[int]:
    """The training seeds of the drafters a verdict compares: `profile.drafter_seeds` of them,
    from the base seed $DSPARK_SEED (default 0). Base b gives b*n, ..., b*n + n - 1 for n seeds, so
    two bases share no seed. The world (target, corpus, replies) keeps its own seed: it is fixed."""
    raw = os.environ.get(SEED_VAR, "0").strip()
    if not raw.isdigit():
        raise ValueError(f"{SEED_VAR} (the drafters' base seed) must be a whole number >= 0, got {raw!r}")
    n = profile.drafter_seeds
    return [int(raw) * n + i for i in range(n)]


def train_config(recipe: DrafterRecipe, kind: str = "dflash", **overrides) -> DrafterTrainConfig:
    """The recipe's `DrafterTrainConfig` for a drafter of `kind` (fields of the config can be
    overridden): the EAGLE-style baseline trains on Eagle3's loss when `recipe.eagle_loss` says
    so, every other drafter (and the TV-trained baseline) on the recipe's CE + TV."""
    fields = {name: getattr(recipe, name) for name in (
        "steps", "sequences_per_batch", "anchors_per_sequence", "lr", "warmup_steps",
        "ce_weight", "tv_weight", "loss_decay")}
    fields["steps"] = training_steps(kind, recipe)
    if kind == "eagle" and recipe.eagle_loss == "eagle3":
        fields.update(ce_weight=0.0, tv_weight=0.0, soft_ce_weight=1.0, loss_decay=loss.EAGLE3_DECAY)
    return DrafterTrainConfig(**{**fields, **overrides})


TV_BASELINE = dict(eagle_intermediate_size=32, eagle_num_heads=2, eagle_head_dim=None, eagle_loss="dspark")
"""The EAGLE-style baseline of the book's builds before stop 57 (chapter 03's ablation "eagle-tv"):
7.3% of the target's non-embedding parameters, trained on the parallel drafters' CE + TV."""


def tv_baseline_recipe(recipe: DrafterRecipe) -> DrafterRecipe:
    """`recipe` with the earlier baseline's shape and loss (`TV_BASELINE`); in the smoke
    profile, whose baseline is already the target's shape, only the loss changes."""
    return replace(recipe, **(TV_BASELINE if recipe.eagle_intermediate_size is not None else {"eagle_loss": "dspark"}))


def backbone_config(world: ToyWorld, recipe: DrafterRecipe, **more) -> DrafterConfig:
    """The parallel backbone's config (DFlash's, and DSpark's under its head): the recipe's depth
    and layer shape, one key/value head when the recipe sets the heads."""
    return DrafterConfig(recipe.target_layer_ids, gamma=recipe.gamma, mask_token_id=world.tokenizer.mask_token_id,
                         num_layers=recipe.dflash_layers, intermediate_size=recipe.draft_intermediate_size,
                         num_heads=recipe.draft_num_heads, num_kv_heads=None if recipe.draft_num_heads is None else 1,
                         head_dim=recipe.draft_head_dim, **more)


def build_dflash(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> dflash.DFlashDrafter:
    """An untrained parallel drafter of the recipe's shape."""
    return dflash.DFlashDrafter(world.target, backbone_config(world, recipe), seed=seed)


def build_eagle(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> eagle.EagleDrafter:
    """An untrained EAGLE-3 style drafter of the recipe's shape (TTT horizon = block size)."""
    cfg = DrafterConfig(recipe.target_layer_ids, gamma=recipe.gamma, num_layers=recipe.eagle_layers,
                        intermediate_size=recipe.eagle_intermediate_size or recipe.draft_intermediate_size,
                        num_heads=recipe.eagle_num_heads, num_kv_heads=None if recipe.eagle_num_heads is None else 1,
                        head_dim=recipe.eagle_head_dim)
    return eagle.EagleDrafter(world.target, cfg, seed=seed)


def dspark_builder(head_type: str, confidence_head: bool = False
                   ) -> Callable[[ToyWorld, DrafterRecipe, int], dspark.DSparkDrafter]:
    """A builder of untrained DSpark drafters with a `head_type` head on the recipe's backbone
    (and a confidence head if `confidence_head`)."""

    def build(world: ToyWorld, recipe: DrafterRecipe, seed: int = 0) -> dspark.DSparkDrafter:
        cfg = backbone_config(world, recipe, head_type=head_type, head_rank=recipe.head_rank,
                              confidence_head=confidence_head)
        return dspark.DSparkDrafter(world.target, cfg, seed=seed)

    return build


BUILDERS: dict[str, Callable[[ToyWorld, DrafterRecipe, int], nn.Module]] = {
    "dflash": build_dflash,
    "eagle": build_eagle,
    "eagle-tv": lambda world, recipe, seed=0: build_eagle(world, tv_baseline_recipe(recipe), seed),
    "dspark-markov": dspark_builder("markov"),
    "dspark-rnn": dspark_builder("rnn"),
    "dspark-confidence": dspark_builder("markov", confidence_head=True),
}


def training_steps(kind: str, recipe: DrafterRecipe) -> int:
    """How many steps the recipe trains a drafter of `kind`."""
    if kind.startswith("eagle"):
        return recipe.eagle_steps
    return recipe.dspark_steps if kind.startswith("dspark") else recipe.steps


def ablation_recipe(recipe: DrafterRecipe, study: HeadStudy, gamma: int, layers: int) -> DrafterRecipe:
    """The lean recipe of the head ablations: every kind trains `study.ablation_steps` on
    smaller batches, with anchors per sequence scaled so each block size sees as many slots."""
    return replace(recipe, gamma=gamma, dflash_layers=layers, steps=study.ablation_steps,
                   dspark_steps=study.ablation_steps, eagle_steps=study.ablation_steps, sequences_per_batch=study.ablation_sequences_per_batch,
                   anchors_per_sequence=max(1, study.ablation_block_tokens // gamma))


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
        generator = device_generator(seed, model_device(world.target))
        replies.generate_training_sequences(
            world.target, world.tokenizer, prompts[::stride][: recipe.training_replies], recipe.reply_tokens,
            temperature=1.0, generator=generator, batch_size=64).save(folder / "replies.pt")

    return cache.load_or_build("replies", config, build, lambda folder: TrainingSequences.load(folder / "replies.pt"))


def heldout_replies(world: ToyWorld, domain: str, recipe: DrafterRecipe | None = None, seed: int = 0
                    ) -> TrainingSequences:
    """The target's own replies (temperature 1) to the held-out evaluation prompts of `domain`, one
    each, of up to `eval_new_tokens` tokens (cached): what per-slot acceptance is measured on
    (`evaluation.slot_acceptance`). No drafter trains on them."""
    recipe = recipe or world.profile.drafter
    config = {**_world_config(world), "domain": domain, "prompts": recipe.eval_prompts,
              "tokens": recipe.eval_new_tokens, "seed": seed}

    def build(folder: Path) -> None:
        generator = device_generator(seed, model_device(world.target))
        replies.generate_training_sequences(
            world.target, world.tokenizer, world.eval_prompts(domain)[: recipe.eval_prompts], recipe.eval_new_tokens,
            temperature=1.0, generator=generator, batch_size=64, desc=f"held-out {domain} replies",
        ).save(folder / "replies.pt")

    return cache.load_or_build("heldout-replies", config, build, lambda folder: TrainingSequences.load(folder / "replies.pt"))


def load_or_train_drafter(world: ToyWorld, kind: str, recipe: DrafterRecipe | None = None,
                          seed: int = 0) -> tuple[nn.Module, DrafterTrainHistory]:
    """The trained drafter of `kind` (a key of BUILDERS) for this world and recipe, with its
    training curves; trained from scratch on the first call, loaded from the cache afterwards."""
    return load_or_train_drafters(world, [kind], recipe, seed)[kind]


def load_or_train_drafters(world: ToyWorld, kinds: Sequence[str], recipe: DrafterRecipe | None = None,
                           seed: int = 0) -> dict[str, tuple[nn.Module, DrafterTrainHistory]]:
    """`load_or_train_drafter` for several kinds at once (`load_or_train_seeds` with one seed)."""
    return {kind: runs[0] for kind, runs in load_or_train_seeds(world, kinds, recipe, [seed]).items()}


def load_or_train_seeds(world: ToyWorld, kinds: Sequence[str], recipe: DrafterRecipe | None = None,
                        seeds: Sequence[int] = (0,)) -> dict[str, list[tuple[nn.Module, DrafterTrainHistory]]]:
    """Each of `kinds` trained from each of `seeds`: {kind: [(drafter, history) per seed]}. Those
    not in the cache train at the same time, those with as many steps together: on a CPU with
    several cores each in its own single-thread process (`_train_in_processes`), elsewhere side
    by side in one loop per seed that shares one view of the target among them
    (`training.train_drafters`), on one thread on a CPU (`workers.one_thread`). Either way each
    trains exactly as it would alone, to the bit, and each is cached under its own key, so
    `load_or_train_drafter` finds it later."""
    recipe = recipe or world.profile.drafter
    jobs = [(_check_kind(kind), seed) for kind in kinds for seed in seeds]
    entries = {(kind, seed): _drafter_entry(world, kind, recipe, seed) for kind, seed in jobs}
    missing = [job for job, entry in entries.items() if not cache.contains(*entry, builder=__name__)]
    workers = worker_processes(model_device(world.target))
    names = ' + '.join(dict.fromkeys(kind for kind, _ in missing))
    if workers > 1 and len(missing) > 1:  # one single-thread process a drafter, whatever its recipe
        _train_in_processes(world, missing, recipe, entries, workers)
        missing = []
    groups = list(dict.fromkeys(train_config(recipe, kind) for kind, _ in missing))  # one loop trains one config
    for cfg in (progress(groups, desc=f"train {names}") if len(groups) > 1 else groups):
        jobs_now = [job for job in missing if train_config(recipe, job[0]) == cfg]
        for seed in dict.fromkeys(seed for _, seed in jobs_now):
            _train_side_by_side(world, [kind for kind, s in jobs_now if s == seed], recipe, seed, entries, cfg)
    return {kind: [cache.load_or_build(*entries[(kind, seed)], _build_alone(world, kind, recipe, seed),
                                       _loader(world, kind, recipe, seed)) for seed in seeds]
            for kind in dict.fromkeys(kinds)}


def _train_side_by_side(world: ToyWorld, kinds: Sequence[str], recipe: DrafterRecipe, seed: int,
                        entries: dict[tuple[str, int], tuple[str, dict]], cfg: DrafterTrainConfig) -> None:
    """Train `kinds` (of one training config) from one seed in one loop sharing one view of the
    target, and cache each."""
    group = {kind: BUILDERS[kind](world, recipe, seed) for kind in kinds}
    members = sorted(cache.artifact_folder(*entries[(k, seed)], builder=__name__).name for k in group)
    work = cache.work_folder("drafters", {"members": members}, builder=__name__)
    replies = training_replies(world, recipe)  # built (when missing) on every thread, as elsewhere
    with cache.exclusive(work), one_thread(model_device(world.target)):
        histories = training.train_drafters(group, world.target, replies,
                                            cfg, seed,
                                            desc=f"train {' + '.join(group)}", checkpoint=Checkpointer(work))
    for kind, drafter in group.items():  # cache each at once: an interruption now loses none of them
        cache.load_or_build(*entries[(kind, seed)], lambda folder, kind=kind, drafter=drafter: _save(drafter, histories[kind], folder),
                            lambda f: f)
    shutil.rmtree(work, ignore_errors=True)


def _build_alone(world: ToyWorld, kind: str, recipe: DrafterRecipe, seed: int) -> Callable[[Path], None]:
    """The cache's build of one drafter trained alone (checkpointing into its work folder)."""
    def write(folder: Path) -> None:
        drafter = BUILDERS[kind](world, recipe, seed)
        _save(drafter, _train(world, kind, drafter, recipe, None, seed, folder), folder)
    return write


_TRAINING: tuple | None = None  # what forked training workers inherit: world, recipe, entries, step counter, jobs


def _train_in_worker(job: int) -> None:
    """In a forked worker: train the `job`-th (kind, seed) alone on one thread and cache it; its
    steps go to the parent's bar through the shared counter."""
    world, recipe, entries, counter, jobs = _TRAINING
    kind, seed = jobs[job]
    bars.RELAY = counter
    cache.load_or_build(*entries[(kind, seed)], _build_alone(world, kind, recipe, seed), lambda folder: None)


def _train_in_processes(world: ToyWorld, jobs: Sequence[tuple[str, int]], recipe: DrafterRecipe,
                        entries: dict[tuple[str, int], tuple[str, dict]], workers: int) -> None:
    """Train each (kind, seed) of `jobs` alone in its own forked single-thread process (at most
    `workers` at a time), which caches it; one bar here counts all their steps. A second thread
    speeds a drafter's small step up far less than twofold (measured on 2 cores: DSpark-Markov
    70 ms a step on two threads, 110 on one), so two processes train a pair faster than one loop
    on two threads (DSpark-Markov and DSpark-RNN, 600 steps: 72 s against 102 s). An interrupted
    run leaves each drafter's checkpoint in its own work folder, and the next resumes from it."""
    global _TRAINING
    training_replies(world, recipe)  # cached before the fork, so that no worker builds it
    counter = multiprocessing.get_context("fork").Value("q", 0)
    _TRAINING = (world, recipe, entries, counter, list(jobs))
    kinds = ' + '.join(dict.fromkeys(kind for kind, _ in jobs))
    seeds = sorted({seed for _, seed in jobs})
    label = f"train {kinds}" + (f", seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else "")
    bar = progress(total=sum(training_steps(kind, recipe) for kind, _ in jobs), desc=f"{label} ({min(workers, len(jobs))} processes)")
    try:
        done = fork_map(_train_in_worker, len(jobs), workers,
                        lambda job: f"training drafter {jobs[job][0]} from seed {jobs[job][1]}",
                        on_wait=lambda: bar.update(counter.value - bar.n))
        for _ in done:  # a worker's error is raised here
            pass
        bar.update(counter.value - bar.n)
    finally:
        _TRAINING = None
        bar.close()


def _drafter_entry(world: ToyWorld, kind: str, recipe: DrafterRecipe, seed: int) -> tuple[str, dict]:
    """The cache's (kind, config) of a drafter trained from scratch."""
    config = {**_world_config(world), "kind": kind, "recipe": asdict(recipe), "seed": seed}
    return f"drafter-{kind}", config


def load_or_finetune_drafter(world: ToyWorld, kind: str, base_kind: str = "dflash",
                             recipe: DrafterRecipe | None = None, seed: int = 0
                             ) -> tuple[nn.Module, DrafterTrainHistory]:
    """`kind` started from the trained `base_kind` drafter of the same recipe (cached) and
    trained `recipe.finetune_steps` more steps, every weight at once. A DSpark drafter started
    from DFlash gets W2 = 0, i.e. starts exactly as that DFlash drafter; one started from a
    DSpark drafter keeps its head and gains what the base lacks (the confidence head,
    freshly initialised). Cached like `load_or_train_drafter`."""
    _check_kind(kind)
    _check_kind(base_kind)
    recipe = recipe or world.profile.drafter
    config = {**_world_config(world), "kind": kind, "from": base_kind, "recipe": asdict(recipe), "seed": seed}

    def build(folder: Path) -> None:
        base, _ = load_or_train_drafter(world, base_kind, recipe, seed)
        drafter = BUILDERS[kind](world, recipe, seed)
        _start_from(drafter, base)
        _save(drafter, _train(world, kind, drafter, recipe, recipe.finetune_steps, seed, folder), folder)

    return cache.load_or_build(f"finetuned-{kind}", config, build, _loader(world, kind, recipe, seed))


def _start_from(drafter: nn.Module, base: nn.Module) -> None:
    """Copy `base`'s weights into `drafter` (see `load_or_finetune_drafter`)."""
    if isinstance(drafter, dspark.DSparkDrafter) and not isinstance(base, dspark.DSparkDrafter):
        drafter.load_backbone(base)
        return
    missing, unexpected = drafter.load_state_dict(base.state_dict(), strict=False)
    if unexpected or any(not key.startswith("confidence_head.") for key in missing):
        raise ValueError(f"cannot start a {type(drafter).__name__} from a {type(base).__name__}: "
                         f"missing {list(missing)[:4]}, unexpected {list(unexpected)[:4]}")


def _check_kind(kind: str) -> str:
    if kind not in BUILDERS:
        raise ValueError(f"unknown drafter kind {kind!r}; expected one of {sorted(BUILDERS)}")
    return kind


def _train(world: ToyWorld, kind: str, drafter: nn.Module, recipe: DrafterRecipe, steps: int | None,
           seed: int, folder: Path) -> DrafterTrainHistory:
    """Train `drafter` alone for `steps` (None: the kind's own), checkpointing into the
    artifact's work `folder`."""
    cfg = train_config(recipe, kind, **({} if steps is None else {"steps": steps}))
    replies = training_replies(world, recipe)
    with one_thread(model_device(world.target)):  # the weights must not depend on the cores
        return training.train_drafter(drafter, world.target, replies, cfg, seed=seed,
                                      desc=f"train {kind}", checkpoint=Checkpointer(folder))


def _save(drafter: nn.Module, history: DrafterTrainHistory, folder: Path) -> None:
    save_file({k: v.contiguous() for k, v in drafter.state_dict().items()}, str(folder / WEIGHTS))
    (folder / HISTORY).write_text(json.dumps(asdict(history)))


def _loader(world: ToyWorld, kind: str, recipe: DrafterRecipe, seed: int) -> Callable[[Path], tuple[nn.Module, DrafterTrainHistory]]:
    def load(folder: Path) -> tuple[nn.Module, DrafterTrainHistory]:
        drafter = BUILDERS[kind](world, recipe, seed)
        drafter.load_state_dict(load_file(str(folder / WEIGHTS), device=str(drafter.device)))
        drafter.eval()
        return drafter, DrafterTrainHistory(**json.loads((folder / HISTORY).read_text()))

    return load


def with_gamma(recipe: DrafterRecipe, gamma: int) -> DrafterRecipe:
    """The recipe with another gamma (for sweeps over the block size)."""
    return replace(recipe, gamma=gamma)


def measured_acceptance(world: ToyWorld, kind: str, n_prompts: int, samples: int, recipe: DrafterRecipe | None = None,
                        base_kind: str | None = None, seed: int = 0) -> dict[str, evaluation.DomainAcceptance]:
    """`evaluation.measure_acceptance` of the trained `kind` drafter (from scratch, or fine-tuned
    from `base_kind` by `load_or_finetune_drafter`) at the recipe's gamma and temperature 1 on the
    first `n_prompts` held-out prompts, `samples` times each, with every round's record
    (proposed, accepted, confidences). Deterministic, so cached: every notebook that asks shares it."""
    _check_kind(kind)
    recipe = recipe or world.profile.drafter

    def build(folder: Path) -> None:
        if base_kind is None:
            drafter, _ = load_or_train_drafter(world, kind, recipe, seed)
        else:
            drafter, _ = load_or_finetune_drafter(world, kind, base_kind, recipe, seed)
        report = evaluation.measure_acceptance(world, drafter, recipe.gamma, n_prompts, recipe.eval_new_tokens,
                                               samples=samples, seed=seed, desc=f"acceptance {kind}",
                                               keep_record=True)
        (folder / "summary.json").write_text(json.dumps({d: r.to_dict() for d, r in report.items()}))
        np.savez(folder / "rounds.npz", **Rounds.concat([r.record for r in report.values()]).to_arrays())

    def load(folder: Path) -> dict[str, evaluation.DomainAcceptance]:
        summary = json.loads((folder / "summary.json").read_text())
        with np.load(folder / "rounds.npz") as arrays:
            rounds = Rounds.from_arrays(arrays)
        return {domain: evaluation.DomainAcceptance(**fields, record=rounds[rounds.domain == domain])
                for domain, fields in summary.items()}

    return cache.load_or_build(*_acceptance_entry(world, kind, n_prompts, samples, recipe, base_kind, seed),
                               build, load)


def _acceptance_entry(world: ToyWorld, kind: str, n_prompts: int, samples: int, recipe: DrafterRecipe,
                      base_kind: str | None, seed: int) -> tuple[str, dict]:
    """The cache's (kind, config) of `measured_acceptance`."""
    config = {**_world_config(world), "kind": kind, "recipe": asdict(recipe), "prompts": n_prompts,
              "samples": samples, "base": base_kind, "seed": seed}
    return f"acceptance-{kind}", config


def measured_seeds(world: ToyWorld, kind: str, n_prompts: int, samples: int, recipe: DrafterRecipe | None = None,
                   seeds: Sequence[int] = (0,)) -> dict[str, evaluation.DomainAcceptance]:
    """`measured_acceptance` of the `kind` drafter trained from each of `seeds` (each cached),
    as one report per domain: the seeds' mean tau and their per-generation parts
    (`evaluation.seed_mean`), what the verdicts' intervals resample seed by seed. The seeds the
    cache lacks train first, at the same time (`load_or_train_seeds`)."""
    recipe = recipe or world.profile.drafter
    if any(not cache.contains(*_acceptance_entry(world, kind, n_prompts, samples, recipe, None, seed),
                              builder=__name__) for seed in seeds):
        load_or_train_seeds(world, [kind], recipe, seeds)
    return evaluation.seed_mean([measured_acceptance(world, kind, n_prompts, samples, recipe, seed=seed)
                                 for seed in seeds])


def measured_kinds(world: ToyWorld, recipes: dict[str, DrafterRecipe], n_prompts: int, samples: int,
                   seeds: Sequence[int] = (0,), desc: str = "acceptance") -> dict[str, dict[str, evaluation.DomainAcceptance]]:
    """`measured_seeds` of each kind of `recipes` with its recipe, {kind: report}, under one bar.
    What the cache lacks trains first, every kind and seed of one recipe at once
    (`load_or_train_seeds`: on a CPU, as many single-thread processes as cores, none idle
    while another kind waits its turn)."""
    with progress(total=len(recipes), desc=desc) as bar:
        by_recipe: dict[DrafterRecipe, list[str]] = {}
        for kind, recipe in recipes.items():
            if any(not cache.contains(*_acceptance_entry(world, kind, n_prompts, samples, recipe, None, seed),
                                      builder=__name__) for seed in seeds):
                by_recipe.setdefault(recipe, []).append(kind)
        for recipe, kinds in by_recipe.items():
            load_or_train_seeds(world, kinds, recipe, seeds)
        measured = {}
        for kind, recipe in recipes.items():
            measured[kind] = measured_seeds(world, kind, n_prompts, samples, recipe, seeds)
            bar.update()
    return measured


def rollout_records(world: ToyWorld, kind: str = "dspark-confidence", recipe: DrafterRecipe | None = None,
                    study: ConfidenceStudy | None = None, seed: int = 0
                    ) -> tuple[Rounds, dict[str, evaluation.DomainAcceptance]]:
    """The recorded rollouts of the `kind` drafter fine-tuned from the trained
    DSpark-Markov (`measured_acceptance` with `world.profile.confidence`'s sizes): the record of every
    full block (confidence logits z_1..z_gamma, accepted count, domain), which calibration is fitted
    on and the serving simulator replays, and the per-domain acceptance report it comes from."""
    recipe, study = recipe or world.profile.drafter, study or world.profile.confidence
    report = measured_acceptance(world, kind, study.rollout_prompts, study.rollout_samples, recipe,
                                 base_kind="dspark-markov", seed=seed)
    records = Rounds.concat([r.record for r in report.values()]).full_blocks(recipe.gamma)
    return records, report
