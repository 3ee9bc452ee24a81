"""What a forward costs: the target's latency against the number of query tokens (chapter
01), and a drafter's latency against the number of drafted tokens (chapter 03).

Verifying gamma drafted tokens takes ONE target forward over gamma + 1 query tokens on top
of the cached context. On any hardware that forward costs far less than gamma + 1 separate
forwards; this module measures by how much. The scheduler chapter (06) turns the same
measurement into a steps-per-second table SPS(B).
"""
from __future__ import annotations

import statistics
import time

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, PreTrainedModel

from .speculative import Drafter, target_hidden


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def forward_latency_curve(
    model: PreTrainedModel, context_len: int, query_counts: list[int], repeats: int = 10,
    warmup: int = 2, seed: int = 0,
) -> dict[int, float]:
    """Median seconds of one forward of q query tokens on top of a cached context of context_len.

    The context is prefilled once; after each timed call the cache is cropped back to it.
    """
    if context_len < 1 or not query_counts or min(query_counts) < 1:
        raise ValueError(f"need context_len >= 1 and query counts >= 1, got {context_len}, {query_counts}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    context = torch.randint(0, vocab, (1, context_len), generator=generator).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=context, cache=cache, use_cache=True)
    times: dict[int, list[float]] = {q: [] for q in query_counts}
    order = list(query_counts)
    # Round-robin over q in a fresh random order each repeat, so slow drifts of the machine
    # (frequency, other processes) spread over every q instead of biasing a few.
    for i in tqdm(range(warmup + repeats), desc="latency vs query tokens", leave=False):
        for j in torch.randperm(len(order), generator=generator).tolist():
            q = order[j]
            queries = torch.randint(0, vocab, (1, q), generator=generator).to(device)
            positions = torch.arange(context_len, context_len + q, device=device)[None]
            _sync(device)
            start = time.perf_counter()
            model(input_ids=queries, cache=cache, use_cache=True, position_ids=positions)
            _sync(device)
            if i >= warmup:
                times[q].append(time.perf_counter() - start)
            cache.crop(-q)  # transformers 5.x: a negative count removes tokens
    return {q: statistics.median(t) for q, t in times.items()}


def draft_latency_curve(
    drafters: dict[int, Drafter], target: PreTrainedModel, context_ids: torch.Tensor, repeats: int = 10,
    warmup: int = 2, seed: int = 0,
) -> dict[int, float]:
    """Median seconds of one steady-state draft call of gamma tokens, for each gamma in
    `drafters` (gamma -> a drafter able to draft gamma tokens) (chapter 03).

    Each timed call follows a round that accepted nothing: the drafter holds the context
    `context_ids[:-2]`, has drafted once from the anchor `context_ids[-2]`, and received the
    target's hidden state for it (accept(0, ...)); the timed call drafts gamma tokens from
    the anchor `context_ids[-1]`. So it includes what a round adds to the drafter's cache,
    and nothing of the prefill. Gammas take turns in a fresh random order each repetition.
    """
    timed = compare_draft_latency({"draft": drafters}, target, context_ids, repeats, warmup, seed)
    return timed["draft"]


@torch.inference_mode()
def compare_draft_latency(
    drafters: dict[str, dict[int, Drafter]], target: PreTrainedModel, context_ids: torch.Tensor,
    repeats: int = 10, warmup: int = 2, seed: int = 0,
) -> dict[str, dict[int, float]]:
    """`draft_latency_curve` for several drafters at once (name -> gamma -> drafter), taking
    turns in a fresh random order each repetition so that drifts of the machine hit all of
    them alike (chapter 04 times a head's overhead this way); name -> gamma -> median seconds."""
    if context_ids.dim() != 1 or context_ids.shape[0] < 3:
        raise ValueError(f"context_ids must be 1-D with >= 3 tokens, got shape {tuple(context_ids.shape)}")
    entries = [(name, gamma, drafter) for name, curve in drafters.items() for gamma, drafter in curve.items()]
    if repeats < 1 or not entries or min(gamma for _, gamma, _ in entries) < 1:
        raise ValueError(f"need repeats >= 1 and gammas >= 1, got {repeats} and "
                         f"{sorted(gamma for _, gamma, _ in entries)}")
    device = next(target.parameters()).device
    ids = context_ids.to(device)
    length = ids.shape[0] - 2
    layer_sets = {getattr(d, "target_layer_ids", None) for _, _, d in entries}
    hidden_of = {layers: target_hidden(target, ids, layers) for layers in layer_sets}
    generator = torch.Generator().manual_seed(seed)
    times: dict[tuple[str, int], list[float]] = {(name, gamma): [] for name, gamma, _ in entries}
    for i in tqdm(range(warmup + repeats), desc="draft latency vs gamma", leave=False):
        for j in torch.randperm(len(entries), generator=generator).tolist():
            name, gamma, drafter = entries[j]
            hidden = hidden_of[getattr(drafter, "target_layer_ids", None)]
            drafter.start(ids[:length], None if hidden is None else hidden[:length])
            drafter.draft(ids[:length + 1], 1, 1.0, generator)
            drafter.accept(0, None if hidden is None else hidden[length:length + 1])
            _sync(device)
            start = time.perf_counter()
            drafter.draft(ids, gamma, 1.0, generator)
            _sync(device)
            if i >= warmup:
                times[(name, gamma)].append(time.perf_counter() - start)
    return {name: {gamma: statistics.median(times[(name, gamma)]) for gamma in curve} for name, curve in drafters.items()}
