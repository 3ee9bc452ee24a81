"""Wall-clock races between decoding methods on the same target and prompts (chapter 02).

Not a timed test: a measurement the chapter runs and writes to the results folder.
"""
from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Sequence

import torch
from transformers import GenerationConfig, PreTrainedModel

from ...baselines import autoregressive_generate
from ...speculative import speculative_generate

Decoder = Callable[[torch.Tensor], torch.Tensor]


def target_only(target: PreTrainedModel, max_new_tokens: int, temperature: float, eos: int | Sequence[int] | None,
                generator: torch.Generator) -> Decoder:
    """Target-only decoding with the KV cache (`eos`: one end id or several)."""
    return lambda ids: autoregressive_generate(target, ids, max_new_tokens, temperature, generator, eos)


def ours(target: PreTrainedModel, drafter, max_new_tokens: int, gamma: int, temperature: float,
         eos: int | Sequence[int] | None, generator: torch.Generator) -> Decoder:
    """Our speculative engine with any Drafter, as a race runs it: no phase timer, no
    per-round draft validation (both off by default in `speculative_generate`)."""
    return lambda ids: speculative_generate(target, drafter, ids, max_new_tokens, gamma, temperature, generator, eos).tokens


# The values that switch each of transformers' logits processors off. Anything left None in a
# GenerationConfig is filled from the model's own generation config (Qwen3-4B's: top-k 20, top-p
# 0.95, temperature 0.6), so plain sampling at T must say "off" explicitly.
SAMPLING_OFF: dict[str, Any] = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "epsilon_cutoff": 0.0,
                                "eta_cutoff": 0.0, "repetition_penalty": 1.0, "no_repeat_ngram_size": 0}


def generation_config(max_new_tokens: int, temperature: float, eos: int | Sequence[int] | None, pad: int | None,
                      **extra: Any) -> GenerationConfig:
    """transformers' GenerationConfig for plain sampling at `temperature` (greedy at 0), every
    warper off (SAMPLING_OFF), stopping on any of the end ids `eos`; `pad` None pads with the
    first end id. `extra`: further fields (the assistant's, for assisted generation)."""
    pad = pad if pad is not None else (eos if isinstance(eos, int) or eos is None else list(eos)[0])
    sampling = dict(do_sample=True, temperature=temperature, **SAMPLING_OFF) if temperature > 0 else dict(do_sample=False)
    return GenerationConfig(max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad, **sampling, **extra)


def assisted(target: PreTrainedModel, draft_model: PreTrainedModel, max_new_tokens: int, gamma: int,
             temperature: float, eos: int | Sequence[int] | None, pad: int) -> Decoder:
    """transformers' assisted generation with a fixed number of draft tokens per round, sampling
    at `temperature` with every warper off (greedy at 0)."""
    config = generation_config(max_new_tokens, temperature, eos, pad, num_assistant_tokens=gamma,
                               num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)

    def decode(ids: torch.Tensor) -> torch.Tensor:
        with without_assistant_config_notice():
            out = target.generate(ids[None], generation_config=config, assistant_model=draft_model)
        return out[0, ids.shape[0]:]

    return decode


class _AssistantConfigNotice(logging.Filter):
    """transformers' own assistant loop (AssistedCandidateGenerator, 5.x) calls the draft model's
    `generate` with a `generation_config` plus `max_new_tokens`, `min_new_tokens` and `use_cache`,
    and transformers then warns about that call as deprecated. The call is not ours and we cannot
    change it; that one notice is dropped, every other warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Passing `generation_config` together with")


@contextmanager
def without_assistant_config_notice() -> Iterator[None]:
    """Drop transformers' notice about its own assistant call (`_AssistantConfigNotice`) inside
    the block; every other warning of that logger still shows."""
    logger, notice = logging.getLogger("transformers.generation.utils"), _AssistantConfigNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


@torch.inference_mode()
def race(decoders: dict[str, Decoder], prompts: list[torch.Tensor], repeats: int = 5) -> dict[str, dict[str, float]]:
    """Tokens per second of each decoder over all prompts, median of `repeats` passes.

    The decoders take turns on every prompt, the first one alternating from prompt to prompt,
    so the machine's drifts in speed (seconds to minutes long on a shared CPU) hit all alike.
    """
    if repeats < 1 or not prompts:
        raise ValueError(f"need repeats >= 1 and at least one prompt, got {repeats} and {len(prompts)}")
    names = list(decoders)
    speeds: dict[str, list[float]] = {name: [] for name in names}
    tokens: dict[str, int] = {}
    for _ in range(repeats):
        seconds, counts = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0)
        for index, ids in enumerate(prompts):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                counts[name] += len(decoders[name](ids))
                seconds[name] += time.perf_counter() - start
        for name in names:
            speeds[name].append(counts[name] / seconds[name])
        tokens = counts
    return {name: {"tokens_per_s": statistics.median(v), "tokens_per_s_all": v, "tokens": tokens[name]}
            for name, v in speeds.items()}
