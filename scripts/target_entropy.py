"""Where the toy target's own uncertainty sits in a domain's replies (Reproduction notes, "Why
math's calibration stays short").

DFlash's math tau sits below the paper's by more than the calibration goal allows, and every
drafter's slot-1 acceptance on math is lower than on code. This measures the target itself: its
next-token entropy (nats) on the validation replies of one domain, teacher-forced, split by what
the next token is: a number, one of the math problems' first names (`knobs.NAMES`), or any other
token; and, for each class, whether the token already appears in the prompt, so that a target
that copies would know it. Qwen3-4B copies a name from the problem; if the toy target guesses it,
the drafters must match a guess.

With `--drafter KIND` (a kind of `zoo.BUILDERS`, seed 0) it also says where that drafter loses
acceptance: 1 - TV per slot, teacher-forced on the domain's held-out target replies (as
`evaluation.slot_acceptance`), split by the class of the token the slot predicts, and each class's
share of the acceptance lost (sum of TV).

    .venv/bin/python scripts/target_entropy.py --domain math --replies 60 --out /tmp/entropy.json
    .venv/bin/python scripts/target_entropy.py --domain math --drafter dflash --out /tmp/entropy.json

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
from dspark_lite.harness.toy import corpus, tokenizer, zoo  # noqa: E402
from dspark_lite.harness.toy.knobs import NAMES  # noqa: E402
from dspark_lite.harness.toy.world import ToyWorld, load_toy_world  # noqa: E402
from dspark_lite.hidden_drafter import AnchorBatch  # noqa: E402
from dspark_lite.loss import block_targets  # noqa: E402
from dspark_lite.sampling import total_variation  # noqa: E402
from dspark_lite.training_data import TargetViews  # noqa: E402


def token_class(text: str) -> str:
    word = text.strip()
    if word.isdigit():
        return "number"
    return "name" if word in NAMES else "other"


@torch.inference_mode()
def drafter_loss_by_class(world: ToyWorld, kind: str, domain: str) -> dict:
    """Where drafter `kind` (seed 0, from the cache) loses acceptance on `domain`'s held-out target
    replies: per token class (and whether that token is in the prompt), how many slot predictions,
    1 - TV at slot 1 and at slot gamma, and the class's share of all TV."""
    drafter, _ = zoo.load_or_train_drafter(world, kind)
    drafter.eval()
    replies = zoo.heldout_replies(world, domain)
    views = TargetViews(world.target, replies, drafter.target_layer_ids)
    lost: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(drafter.gamma))
    count: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(drafter.gamma))
    for first in range(0, len(replies), 8):
        indices = range(first, min(first + 8, len(replies)))
        input_ids, lengths, prompt_lengths = replies.batch(indices)
        logits, hidden = views.batch(indices)
        n_anchors = lengths - prompt_lengths
        offsets = torch.arange(int(n_anchors.max()))
        anchors = (prompt_lengths[:, None] - 1 + offsets).minimum(lengths[:, None] - 2)  # [B, A]
        output = drafter.train_logits(AnchorBatch(input_ids, hidden, anchors))
        draft_logits = output if isinstance(output, torch.Tensor) else output.logits  # [B, A, gamma, V]
        targets = block_targets(input_ids, logits, anchors, lengths, drafter.gamma)
        mask = targets.mask & (offsets < n_anchors[:, None])[..., None]  # [B, A, gamma]
        tv = total_variation(torch.softmax(draft_logits.float(), -1), targets.probs)  # [B, A, gamma]
        for b, a, k in mask.nonzero().tolist():
            token = int(input_ids[b, anchors[b, a] + k + 1])
            in_prompt = token in input_ids[b, :prompt_lengths[b]].tolist()
            name = f"{token_class(world.tokenizer.decode([token]))}, {'in the prompt' if in_prompt else 'not in the prompt'}"
            lost[name][k] += float(tv[b, a, k])
            count[name][k] += 1
    total = sum(v.sum() for v in lost.values())
    return {name: {"predictions_per_slot": int(count[name][0]),
                   "slot_1_acceptance": 1 - lost[name][0] / count[name][0],
                   "last_slot_acceptance": 1 - lost[name][-1] / max(count[name][-1], 1),
                   "share_of_lost_acceptance": lost[name].sum() / total} for name in sorted(lost)}


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domain", choices=corpus.DOMAINS, default="math")
    parser.add_argument("--replies", type=int, default=60, help="validation replies to score (default 60)")
    parser.add_argument("--drafter", choices=sorted(zoo.BUILDERS), help="also split this drafter's lost acceptance")
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
    if args.drafter:
        out[f"{args.drafter}_acceptance_by_class"] = drafter_loss_by_class(world, args.drafter, args.domain)
    args.out.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
