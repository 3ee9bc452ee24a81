"""The toy world's regime experiments (chapter 01's regime table; Reproduction notes).

Builds a candidate world (target shape, layers read, drafter width, chat skew), then measures
what decides the drafters' ordering: the target's training time and reply entropy, a logit
lens over its layers, each domain's in-block dependency, the drafters' size beside the
target, and DFlash's and the EAGLE-style drafter's tau after an equal short budget.

    .venv/bin/python scripts/regime_experiments.py --out /tmp/exp/candidate.json \
        --layers 6 --hidden 128 --read 0 2 4 --draft-intermediate 192 --chat-skew 1.0

Trains into $DSPARK_CACHE like the book does (point it at a scratch folder). The experiments
pin the cache's package hash, so that one trained target serves every run while the package is
being edited (the book's cache keys hash the package).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lite.harness.toy import cache, evaluation, regime, zoo
from dspark_lite.harness.toy import corpus
from dspark_lite.harness.toy.knobs import CorpusKnobs
from dspark_lite.harness.toy.profiles import get_profile
from dspark_lite.harness.toy.world import load_toy_world


cache.builder_hash = lambda module, package=None: "regime-experiments"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=None, help="target MLP width (default 3 x hidden)")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--target-steps", type=int, default=1200)
    parser.add_argument("--read", type=int, nargs="+", default=None, help="target layers the drafters read")
    parser.add_argument("--dflash-layers", type=int, default=2)
    parser.add_argument("--eagle-layers", type=int, default=1)
    parser.add_argument("--draft-intermediate", type=int, default=None)
    parser.add_argument("--eagle-intermediate", type=int, default=None)
    parser.add_argument("--eagle-heads", type=int, default=None)
    parser.add_argument("--chat-skew", type=float, default=1.0)
    parser.add_argument("--drafter-steps", type=int, default=600)
    parser.add_argument("--kinds", nargs="*", default=["dflash", "eagle"])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--new-tokens", type=int, default=96)
    args = parser.parse_args()

    full = get_profile("full")
    head_dim = args.hidden // args.heads
    target = replace(full.target, vocab_size=args.vocab, hidden_size=args.hidden, num_layers=args.layers,
                     num_heads=args.heads, num_kv_heads=max(1, args.heads // 2), head_dim=head_dim,
                     intermediate_size=args.intermediate or 3 * args.hidden, steps=args.target_steps)
    read = tuple(args.read) if args.read else tuple(range(args.layers))
    recipe = replace(full.drafter, target_layer_ids=read, dflash_layers=args.dflash_layers,
                     eagle_layers=args.eagle_layers, draft_intermediate_size=args.draft_intermediate,
                     eagle_intermediate_size=args.eagle_intermediate, eagle_num_heads=args.eagle_heads,
                     steps=args.drafter_steps, eagle_steps=args.drafter_steps, dspark_steps=args.drafter_steps)
    profile = replace(full, target=target, draft_lm=replace(full.draft_lm, vocab_size=args.vocab), drafter=recipe)
    knobs = CorpusKnobs(chat_skew=args.chat_skew)
    out: dict = {"args": vars(args) | {"out": str(args.out)}}

    start = time.perf_counter()
    world = load_toy_world(profile, knobs=knobs)
    out["target"] = {"seconds_loaded_or_trained": time.perf_counter() - start, "train_seconds": world.history.seconds,
                     "val_loss": world.history.val_loss[-1] if world.history.val_loss else None,
                     "non_embedding": regime.non_embedding_parameters(world.target)}
    from dspark_lite.harness.toy.target import reply_token_stats
    val = world.split("validation")
    entropy = {}
    for domain in corpus.DOMAINS:
        rows = val.filter(lambda r: r["domain"] == domain).select(range(60))
        entropy[domain] = reply_token_stats(world.target, world.tokenizer, rows["prompt"], rows["reply"])
    out["reply_entropy"] = entropy

    seqs, starts = {}, {}
    for domain in corpus.DOMAINS:
        seqs[domain], starts[domain] = regime.reply_sequences(world, domain, 24)
    out["logit_lens"] = regime.logit_lens(world.target, seqs["chat"] + seqs["math"] + seqs["code"],
                                          starts["chat"] + starts["math"] + starts["code"])
    gen = torch.Generator().manual_seed(0)
    out["dependency"] = {d: regime.block_dependency(world.target, seqs[d], starts[d], generator=gen) for d in corpus.DOMAINS}
    print(json.dumps({k: out[k] for k in ("target", "reply_entropy", "logit_lens", "dependency")}, indent=1), flush=True)

    out["drafters"] = {}
    trained = zoo.load_or_train_drafters(world, args.kinds, recipe)
    for kind in args.kinds:
        drafter, history = trained[kind]
        report = evaluation.measure_acceptance(world, drafter, recipe.gamma, args.prompts, args.new_tokens, desc=kind)
        out["drafters"][kind] = {
            "share": regime.non_embedding_parameters(drafter) / out["target"]["non_embedding"],
            "train_seconds": getattr(history, "seconds", None),
            "tau": {d: round(r.tau, 3) for d, r in report.items()},
            "conditional": {d: r.conditional for d, r in report.items()},
        }
        print(kind, json.dumps(out["drafters"][kind]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
