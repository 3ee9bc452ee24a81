"""The book's drafter loss against the paper's (Reproduction notes, "Which loss trains").

The full profile trains every drafter on CE + TV with position weights exp(-(k-1)/gamma); the
paper and DeepSpec use 0.1 CE + 0.9 TV with exp(-(k-1)/4). This trains DFlash and DSpark-Markov
from one seed with each loss on the book's world and replies, then measures what the chapters
measure: tau per domain on the held-out prompts (chapter 03's protocol), the per-slot fall from
slot 1 to slot gamma on held-out target replies, and DSpark-Markov's macro gain over DFlash.

    .venv/bin/python scripts/loss_experiment.py --out /tmp/loss.json

Run it in the checkout whose `make book` filled the cache: the cache's keys hash the package, so
the same code finds the book's target, replies and book-loss drafters there and trains only the
paper-loss pair (two drafters, about the time of one pair in chapter 03).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lite.harness.book import verdicts
from dspark_lite.harness.toy import corpus, zoo
from dspark_lite.harness.toy.evaluation import slot_acceptance
from dspark_lite.harness.toy.world import load_toy_world

KINDS = ("dflash", "dspark-markov")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the JSON of results goes")
    parser.add_argument("--seed", type=int, default=0, help="the drafters' training seed (default 0)")
    args = parser.parse_args()
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    args.out.parent.mkdir(parents=True, exist_ok=True)

    world = load_toy_world("full", seed=0)
    book = world.profile.drafter
    recipes = {"book": book, "paper": replace(book, ce_weight=0.1, tv_weight=0.9, loss_decay=4.0)}
    heldout = {d: zoo.heldout_replies(world, d, book) for d in corpus.DOMAINS}
    parts, out = {}, {"seed": args.seed, "recipes": {k: {"ce_weight": r.ce_weight, "tv_weight": r.tv_weight,
                                                         "loss_decay": r.loss_decay} for k, r in recipes.items()}}
    for label, recipe in recipes.items():
        trained = zoo.load_or_train_drafters(world, KINDS, recipe, seed=args.seed)
        for kind, (drafter, history) in trained.items():
            report = zoo.measured_acceptance(world, kind, recipe.eval_prompts, recipe.eval_samples, recipe, seed=args.seed)
            parts[(label, kind)] = {d: report[d].per_generation for d in corpus.DOMAINS}
            slots = {d: slot_acceptance(drafter, world.target, heldout[d]) for d in corpus.DOMAINS}  # [replies, gamma]
            out[f"{label}/{kind}"] = {
                "tau": {d: report[d].tau for d in corpus.DOMAINS},
                "per_slot_fall": {d: verdicts.mean_interval(s[:, 0] - s[:, -1]).text(3) for d, s in slots.items()},
                "train_seconds": history.seconds,
            }
        out[f"{label}/macro_gain_markov_over_dflash"] = str(verdicts.macro_gain(parts[(label, "dspark-markov")],
                                                                                parts[(label, "dflash")]))
    for kind in KINDS:  # the same prompts and rollout seeds: paired
        out[f"paper_minus_book/{kind}"] = {d: str(verdicts.tau_difference(parts[("paper", kind)][d], parts[("book", kind)][d]))
                                           for d in corpus.DOMAINS}
    args.out.write_text(json.dumps(out, indent=1))
    for key, value in out.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
