"""Where the toy target's own uncertainty sits in a domain's replies (Reproduction notes, "Why
math's calibration stays short").

DFlash's math tau sits below the paper's by more than the calibration goal allows, and every
drafter's slot-1 acceptance on math is lower than on code. This measures the target itself: its
next-token entropy (nats) on the validation replies of one domain, teacher-forced, split by what
the next token is: a number, one of the math problems' first names (`knobs.NAMES`), or any other
token; and, for each class, whether the token already appears in the prompt, so that a target
that copies would know it. Qwen3-4B copies a name from the problem; if the toy target guesses it,
the drafters must match a guess.

    .venv/bin/python scripts/target_entropy.py --domain math --replies 60 --out /tmp/entropy.json

Run it in the checkout whose `make book` filled the cache: it loads the book's target from there
(no training when the cache holds it).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dspark_lite.harness.toy import corpus, tokenizer  # noqa: E402
from dspark_lite.harness.toy.knobs import NAMES  # noqa: E402
from dspark_lite.harness.toy.world import load_toy_world  # noqa: E402


def token_class(text: str) -> str:
    word = text.strip()
    if word.isdigit():
        return "number"
    return "name" if word in NAMES else "other"


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", choices=corpus.DOMAINS, default="math")
    parser.add_argument("--replies", type=int, default=60, help="validation replies to score (default 60)")
    parser.add_argument("--out", type=Path, required=True, help="where the JSON of results goes")
    args = parser.parse_args()
    if args.replies < 1:
        parser.error(f"--replies must be >= 1, got {args.replies}")
    args.out.parent.mkdir(parents=True, exist_ok=True)

    world = load_toy_world("full", seed=0)
    rows = list(world.split("validation", (args.domain,)))[:args.replies]
    tok = world.tokenizer
    entropy: dict[tuple[str, bool], list[float]] = defaultdict(list)
    for row in rows:
        chat = tokenizer.format_chat(row["prompt"])
        prompt_ids = tok(chat)["input_ids"]
        ids = tok(chat + row["reply"])["input_ids"]
        logp = world.target(torch.tensor([ids])).logits[0].float().log_softmax(-1)  # [T, V]
        h = -(logp.exp() * logp).sum(-1)  # [T]: the entropy of the next token at each position
        prompt_words = {w.strip(".,?!") for w in row["prompt"].split()}
        for i in range(len(prompt_ids) - 1, len(ids) - 1):
            text = tok.decode([ids[i + 1]])
            entropy[(token_class(text), text.strip() in prompt_words)].append(float(h[i]))
    total = sum(sum(v) for v in entropy.values())
    n = sum(len(v) for v in entropy.values())
    out = {"domain": args.domain, "replies": len(rows), "tokens": n, "mean_entropy": total / n,
           "uniform_guess_among_names": float(np.log(world.knobs.math_names)), "classes": {}}
    for (cls, in_prompt), values in sorted(entropy.items()):
        out["classes"][f"{cls}, {'in the prompt' if in_prompt else 'not in the prompt'}"] = {
            "tokens": len(values), "mean_entropy": float(np.mean(values)), "share_of_entropy": sum(values) / total}
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
