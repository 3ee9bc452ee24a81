"""What issue 44's refactor must leave unchanged, measured on tiny models: every drafter's loss
over a short training run, the tokens the engine commits with it (greedy and sampled at a fixed
seed), DSpark's confidences, and the scheduler's choices (synchronous and asynchronous).

`python tests/behaviour_pin.py` writes tests/fixtures/behaviour_pin.json; it was written once,
on the tree before the refactor (commit 79f96dd), and `test_behaviour_pin` holds today's tree to
it. Only `build` below follows the package's API; everything measured goes through the public
calls a chapter makes.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dspark_lite import dflash, dspark, eagle, runtime, scheduler  # noqa: E402
from dspark_lite.hidden_drafter import DrafterConfig  # noqa: E402
from dspark_lite.harness.toy.replies import generate_training_sequences  # noqa: E402
from dspark_lite.speculative import speculative_generate  # noqa: E402
from dspark_lite.stepcurve import StepCurve  # noqa: E402
from dspark_lite.training import DrafterTrainConfig, train_drafter  # noqa: E402

FIXTURE = Path(__file__).with_name("fixtures") / "behaviour_pin.json"
VOCAB, GAMMA, LAYER_IDS, MASK_ID = 48, 4, (0, 2), 47
KINDS = ("dflash", "eagle", "dspark-markov", "dspark-rnn", "dspark-confidence")


def tiny_target() -> Qwen3ForCausalLM:
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                         tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    return model


def build(kind: str, target: Qwen3ForCausalLM, seed: int = 1):
    """An untrained drafter of `kind` (the one place that follows the package's API)."""
    if kind == "eagle":
        return eagle.EagleDrafter(target, DrafterConfig(LAYER_IDS, gamma=GAMMA), seed=seed)
    if kind == "dflash":
        return dflash.DFlashDrafter(target, DrafterConfig(LAYER_IDS, gamma=GAMMA, mask_token_id=MASK_ID, num_layers=2),
                                    seed=seed)
    head = "rnn" if kind == "dspark-rnn" else "markov"
    cfg = DrafterConfig(LAYER_IDS, gamma=GAMMA, mask_token_id=MASK_ID, num_layers=2, head_type=head, head_rank=8,
                        confidence_head=kind == "dspark-confidence")
    return dspark.DSparkDrafter(target, cfg, seed=seed)


def measure() -> dict:
    """The pinned quantities, in float32: the fixture was written on a CPU without AMX, where no
    training matmul runs in bf16 autocast, so on a CPU with AMX (or a GPU) autocast is held off here
    (`runtime.bf16_autocast_pays`), and the pin compares the same arithmetic on every machine."""
    original = runtime.bf16_autocast_pays
    runtime.bf16_autocast_pays = lambda device, wide=False: False
    try:
        return _measure()
    finally:
        runtime.bf16_autocast_pays = original


def _measure() -> dict:
    torch.set_num_threads(1)
    target = tiny_target()
    tokenizer = type("Tok", (), {"eos_token_id": None, "pad_token_id": 0})()
    prompts = [torch.randint(1, VOCAB - 1, (4 + i % 3,), generator=torch.Generator().manual_seed(40 + i))
               for i in range(12)]
    data = generate_training_sequences(target, tokenizer, prompts, 14, 1.0, torch.Generator().manual_seed(0),
                                       batch_size=12)
    cfg = DrafterTrainConfig(steps=6, sequences_per_batch=4, anchors_per_sequence=6, lr=1e-2, warmup_steps=1)
    out: dict = {"drafters": {}}
    for kind in KINDS:
        drafter = build(kind, target)
        history = train_drafter(drafter, target, data, cfg, seed=3)
        drafter.eval()
        rollouts = {}
        for name, temperature, seed in (("greedy", 0.0, None), ("sampled", 1.0, 11)):
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            rollout = speculative_generate(target, drafter, prompts[0], 24, GAMMA, temperature, generator)
            rollouts[name] = rollout.tokens.tolist()
            if kind == "dspark-confidence":
                rollouts[name + " confidences"] = np.nan_to_num(rollout.rounds.logits, nan=-99.0).tolist()
        entry = {"loss": [float(x) for x in history.loss], "tokens": rollouts}
        out["drafters"][kind] = entry
    rng = np.random.default_rng(5)
    curve = StepCurve((1, 2, 4, 8, 16, 32), (1.0, 0.99, 0.97, 0.9, 0.7, 0.45))
    current = rng.uniform(0.3, 1.0, (6, GAMMA)).cumprod(-1)
    stale = np.clip(current + rng.normal(0, 0.05, current.shape), 0, 1)
    out["schedule"] = np.asarray(scheduler.schedule(current, curve)).tolist()
    out["asynchronous_schedule"] = np.asarray(scheduler.asynchronous_schedule(current, curve, stale)).tolist()
    return out


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(measure(), indent=1) + "\n")
    print(FIXTURE.read_text()[:600])
