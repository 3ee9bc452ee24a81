"""The engine's cached path against the target's own greedy `generate`, runnable under any
installed transformers (tests/test_transformers_range.py runs it in this process at the
book's pin and in a subprocess on the transformers-5.10 overlay, .venv-tf510).

`python tests/engine_check.py` prints one JSON object: the transformers version and what
each check found. Every check raises AssertionError when it fails.
"""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dspark_lite import kvcache  # noqa: E402
from dspark_lite.dspark import DSparkDrafter  # noqa: E402
from dspark_lite.hidden_drafter import DrafterConfig  # noqa: E402
from dspark_lite.baselines import ModelDrafter, autoregressive_generate  # noqa: E402
from dspark_lite.kvcache import check_kv_cache  # noqa: E402
from dspark_lite.speculative import speculative_generate  # noqa: E402

VOCAB, GAMMA, NEW_TOKENS = 64, 4, 40
PROMPTS = [[5, 17, 33, 2, 40, 9], [11], [60, 3, 3, 27, 45, 12, 8, 50, 21]]


def tiny_target(seed: int = 0) -> Qwen3ForCausalLM:
    """A random 3-layer Qwen3 with a sharpened LM head (so greedy continuations vary)."""
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model


def noisy_copy(model: Qwen3ForCausalLM, seed: int, noise: float) -> Qwen3ForCausalLM:
    """A drafter that agrees with `model` often but not always (also used by test_speculative)."""
    torch.manual_seed(seed)
    drafter = copy.deepcopy(model)
    with torch.no_grad():
        for parameter in drafter.parameters():
            parameter.add_(noise * parameter.std() * torch.randn_like(parameter))
    return drafter


def hf_greedy(target: Qwen3ForCausalLM, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """The target's own greedy generation (transformers' `generate`, its own cache)."""
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        return target.generate(prompt[None], generation_config=config)[0, prompt.shape[0]:]


def run_checks() -> dict:
    """All checks on one tiny target; returns what they measured."""
    torch.set_num_threads(1)
    target = tiny_target()
    drafters = {
        "dspark": DSparkDrafter(target, DrafterConfig((0, 2), mask_token_id=VOCAB - 1, gamma=GAMMA,
                                                     num_layers=1, head_rank=8), seed=1).eval(),
        "target itself": ModelDrafter(target),  # accepts everything: no round removes a position
        "noisy copy": ModelDrafter(noisy_copy(target, seed=1, noise=0.3)),
    }
    report = {"transformers": transformers.__version__, "cache_keyword": kvcache.CACHE_KEYWORD, "accepted": {}}
    report["kv_check_tv"] = max(check_kv_cache(target, torch.tensor(p)) for p in PROMPTS if len(p) >= 3)
    for prompt in map(torch.tensor, PROMPTS):
        expected = hf_greedy(target, prompt, NEW_TOKENS)
        assert expected.shape == (NEW_TOKENS,), f"generate returned {tuple(expected.shape)} tokens"
        cached = autoregressive_generate(target, prompt, NEW_TOKENS, 0.0, None)
        uncached = autoregressive_generate(target, prompt, NEW_TOKENS, 0.0, None, use_cache=False)
        assert torch.equal(cached, expected) and torch.equal(uncached, expected), "target-only decoding differs"
        for name, drafter in drafters.items():
            rollout = speculative_generate(target, drafter, prompt, NEW_TOKENS, GAMMA, 0.0, None)
            assert torch.equal(rollout.tokens, expected), (
                f"{name}: speculative greedy output differs from generate's on transformers "
                f"{transformers.__version__}: {rollout.tokens.tolist()} vs {expected.tolist()}")
            report["accepted"][name] = report["accepted"].get(name, 0) + int(rollout.rounds.accepted.sum())
    assert report["accepted"]["target itself"] > 0 and report["accepted"]["noisy copy"] > 0
    return report


if __name__ == "__main__":
    print(json.dumps(run_checks()))
