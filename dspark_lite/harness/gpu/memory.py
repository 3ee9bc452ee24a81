"""Chapter 07's memory and costs: peak memory, KV-cache bytes per token, the concurrencies that
fit in the GPU's memory, the step-per-second table Algorithm 1 reads, and the wall-clock race
against transformers' own `generate`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
from transformers import PreTrainedModel, Qwen3ForCausalLM

from ...runtime import device_generator
from ..serving import benchmark, costs
from ..toy.profiles import GpuStudy
from ..toy.replies import encode_prompt
from . import checkpoints
from .released_config import SHARED_KEYS
from .loading import World

# ========================================================================== memory


def peak_memory_gib(device: torch.device) -> float | None:
    """torch.cuda.max_memory_allocated in GiB since the last reset (None on a CPU)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def free_memory_bytes(device: torch.device) -> int | None:
    """Free GPU memory in bytes as the driver reports it (None on a CPU)."""
    return int(torch.cuda.mem_get_info(device)[0]) if device.type == "cuda" else None


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """Keys and values of one token over all layers: 2 x layers x KV heads x head_dim x bytes."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * dtype_bytes


def profile_step_bytes(config: Any, requests: int, gamma: int, context_len: int, dtype_bytes: int) -> int:
    """An upper estimate of the memory one SPS(B) profile at concurrency R = `requests` needs on top
    of the weights: the cache of R contexts plus a block each, the largest verify step's
    full-vocabulary logits (B = R(gamma + 1) rows, in the model dtype and once more in float32) and
    the largest layer's transient activations (prefill of R x context tokens: attention output and
    the MLP's three intermediate tensors)."""
    batch = requests * (gamma + 1)
    kv = kv_bytes_per_token(config, dtype_bytes) * requests * (context_len + gamma + 1)
    logits = batch * config.vocab_size * (dtype_bytes + 4)
    tokens = requests * context_len
    activations = tokens * (4 * config.hidden_size + 3 * config.intermediate_size) * dtype_bytes
    return int(kv + logits + activations)


def affordable_concurrencies(config: Any, wanted: Sequence[int], gamma: int, context_len: int, dtype_bytes: int,
                             free_bytes: int | None, fraction: float = 0.6) -> list[int]:
    """The concurrencies R of `wanted` whose profile fits in `fraction` of the free memory
    (`profile_step_bytes`); all of them when the free memory is unknown (a CPU). Raises when not
    even the smallest fits."""
    if free_bytes is None:
        return sorted(wanted)
    fits = [R for R in sorted(wanted) if profile_step_bytes(config, R, gamma, context_len, dtype_bytes) <= fraction * free_bytes]
    if not fits:
        need = profile_step_bytes(config, min(wanted), gamma, context_len, dtype_bytes)
        raise MemoryError(f"the cost profile at R = {min(wanted)} needs about {need / 2**30:.1f} GiB, more than "
                          f"{fraction:.0%} of the {free_bytes / 2**30:.1f} GiB free; lower profile_context")
    return fits


def profile_costs(world: World, study: GpuStudy, seed: int = 0) -> tuple[dict[int, Any], list[int]]:
    """The scheduler's SPS(B) tables on the target, one per concurrency R that fits in free memory
    (`affordable_concurrencies`); returns (curves, the R values skipped for memory)."""
    dtype_bytes = torch.finfo(world.dtype).bits // 8
    fits = affordable_concurrencies(world.target.config, study.concurrencies, study.gamma, study.profile_context,
                                    dtype_bytes, free_memory_bytes(world.device))
    curves = costs.profile_step_curves(world.target, fits, study.gamma, study.profile_points, study.profile_context,
                                       study.profile_repeats, seed=seed)
    return curves, [R for R in study.concurrencies if R not in fits]


def parameter_count(shapes: Mapping[str, Sequence[int]]) -> int:
    """Total numel of a name -> shape table."""
    return int(sum(np.prod(s, dtype=np.int64) for s in shapes.values()))


def memory_table(target_config: Any, drafter_folders: Mapping[str, str | Path], dtype: torch.dtype,
                 tokens: int) -> pd.DataFrame:
    """GiB of each part of a GPU run, computed from the configs, not measured:
    the target's weights and the drafters' own weights (parameters counted on the `meta` device;
    the embedding and LM-head copies a released drafter file holds are not loaded), and the KV cache
    of one request of `tokens` tokens (prompt plus generation)."""
    dtype_bytes = torch.finfo(dtype).bits // 8
    with torch.device("meta"):
        target = Qwen3ForCausalLM(target_config)
    rows = [{"part": "target weights", "parameters (B)": sum(p.numel() for p in target.parameters()) / 1e9}]
    for kind, folder in drafter_folders.items():
        drafter = checkpoints.build_from_config(folder, target, dtype=dtype)
        shapes = checkpoints.expected_shapes(drafter)
        own = {k: v for k, v in shapes.items() if k not in SHARED_KEYS}
        rows.append({"part": f"{kind} drafter, own weights", "parameters (B)": parameter_count(own) / 1e9})
    frame = pd.DataFrame(rows)
    frame["GiB"] = frame["parameters (B)"] * 1e9 * dtype_bytes / 2**30
    kv = kv_bytes_per_token(target_config, dtype_bytes)
    frame.loc[len(frame)] = {"part": f"KV cache, one request of {tokens} tokens",
                             "parameters (B)": np.nan, "GiB": kv * tokens / 2**30}
    return frame


def memory_display(frame: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """`memory_table` as the page prints it: numbers rounded to `digits`, and "n/a"
    where a part has no parameters (the KV cache), never NaN."""
    shown = frame.set_index("part")
    return pd.DataFrame({name: [("n/a" if not np.isfinite(v) else round(float(v), digits)) for v in column]
                         for name, column in shown.items()}, index=shown.index)


# ========================================================================== wall clock


def hf_generate(target: PreTrainedModel, max_new_tokens: int, temperature: float, eos: int | Sequence[int] | None,
                pad: int | None) -> benchmark.Decoder:
    """transformers' own `generate` (plain sampling at `temperature`: `benchmark.generation_config`),
    the target-only baseline."""
    config = benchmark.generation_config(max_new_tokens, temperature, eos, pad)

    def decode(ids: torch.Tensor) -> torch.Tensor:
        out = target.generate(ids[None], attention_mask=torch.ones_like(ids)[None], generation_config=config)
        return out[0, ids.shape[0]:]

    return decode


def wall_clock(world: World, prompts: Sequence[str], study: GpuStudy, seed: int = 0) -> pd.DataFrame:
    """Tokens/s of target-only decoding (transformers `generate` and our loop) against our engine
    with each drafter, on the same prompts in the same run; median of repeats."""
    generator = device_generator(seed, world.device)
    eos, pad = world.eos_token_ids or None, world.tokenizer.pad_token_id
    decoders = {"target only: transformers generate": hf_generate(world.target, study.race_new_tokens,
                                                                   study.temperature, eos, pad),
                "target only: our loop": benchmark.target_only(world.target, study.race_new_tokens, study.temperature,
                                                               eos, generator)}
    for kind, drafter in world.drafters.items():
        decoders[f"speculative: {kind}"] = benchmark.ours(world.target, drafter, study.race_new_tokens, study.gamma,
                                                          study.temperature, eos, generator)
    ids = [encode_prompt(world.tokenizer, p).to(world.device) for p in prompts]
    speeds = benchmark.race(decoders, ids, study.race_repeats)
    frame = pd.DataFrame({name: {"tokens/s": s["tokens_per_s"], "tokens": s["tokens"]} for name, s in speeds.items()}).T
    frame["speed-up over generate"] = frame["tokens/s"] / frame.loc["target only: transformers generate", "tokens/s"]
    return frame
