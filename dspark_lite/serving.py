"""Serving many requests at once: a measured step curve, batched verification, and a
serving simulator that replays real rollout records under each scheduler (chapter 06).

Three pieces, each standing on the one before:

1. `profile_step_curve` measures SPS(B), target forward steps per second when B
   verification tokens (spread over several requests, each on a cached context) go through
   the target in one forward. The scheduler (Algorithm 1) reads this table.
2. `batched_verify` verifies R requests with different draft lengths l_r (0 allowed) in ONE
   target forward, then runs each request's rows through `speculative.verify_block`, so each
   request gets exactly what one-request verification would give it. `PackedBatch` does the
   same forward the way a server with a varlen kernel does (see below).
3. `simulate` / `sweep` / `replayed_sweep` replay per-block records (confidences
   c[N, gamma], accepted counts, domains) for R concurrent requests under a scheduler,
   advancing a clock by 1 / SPS(B) per step; `sla_gain` reads the best throughput under
   per-user speed SLAs (paper section 5), `versus_best_baseline` and `ordering_agreement`
   compare schedulers within noise.

Padding convention for batched forwards. The cached contexts are LEFT-padded, so that
every row's context ends in the same cache column; the query blocks [anchor + drafts] are
RIGHT-padded to the longest block. A 2-D attention mask [R, context + block] marks real
tokens, and position ids count each row's own tokens (a row with n cached tokens puts its
block at positions n, n+1, ...). Causal attention keeps real block tokens from seeing the
pad tokens that follow them; the pads' logits are computed and thrown away, so a padded
forward costs R * max(1 + l_r) query tokens, not sum(1 + l_r); `time_batched_step` measures
that padded cost.

Packed (varlen) convention. A server with a variable-length kernel avoids the waste: all R
requests' tokens go through the target in ONE row, one after another, and each request's
queries attend only to its own keys. `register_packed_attention` registers such a kernel with
transformers' AttentionInterface, `packed_model` gives a copy of the target that uses it, and a
`PackedBatch` holds the R cached prefixes packed in one cache row; a forward appends every
request's block after them (a `PackedLayout` says where each request's queries and keys sit)
and costs sum(1 + l_r) query tokens. `time_packed_step` measures that cost.
"""
from __future__ import annotations

import copy
import itertools
import json
import math
import platform
import statistics
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import transformers
from torch import Tensor
from tqdm.auto import tqdm
from transformers import AttentionInterface, DynamicCache, PreTrainedModel

from .scheduler import (
    Scheduler, StepCurve, asynchronous_schedule, fixed_length, mtp1, schedule, static_threshold,
)
from .speculative import Draft, verify_block

PAD_ID = 0  # any valid id: padded positions are masked out and their logits dropped


# ========================================================================== timing helpers


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_meta(model: PreTrainedModel) -> dict[str, Any]:
    """Where a measurement ran: device, its name, torch/transformers versions, threads,
    dtype and model size (chapter 06). JSON-ready."""
    device = _model_device(model)
    meta: dict[str, Any] = {
        "device": str(device), "cpu": _cpu_name(), "torch": torch.__version__,
        "transformers": transformers.__version__, "threads": torch.get_num_threads(),
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "attention": str(getattr(model.config, "_attn_implementation", "unknown")),
    }
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
    return meta


def spread_tokens(batch: int, requests: int) -> list[int]:
    """B tokens spread as evenly as possible over min(requests, B) requests: the per-request
    query counts, longest first (chapter 06). spread_tokens(10, 4) == [3, 3, 2, 2]."""
    rows = min(requests, batch)
    return [batch // rows + (r < batch % rows) for r in range(rows)]


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    return int(value)


def _check_positions(model: PreTrainedModel, needed: int) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and needed > limit:
        raise ValueError(f"context plus query block needs {needed} positions, beyond the target's "
                         f"max_position_embeddings = {limit}; use a shorter context_len")


def _prefill(model: PreTrainedModel, rows: int, context_len: int, generator: torch.Generator) -> DynamicCache:
    """A cache holding `rows` random contexts of `context_len` tokens each."""
    device = _model_device(model)
    context = torch.randint(0, model.config.vocab_size, (rows, context_len), generator=generator).to(device)
    cache = DynamicCache(config=model.config)
    model(input_ids=context, cache=cache, use_cache=True)
    return cache


def _first_rows(full: DynamicCache, rows: int, model: PreTrainedModel) -> DynamicCache:
    """A new cache holding a copy of the first `rows` rows of `full`."""
    cache = DynamicCache(config=model.config)
    for index, layer in enumerate(full.layers):
        cache.update(layer.keys[:rows], layer.values[:rows], index)
    return cache


def _timed_forward(model: PreTrainedModel, cache: DynamicCache, counts: Sequence[int], context_len: int,
                   generator: torch.Generator) -> float:
    """Seconds of one forward of right-padded query blocks (counts[r] real tokens in row r)
    on top of a cache of `context_len` tokens per row; the cache is cropped back after."""
    device = _model_device(model)
    rows, width = len(counts), max(counts)
    ids = torch.randint(0, model.config.vocab_size, (rows, width), generator=generator).to(device)
    real = (torch.arange(width)[None] < torch.tensor(counts)[:, None]).long()
    mask = torch.cat([torch.ones(rows, context_len, dtype=torch.long), real], dim=1).to(device)
    positions = (context_len + torch.arange(width, device=device)).expand(rows, width)
    _synchronize(device)
    start = time.perf_counter()
    model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
    _synchronize(device)
    elapsed = time.perf_counter() - start
    cache.crop(-width)  # transformers 5.x: a negative count removes tokens
    return elapsed


@torch.inference_mode()
def _median_seconds(model: PreTrainedModel, layouts: list[list[int]], context_len: int, repeats: int,
                    warmup: int, seed: int, desc: str) -> list[float]:
    """Median seconds of a padded batched forward for each layout (per-request query counts).

    One cache of random contexts is prefilled for the largest row count; layouts with fewer
    rows time on a copy of its first rows. Layouts sharing a row count take turns in a fresh
    random order each repetition (so drifts of the machine hit them alike); row counts are
    timed one after another, largest first, so only one extra copy is alive at a time.
    """
    generator = torch.Generator().manual_seed(seed)
    most = max(len(layout) for layout in layouts)
    full = _prefill(model, most, context_len, generator)
    times: list[list[float]] = [[] for _ in layouts]
    groups: dict[int, list[int]] = {}
    for index, layout in enumerate(layouts):
        groups.setdefault(len(layout), []).append(index)
    progress = tqdm(total=len(layouts) * (warmup + repeats), desc=desc, leave=False)
    for rows in sorted(groups, reverse=True):
        cache = full if rows == most else _first_rows(full, rows, model)
        members = groups[rows]
        for i in range(warmup + repeats):
            for j in torch.randperm(len(members), generator=generator).tolist():
                seconds = _timed_forward(model, cache, layouts[members[j]], context_len, generator)
                if i >= warmup:
                    times[members[j]].append(seconds)
                progress.update()
        del cache
    progress.close()
    return [statistics.median(t) for t in times]


# ========================================================================== 1. cost profile


def profile_step_curve(target: PreTrainedModel, batch_sizes: Sequence[int], requests: int, context_len: int,
                       repeats: int, device: str | torch.device | None = None, seed: int = 0,
                       warmup: int = 2) -> StepCurve:
    """Measure SPS(B), target forward steps per second at B verification tokens (chapter 06).

    For each B the tokens are spread as evenly as possible over min(requests, B) requests
    (`spread_tokens`), each on a cached random context of `context_len` tokens; one padded
    forward of the query blocks [R', ceil(B / R')] is timed (median of `repeats` after
    `warmup` untimed calls) and the cache cropped back. `device` moves the target there first
    (None: where it already is). CUDA is synchronised around each timing. `meta` records the
    device, versions, dtype, context_len, requests, repeats and "kind": "measured".
    """
    sizes = sorted({_check_positive_int(b, "each batch size") for b in batch_sizes})
    if not sizes:
        raise ValueError("batch_sizes is empty; expected at least one batch size >= 1")
    requests, context_len = _check_positive_int(requests, "requests"), _check_positive_int(context_len, "context_len")
    repeats = _check_positive_int(repeats, "repeats")
    if device is not None:
        target.to(device)
    layouts = [spread_tokens(b, requests) for b in sizes]
    _check_positions(target, context_len + max(layout[0] for layout in layouts))
    seconds = _median_seconds(target.eval(), layouts, context_len, repeats, warmup, seed, "profiling SPS(B)")
    meta = {**device_meta(target), "kind": "measured", "context_len": context_len, "requests": requests,
            "repeats": repeats, "warmup": warmup, "seed": seed, "padding": "right-padded query blocks",
            "seconds_per_step": seconds}
    return StepCurve.from_latencies(sizes, seconds, meta)


def time_batched_step(target: PreTrainedModel, R: int, lengths: Sequence[int], context_len: int, repeats: int,
                      seed: int = 0, warmup: int = 2) -> float:
    """Median seconds of one real batched verification forward: R requests, request r
    sending its anchor plus lengths[r] drafted tokens, on cached contexts of `context_len`
    tokens, blocks right-padded to the longest (chapter 06)."""
    R = _check_positive_int(R, "R (requests)")
    if len(lengths) != R or any(int(l) != l or l < 0 for l in lengths):
        raise ValueError(f"lengths must be R = {R} integers >= 0 (drafted tokens per request); got {list(lengths)}")
    layout = [1 + int(l) for l in lengths]
    _check_positions(target, _check_positive_int(context_len, "context_len") + max(layout))
    return _median_seconds(target.eval(), [layout], context_len, _check_positive_int(repeats, "repeats"),
                           warmup, seed, "timing a batched step")[0]


def save_step_curve(curve: StepCurve, path: str | Path) -> Path:
    """Write a step curve as JSON (sizes, steps_per_second, meta); returns the path (chapter 06)."""
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(curve.to_dict(), indent=2) + "\n")
    return path


def load_step_curve(path: str | Path) -> StepCurve:
    """Read a step curve written by `save_step_curve` (chapter 06). FileNotFoundError when
    the file is missing, ValueError when it is not a valid step curve."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no step curve at {path}; profile one with profile_step_curve and "
                                f"save it with save_step_curve")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); expected a step curve from save_step_curve") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}; expected a JSON object with 'sizes' and "
                         f"'steps_per_second'")
    try:
        return StepCurve.from_dict(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a valid step curve: {error}") from None


# ========================================================================== 2. batched verification


def _check_batch(target: PreTrainedModel, contexts: Sequence[Tensor], drafts: Sequence[Draft]) -> None:
    if len(contexts) == 0 or len(contexts) != len(drafts):
        raise ValueError(f"need one draft per context and at least one request; got {len(contexts)} contexts "
                         f"and {len(drafts)} drafts")
    vocab = target.config.vocab_size
    for r, (context, draft) in enumerate(zip(contexts, drafts)):
        if context.dim() != 1 or context.numel() == 0:
            raise ValueError(f"contexts[{r}] must be a non-empty 1-D tensor of ids ending with the anchor; "
                             f"got shape {tuple(context.shape)}")
        if int(context.min()) < 0 or int(context.max()) >= vocab:
            raise ValueError(f"contexts[{r}] holds ids outside [0, {vocab})")
        if draft.tokens.dim() != 1:
            raise ValueError(f"drafts[{r}].tokens must have shape [l_r]; got {tuple(draft.tokens.shape)}")
        if draft.gamma and (int(draft.tokens.min()) < 0 or int(draft.tokens.max()) >= vocab):
            raise ValueError(f"drafts[{r}].tokens holds ids outside [0, {vocab})")


def _padded_prefixes(contexts: Sequence[Tensor], device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Left-padded cached prefixes (each context minus its anchor): ids, mask, positions [R, P]."""
    width = max(c.numel() - 1 for c in contexts)
    ids = torch.full((len(contexts), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(contexts), width, dtype=torch.long)
    positions = torch.zeros(len(contexts), width, dtype=torch.long)
    for r, context in enumerate(contexts):
        n = context.numel() - 1
        if n:
            ids[r, width - n:] = context[:-1].cpu()
            mask[r, width - n:] = 1
            positions[r, width - n:] = torch.arange(n)
    return ids.to(device), mask.to(device), positions.to(device)


def _padded_blocks(contexts: Sequence[Tensor], drafts: Sequence[Draft],
                   device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded blocks [anchor, x_1..x_l]: ids, mask, positions [R, Q]."""
    blocks = [torch.cat([c[-1:].cpu(), d.tokens.cpu().long()]) for c, d in zip(contexts, drafts)]
    width = max(b.numel() for b in blocks)
    ids = torch.full((len(blocks), width), PAD_ID, dtype=torch.long)
    mask = torch.zeros(len(blocks), width, dtype=torch.long)
    for r, block in enumerate(blocks):
        ids[r, :block.numel()] = block
        mask[r, :block.numel()] = 1
    starts = torch.tensor([c.numel() - 1 for c in contexts])
    positions = starts[:, None] + torch.arange(width)[None]
    return ids.to(device), mask.to(device), positions.to(device)


@torch.inference_mode()
def batched_verify_logits(target: PreTrainedModel, contexts: Sequence[Tensor],
                          drafts: Sequence[Draft]) -> list[Tensor]:
    """The target's logits [1 + l_r, V] for each request's block [anchor, drafts], all R
    blocks in ONE forward (chapter 06). contexts[r] is every token so far, ending with the
    anchor; its other tokens are first prefilled into a KV cache (left-padded), standing in
    for the cache a server already holds. The blocks are right-padded; see the module doc."""
    _check_batch(target, contexts, drafts)
    device = _model_device(target)
    cache = DynamicCache(config=target.config)
    prefix_ids, prefix_mask, prefix_positions = _padded_prefixes(contexts, device)
    if prefix_ids.shape[1]:
        target(input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=prefix_positions, cache=cache,
               use_cache=True)
    ids, mask, positions = _padded_blocks(contexts, drafts, device)
    logits = target(input_ids=ids, attention_mask=torch.cat([prefix_mask, mask], dim=1), position_ids=positions,
                    cache=cache, use_cache=True).logits
    return [logits[r, :1 + d.gamma] for r, d in enumerate(drafts)]


def batched_verify(target: PreTrainedModel, contexts: Sequence[Tensor], drafts: Sequence[Draft],
                   temperature: float, generator: torch.Generator | None) -> list[tuple[int, int]]:
    """Verify R requests in one target forward: per request (n_accepted, next_token), as
    `speculative.verify_block` gives on that request's rows (chapter 06). Draft lengths may
    differ, 0 included (a plain target step). Requests are verified in order r = 0..R-1,
    each drawing its uniforms from `generator`, as R one-request calls in that order would."""
    logits = batched_verify_logits(target, contexts, drafts)
    return [verify_block(rows, draft, temperature, generator) for rows, draft in zip(logits, drafts)]


# ========================================================================== 2b. packed (varlen) verification

PACKED_ATTENTION = "dspark_packed_sdpa"  # the name the packed kernel is registered under


@dataclass(frozen=True)
class PackedLayout:
    """Where R requests sit in one packed forward (chapter 06). Q: the longest query block,
    K: the longest key span (cached prefix + new tokens) of a request.

    q_at [R, Q]: the column of the packed row holding request r's i-th new token (0 at padding);
    k_at [R, K]: the cache column of each key request r may see: its cached prefix, then its
        new tokens (clamped into range at padding);
    mask [R, 1, Q, K]: causal attention within the request (padding queries see key 0 only,
        so that no row is empty; their outputs are dropped);
    valid [R, Q]: real, not padding, queries.
    """

    q_at: Tensor
    k_at: Tensor
    mask: Tensor
    valid: Tensor


def pack_layout(q_lens: Sequence[int], prior_lens: Sequence[int],
                device: str | torch.device = "cpu") -> PackedLayout:
    """The layout of one packed forward (chapter 06): request r adds q_lens[r] new tokens after
    prior_lens[r] cached ones. The cache holds the prefixes one after another (request r's from
    column sum(prior_lens[:r])), and the forward appends the new tokens of every request, in
    order, after all of them."""
    q_lens, prior_lens = [int(n) for n in q_lens], [int(n) for n in prior_lens]
    if not q_lens or len(q_lens) != len(prior_lens) or min(q_lens + prior_lens) < 0 or max(q_lens) < 1:
        raise ValueError(f"q_lens and prior_lens must be equally long lists of counts >= 0, with at least one "
                         f"new token; got q_lens = {q_lens}, prior_lens = {prior_lens}")
    column = lambda counts: torch.tensor(counts, device=device)[:, None]
    q_base, q_start = sum(prior_lens), column(np.cumsum([0] + q_lens[:-1]).tolist())
    prior, prior_at = column(prior_lens), column(np.cumsum([0] + prior_lens[:-1]).tolist())
    i = torch.arange(max(q_lens), device=device)[None]
    valid = i < column(q_lens)
    j = torch.arange(max(p + n for p, n in zip(prior_lens, q_lens)), device=device)[None]
    k_at = torch.where(j < prior, prior_at + j, q_base + q_start + j - prior)
    mask = (j[:, None, :] <= (prior + i)[:, :, None]) & valid[:, :, None]
    mask[:, :, 0] |= ~valid  # padding queries see one key (no NaN); their outputs are dropped
    return PackedLayout(torch.where(valid, q_start + i, 0), k_at.clamp(max=q_base + sum(q_lens) - 1),
                        mask[:, None], valid)


def packed_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor,
                     attention_mask: Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     packed_layout: PackedLayout | None = None, **kwargs: Any) -> tuple[Tensor, None]:
    """Varlen attention (chapter 06): the R requests' tokens share ONE row; each request's
    queries attend to its own keys only, as `packed_layout` says (one batched SDPA call over a
    per-request gather). transformers' own mask is ignored. Registered by
    `register_packed_attention`; the layout reaches it as a keyword of the model's forward."""
    if packed_layout is None:
        raise ValueError("packed attention needs packed_layout=...; run the model through PackedBatch")
    layout = packed_layout
    q = query[0][:, layout.q_at].transpose(0, 1)                          # [R, heads, Q, d]
    k, v = (x[0][:, layout.k_at].transpose(0, 1) for x in (key, value))   # [R, kv heads, K, d]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask, scale=scaling, enable_gqa=True)
    packed = query.new_empty(query.shape[2], query.shape[1], query.shape[3])
    packed[layout.q_at[layout.valid]] = out.transpose(1, 2)[layout.valid]
    return packed[None], None


def register_packed_attention() -> str:
    """Register `packed_attention` with transformers' AttentionInterface (idempotent); returns
    its name, PACKED_ATTENTION (chapter 06)."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    return PACKED_ATTENTION


def packed_model(target: PreTrainedModel) -> PreTrainedModel:
    """A copy of the target whose attention is the packed varlen kernel (chapter 06). A copy,
    so the target itself keeps its attention for padded and one-request forwards."""
    model = copy.deepcopy(target)
    model.set_attn_implementation(register_packed_attention())
    return model.eval()


def _check_packed(model: PreTrainedModel) -> None:
    if getattr(model.config, "_attn_implementation", None) != PACKED_ATTENTION:
        raise ValueError(f"the model must use the packed attention kernel, but it uses "
                         f"{getattr(model.config, '_attn_implementation', None)!r}; pass packed_model(target)")


@dataclass(eq=False)
class PackedBatch:
    """R requests' cached prefixes, packed one after another in ONE row of a KV cache, ready
    for varlen verification forwards (chapter 06). Build it with `PackedBatch.prefill`;
    `forward` leaves the cache as it found it, so one batch serves many timed steps."""

    model: PreTrainedModel
    cache: DynamicCache
    lens: list[int]

    @classmethod
    @torch.inference_mode()
    def prefill(cls, model: PreTrainedModel, prefixes: Sequence[Tensor]) -> PackedBatch:
        """Cache every request's prefix (1-D ids, empty allowed) with one packed forward of a
        `packed_model`."""
        _check_packed(model)
        if not prefixes or any(p.dim() != 1 for p in prefixes):
            raise ValueError("prefixes must be a non-empty list of 1-D id tensors (one per request)")
        lens = [int(p.numel()) for p in prefixes]
        _check_positions(model, max(lens))
        cache, device = DynamicCache(config=model.config), _model_device(model)
        if sum(lens):
            positions = torch.cat([torch.arange(n) for n in lens])[None].to(device)
            model(input_ids=torch.cat([p.cpu() for p in prefixes])[None].to(device), position_ids=positions,
                  cache=cache, use_cache=True, packed_layout=pack_layout(lens, [0] * len(lens), device))
        return cls(model, cache, lens)

    def layout(self, q_lens: Sequence[int]) -> PackedLayout:
        """The layout of a forward adding q_lens[r] tokens to request r."""
        if len(q_lens) != len(self.lens):
            raise ValueError(f"need one block per request ({len(self.lens)}); got {len(q_lens)}")
        _check_positions(self.model, max(n + int(q) for n, q in zip(self.lens, q_lens)))
        return pack_layout(q_lens, self.lens, _model_device(self.model))

    @torch.inference_mode()
    def forward(self, blocks: Sequence[Tensor], layout: PackedLayout | None = None) -> list[Tensor]:
        """Logits [len(blocks[r]), V] of every request's block (each >= 1 token), all in ONE
        packed forward on top of the cached prefixes; the cache is cropped back after.
        `layout`: `self.layout` of the block lengths, precomputed (for timing) or None."""
        q = [int(b.numel()) for b in blocks]
        layout = self.layout(q) if layout is None else layout
        device = _model_device(self.model)
        positions = torch.cat([torch.arange(n, n + m) for n, m in zip(self.lens, q)])[None].to(device)
        logits = self.model(input_ids=torch.cat([b.cpu() for b in blocks])[None].to(device), position_ids=positions,
                            cache=self.cache, use_cache=True, packed_layout=layout).logits[0]
        self.cache.crop(-sum(q))  # transformers 5.x: a negative count removes tokens
        return list(logits.split(q))


def packed_verify_logits(model: PreTrainedModel, contexts: Sequence[Tensor], drafts: Sequence[Draft]) -> list[Tensor]:
    """`batched_verify_logits` with the varlen kernel (chapter 06): the logits [1 + l_r, V] of
    every request's block [anchor, drafts], all R blocks packed in ONE forward of a
    `packed_model`, on the packed cache of each context minus its anchor."""
    _check_batch(model, contexts, drafts)
    batch = PackedBatch.prefill(model, [c[:-1] for c in contexts])
    return batch.forward([torch.cat([c[-1:].cpu(), d.tokens.cpu().long()]) for c, d in zip(contexts, drafts)])


def time_packed_step(batch: PackedBatch, lengths: Sequence[int], repeats: int, warmup: int = 2,
                     seed: int = 0) -> float:
    """Median seconds of one real packed (varlen) verification forward (chapter 06): request r
    of `batch` sends its anchor plus lengths[r] drafted tokens (random ids). The layout is
    built once, untimed; CUDA is synchronised around each timing."""
    if len(lengths) != len(batch.lens) or any(int(l) != l or l < 0 for l in lengths):
        raise ValueError(f"lengths must be R = {len(batch.lens)} integers >= 0 (drafted tokens per request); "
                         f"got {list(lengths)}")
    repeats = _check_positive_int(repeats, "repeats")
    generator = torch.Generator().manual_seed(seed)
    blocks = [torch.randint(0, batch.model.config.vocab_size, (1 + int(l),), generator=generator) for l in lengths]
    layout, device = batch.layout([b.numel() for b in blocks]), _model_device(batch.model)
    times = []
    for _ in range(warmup + repeats):
        _synchronize(device)
        start = time.perf_counter()
        batch.forward(blocks, layout)
        _synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:])


# ========================================================================== 3. serving simulator


@dataclass(frozen=True)
class BlockRecords:
    """Real per-block rollout records (chapter 06): for N full blocks of gamma drafted tokens,
    the confidences c[N, gamma] in (0, 1], how many drafted tokens of the FULL block survived
    verification n_accepted[N] in 0..gamma, and each block's domain label[N]. Arrays are
    stored read-only; a single string for `domains` labels every block."""

    confidences: np.ndarray
    n_accepted: np.ndarray
    domains: np.ndarray

    def __post_init__(self) -> None:
        c = _checked_record_confidences(self.confidences)
        n = _checked_accepted(self.n_accepted, c.shape)
        d = _checked_domains(self.domains, c.shape[0])
        for name, array in (("confidences", c), ("n_accepted", n), ("domains", d)):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def gamma(self) -> int:
        """Drafted tokens per block."""
        return int(self.confidences.shape[1])

    def __len__(self) -> int:
        return int(self.confidences.shape[0])

    @property
    def domain_names(self) -> list[str]:
        """Sorted distinct domains."""
        return sorted(set(self.domains.tolist()))

    def counts(self) -> dict[str, int]:
        """Blocks per domain."""
        names, counts = np.unique(self.domains, return_counts=True)
        return {str(k): int(v) for k, v in zip(names, counts)}

    @classmethod
    def from_rounds(cls, rounds_by_domain: Mapping[str, Sequence[Any]], gamma: int) -> BlockRecords:
        """Collect `speculative.RoundRecord`s (domain -> rounds) into records, keeping the
        rounds that proposed a full block of `gamma` tokens with confidences (chapter 06)."""
        rows, accepted, domains = [], [], []
        for domain, rounds in rounds_by_domain.items():
            for record in rounds:
                if record.proposed == gamma and record.confidences is not None:
                    rows.append(np.asarray(record.confidences, dtype=np.float64).reshape(gamma))
                    accepted.append(record.accepted)
                    domains.append(domain)
        if not rows:
            raise ValueError(f"no round proposed a full block of gamma = {gamma} tokens with confidences")
        return cls(np.stack(rows), np.array(accepted), np.array(domains))


def _checked_record_confidences(confidences: Any) -> np.ndarray:
    try:
        c = np.array(confidences, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"confidences must be numbers shaped (N, gamma): {error}") from None
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError(f"confidences must be shaped (N blocks >= 1, gamma >= 1); got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"confidences must be finite; found {int((~np.isfinite(c)).sum())} NaN/inf values")
    if c.min() <= 0.0 or c.max() > 1.0:
        bad = c[(c <= 0.0) | (c > 1.0)][0]
        raise ValueError(f"confidences must lie in (0, 1]; got {bad}")
    return c


def _checked_accepted(n_accepted: Any, shape: tuple[int, int]) -> np.ndarray:
    n = np.array(n_accepted)
    if n.shape != (shape[0],):
        raise ValueError(f"n_accepted must have one entry per block, shape ({shape[0]},); got shape {n.shape}")
    if n.dtype.kind not in "iuf" or not np.array_equal(n, np.round(n)):
        raise ValueError(f"n_accepted must be integers; got dtype {n.dtype}")
    n = n.astype(np.int64)
    if n.min() < 0 or n.max() > shape[1]:
        raise ValueError(f"n_accepted must lie in 0..gamma = 0..{shape[1]}; got values in {n.min()}..{n.max()}")
    return n


def _checked_domains(domains: Any, size: int) -> np.ndarray:
    d = np.full(size, domains, dtype=object) if isinstance(domains, str) else np.array(domains, dtype=object)
    if d.shape != (size,):
        raise ValueError(f"domains must have one label per block, shape ({size},); got shape {d.shape}")
    if not all(isinstance(x, str) and x for x in d):
        raise ValueError("domains must be non-empty strings")
    return d.astype(str)


@dataclass(frozen=True)
class SimResult:
    """One simulated serving run (chapter 06). throughput: tokens/s over all requests;
    per_user: tokens/s per request (throughput / R); mean_budget: mean drafted tokens l_r
    sent to verification per request and step; batch_per_request: mean B / R = 1 +
    mean_budget; tokens_per_step: mean tokens a request gains per step; expected_throughput:
    the scheduler's own expectation sum_r (1 + sum_{j<=l_r} a_{r,j}) per simulated second."""

    scheduler: str
    R: int
    steps: int
    gamma: int
    throughput: float
    per_user: float
    mean_budget: float
    batch_per_request: float
    tokens_per_step: float
    expected_throughput: float
    seconds: float
    tokens: int

    def as_row(self) -> dict[str, Any]:
        """A flat dict, one DataFrame row."""
        return asdict(self)


SIM_SCHEDULERS = ("dspark", "fixed", "mtp1", "threshold", "threshold-cumulative", "async")


def _stateless(fn: Scheduler) -> Choose:
    return lambda current, stale, curve: fn(current, curve)


Choose = Callable[[np.ndarray, np.ndarray, StepCurve], np.ndarray]  # (current, stale, curve) -> lengths


def resolve_scheduler(scheduler: str | Scheduler) -> tuple[str, Choose]:
    """A scheduler name or callable -> (name, choose(current, stale, curve) -> lengths)
    (chapter 06). Names: "dspark" (Algorithm 1), "fixed" (the whole block), "mtp1",
    "threshold" (cut before the first c_k < 0.5; "threshold:0.7" sets the threshold),
    "threshold-cumulative" (cut before the first prefix survival a_k < 0.5; ":t" likewise) and
    "async" (section 5.2: capacity from the confidences of two steps earlier). A callable
    (confidences, curve) -> lengths is used as is, named by its __name__."""
    if callable(scheduler):
        return getattr(scheduler, "__name__", "custom"), _stateless(scheduler)
    if not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be a name or a callable; got {type(scheduler).__name__}")
    base, _, argument = scheduler.partition(":")
    if base in ("threshold", "threshold-cumulative"):
        try:
            threshold = float(argument) if argument else 0.5
        except ValueError:
            raise ValueError(f"bad threshold in {scheduler!r}; expected e.g. '{base}:0.7'") from None
        return scheduler, _stateless(static_threshold(threshold, cumulative=base == "threshold-cumulative"))
    fixed = {"dspark": schedule, "fixed": fixed_length(), "mtp1": mtp1}
    if base in fixed and not argument:
        return scheduler, _stateless(fixed[base])
    if scheduler == "async":
        return scheduler, lambda current, stale, curve: asynchronous_schedule(stale, current, curve)
    raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(SIM_SCHEDULERS)} "
                     f"(threshold:<t> sets a threshold) or a callable (confidences, curve) -> lengths")


def _domain_pools(records: BlockRecords, domain_mix: Mapping[str, float] | None) -> tuple[list[str], np.ndarray]:
    """Domains and their normalised weights; checks every domain has records."""
    available = records.counts()
    if domain_mix is None:
        domain_mix = available
    if not isinstance(domain_mix, Mapping) or not domain_mix:
        raise ValueError(f"domain_mix must be a non-empty dict domain -> weight; got {domain_mix!r}")
    names = list(domain_mix)
    weights = np.array([domain_mix[name] for name in names], dtype=np.float64)
    if not np.isfinite(weights).all() or weights.min() < 0 or weights.sum() <= 0:
        raise ValueError(f"domain_mix weights must be finite, >= 0, with a positive sum; got {dict(domain_mix)}")
    missing = [name for name, w in zip(names, weights) if w > 0 and name not in available]
    if missing:
        raise ValueError(f"domain(s) {missing} in domain_mix have no records (empty pool); records hold "
                         f"{sorted(available)}")
    return names, weights / weights.sum()


def _request_pools(records: BlockRecords, names: list[str], weights: np.ndarray, requests: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's domain drawn from the mix: (all record indices grouped by domain,
    each request's pool offset, each request's pool size)."""
    pools = [np.flatnonzero(records.domains == name) for name in names]
    order = np.concatenate(pools)
    starts = np.cumsum([0] + [p.size for p in pools[:-1]])
    chosen = rng.choice(len(names), size=requests, p=weights)
    return order, starts[chosen], np.array([p.size for p in pools])[chosen]


def _checked_lengths(lengths: Any, requests: int, gamma: int, name: str) -> np.ndarray:
    l = np.asarray(lengths)
    if l.shape != (requests,) or l.dtype.kind not in "iu" or l.min() < 0 or l.max() > gamma:
        raise ValueError(f"scheduler {name!r} must return {requests} integers in [0, {gamma}]; got {l!r}")
    return l.astype(np.int64)


def _check_sim_args(records: BlockRecords, curve: StepCurve, concurrency: Any, steps: Any,
                    gamma: int | None) -> tuple[int, int, int]:
    if not isinstance(records, BlockRecords):
        raise ValueError(f"records must be BlockRecords; got {type(records).__name__}")
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    requests = _check_positive_int(concurrency, "concurrency R (active requests)")
    steps = _check_positive_int(steps, "steps")
    gamma = records.gamma if gamma is None else _check_positive_int(gamma, "gamma")
    if gamma > records.gamma:
        raise ValueError(f"gamma = {gamma} exceeds the records' block of {records.gamma} drafted tokens")
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need batches of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")
    return requests, steps, gamma


def simulate(records: BlockRecords, scheduler: str | Scheduler, curve: StepCurve, concurrency: int, steps: int,
             domain_mix: Mapping[str, float] | None = None, rng: np.random.Generator | None = None,
             gamma: int | None = None, warmup_steps: int = 2) -> SimResult:
    """Simulate R = `concurrency` requests served for `steps` steps (chapter 06).

    Each request gets a domain drawn from `domain_mix` (None: the records' own mix). Each
    step every request draws one block record of its domain (i.i.d., with `rng`); the
    scheduler picks lengths l_r from the confidences (first `gamma` columns); request r
    gains min(l_r, n_accepted_r) + 1 tokens; the clock advances by 1 / SPS(B) with
    B = sum_r (1 + l_r). The first `warmup_steps` steps run but are not counted; "async"
    needs confidences from two steps earlier, and uses the current ones until they exist
    (only in warm-up with the default 2). Random draws do not depend on the scheduler, so
    schedulers given equal seeds see the same blocks (common random numbers).
    """
    requests, steps, gamma = _check_sim_args(records, curve, concurrency, steps, gamma)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0; got {warmup_steps!r}")
    name, choose = resolve_scheduler(scheduler)
    names, weights = _domain_pools(records, domain_mix)
    rng = np.random.default_rng() if rng is None else rng
    order, offsets, sizes = _request_pools(records, names, weights, requests, rng)
    confidences, accepted = records.confidences[:, :gamma], np.minimum(records.n_accepted, gamma)
    history: deque[np.ndarray] = deque(maxlen=2)
    totals = np.zeros(5)  # tokens, seconds, budget, batch tokens, expected tokens
    for step in range(warmup_steps + steps):
        drawn = order[offsets + rng.integers(0, sizes)]
        current = confidences[drawn]
        stale = history[0] if len(history) == 2 else current
        history.append(current)
        lengths = _checked_lengths(choose(current, stale, curve), requests, gamma, name)
        batch = requests + int(lengths.sum())
        if batch > curve.max_batch:
            raise ValueError(f"scheduler {name!r} built a batch of B = {batch} tokens (R = {requests}), beyond "
                             f"the step curve's largest profiled size {curve.max_batch}; profile larger batches")
        if step >= warmup_steps:
            totals += _step_totals(current, accepted[drawn], lengths, batch, curve)
    return _result(name, requests, steps, gamma, totals)


def _step_totals(current: np.ndarray, accepted: np.ndarray, lengths: np.ndarray, batch: int,
                 curve: StepCurve) -> np.ndarray:
    survival = np.concatenate([np.zeros((current.shape[0], 1)), np.cumsum(np.cumprod(current, axis=1), axis=1)], 1)
    expected = current.shape[0] + survival[np.arange(current.shape[0]), lengths].sum()
    tokens = np.minimum(lengths, accepted).sum() + current.shape[0]
    return np.array([tokens, 1.0 / curve.sps(batch), lengths.sum(), batch, expected])


def _result(name: str, requests: int, steps: int, gamma: int, totals: np.ndarray) -> SimResult:
    tokens, seconds, budget, batch, expected = totals
    throughput = tokens / seconds
    return SimResult(name, requests, steps, gamma, float(throughput), float(throughput / requests),
                     float(budget / (steps * requests)), float(batch / (steps * requests)),
                     float(tokens / (steps * requests)), float(expected / seconds), float(seconds), int(tokens))


def sweep(records: BlockRecords, schedulers: Sequence[str | Scheduler], curve: StepCurve,
          concurrencies: Sequence[int], steps: int, domain_mix: Mapping[str, float] | None = None,
          seed: int = 0, gamma: int | None = None) -> pd.DataFrame:
    """`simulate` over every (scheduler, R): one DataFrame row each, the SimResult fields
    (chapter 06). Cell (scheduler, R) uses rng = default_rng([seed, R]), so all schedulers
    at one R replay the same blocks."""
    if not schedulers or not concurrencies:
        raise ValueError("schedulers and concurrencies must be non-empty")
    grid = list(itertools.product(schedulers, concurrencies))
    rows = [simulate(records, s, curve, R, steps, domain_mix, np.random.default_rng([seed, int(R)]), gamma).as_row()
            for s, R in tqdm(grid, desc="serving sweep", leave=False)]
    return pd.DataFrame(rows)


def sla_gain(df: pd.DataFrame, baseline: str = "mtp1", per_user_slas: Sequence[float] | None = None,
             candidate: str = "dspark") -> pd.DataFrame:
    """Best throughput under per-user speed SLAs (chapter 06; paper section 5).

    For each SLA s, each scheduler's best throughput among its rows with per_user >= s (NaN
    when none meets it), and gain_pct = 100 * (candidate / baseline - 1). None: one SLA at
    each per-user speed the baseline itself reaches (its operating points). One row per SLA.
    """
    for column in ("scheduler", "R", "throughput", "per_user"):
        if column not in df:
            raise ValueError(f"df must come from sweep (column {column!r} missing)")
    present = set(df["scheduler"])
    for name in (baseline, candidate):
        if name not in present:
            raise ValueError(f"scheduler {name!r} not in df; it holds {sorted(present)}")
    if per_user_slas is None:
        per_user_slas = sorted(df.loc[df["scheduler"] == baseline, "per_user"].unique())
    rows = []
    for sla in per_user_slas:
        meeting = df[df["per_user"] >= sla]
        best = meeting.groupby("scheduler")["throughput"].max()
        row = {"per_user_sla": float(sla)}
        row.update({name: float(best.get(name, np.nan)) for name in dict.fromkeys(df["scheduler"])})
        row["gain_pct"] = 100.0 * (row[candidate] / row[baseline] - 1.0)
        rows.append(row)
    return pd.DataFrame(rows)


def replayed_sweep(records: BlockRecords, schedulers: Sequence[str | Scheduler], curve: StepCurve,
                   concurrencies: Sequence[int], steps: int, replays: int,
                   domain_mix: Mapping[str, float] | None = None, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`sweep` repeated over `replays` independent replays of `steps` steps each (chapter 06);
    replay i uses sweep seed `seed * replays + i`. Returns (aggregate, runs): runs holds every
    replay's sweep rows with a `replay` column; aggregate one row per (scheduler, R) with the
    tokens and seconds summed over replays, throughput = tokens / seconds, per_user =
    throughput / R, budget (mean batch tokens per request, 1 + l_r) and its standard error
    across replays budget_se (NaN for one replay), and drafted (mean l_r)."""
    replays = _check_positive_int(replays, "replays")
    runs = pd.concat([sweep(records, schedulers, curve, concurrencies, steps, domain_mix, seed=seed * replays + i)
                      .assign(replay=i) for i in range(replays)])
    grouped = runs.groupby(["scheduler", "R"])
    agg = grouped[["tokens", "seconds"]].sum()
    agg["throughput"] = agg["tokens"] / agg["seconds"]
    agg["per_user"] = agg["throughput"] / agg.index.get_level_values("R")
    agg["budget"] = grouped["batch_per_request"].mean()
    agg["budget_se"] = grouped["batch_per_request"].std(ddof=1) / math.sqrt(replays)
    agg["drafted"] = grouped["mean_budget"].mean()
    return agg.reset_index(), runs


def versus_best_baseline(aggregate: pd.DataFrame, runs: pd.DataFrame, baselines: Sequence[str],
                         candidate: str = "dspark", min_margin: float = 0.01) -> pd.DataFrame:
    """The candidate against the best of `baselines` at every R, within noise (chapter 06).
    `aggregate`, `runs`: from `replayed_sweep`. Noise: two standard errors of the paired
    per-replay throughput difference (0 for one replay). "at least the best, within noise":
    candidate >= best - max(noise, min_margin * best). One row per R."""
    replays = runs["replay"].nunique()
    rows = []
    for R, at in aggregate.groupby("R"):
        at = at.set_index("scheduler")["throughput"]
        best = at[list(baselines)].idxmax()
        per = runs[runs["R"] == R].pivot(index="replay", columns="scheduler", values="throughput")
        noise = 2 * (per[candidate] - per[best]).std(ddof=1) / math.sqrt(replays) if replays > 1 else 0.0
        within = at[candidate] >= at[best] - max(noise, min_margin * at[best])
        rows.append({"R": R, "best baseline": best, candidate: at[candidate], "best": at[best],
                     "gain %": 100 * (at[candidate] / at[best] - 1), "noise %": 100 * noise / at[best],
                     "at least the best, within noise": bool(within)})
    return pd.DataFrame(rows).set_index("R")


def ordering_agreement(table: pd.DataFrame, column: str, reference: str, tie: float) -> pd.DataFrame:
    """Does `column` rank the schedulers the way `reference` does (chapter 06)? For every R
    and every pair of schedulers (in the table's order) that `reference` separates by more
    than the relative gap `tie`, one row: the pair, both relative gaps in % and whether their
    signs agree. `table`: one row per (R, scheduler) with both columns."""
    rows = []
    for R, group in table.groupby("R"):
        at = group.set_index("scheduler")
        for x, y in itertools.combinations(dict.fromkeys(group["scheduler"]), 2):
            predicted = at.loc[x, reference] / at.loc[y, reference] - 1
            if abs(predicted) > tie:
                measured = at.loc[x, column] / at.loc[y, column] - 1
                rows.append({"R": R, "pair": f"{x} vs {y}", "predicted %": 100 * predicted, "real %": 100 * measured,
                             "same order": bool(np.sign(predicted) == np.sign(measured))})
    return pd.DataFrame(rows, columns=["R", "pair", "predicted %", "real %", "same order"])


def real_step_throughput(target: PreTrainedModel, records: BlockRecords, schedulers: Sequence[str | Scheduler],
                         curve: StepCurve, concurrencies: Sequence[int], steps: int, context_len: int, repeats: int,
                         domains: Sequence[str] | None = None, seed: int = 0) -> pd.DataFrame:
    """Real batched verification steps against the cost table's prediction (chapter 06).

    For each R: each request's domain is drawn uniformly from `domains` (None: all the records'
    domains) and R random contexts of `context_len` tokens are cached; then `steps` steps, each
    drawing one record of its domain per request, as `simulate` does. Every scheduler, in a
    fresh random order each step (so drifts of the machine hit them alike), chooses lengths from
    the step's confidences and is credited the tokens sum_r (min(l_r, accepted_r) + 1); its
    step is timed with the varlen kernel (`time_packed_step`) and right-padded
    (`time_batched_step`), median of `repeats` each. One row per (R, scheduler): tokens per
    second predicted by the table (tokens over sum 1 / SPS(B)) and measured with each kernel.
    """
    names = [resolve_scheduler(s) for s in schedulers]
    domains = records.domain_names if domains is None else list(domains)
    pools = {d: np.flatnonzero(records.domains == d) for d in domains}
    if not domains or any(pool.size == 0 for pool in pools.values()):
        raise ValueError(f"domains must be non-empty and each must have records; got {domains}, records hold "
                         f"{records.domain_names}")
    packed = packed_model(target)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for R in tqdm(concurrencies, desc="real batched steps", leave=False):
        R = _check_positive_int(R, "each concurrency R")
        rng = np.random.default_rng([seed, 8, R])
        request_domains = rng.choice(domains, size=R)
        batch = PackedBatch.prefill(packed, [torch.randint(0, target.config.vocab_size, (context_len,),
                                                           generator=generator) for _ in range(R)])
        totals = {name: np.zeros(4) for name, _ in names}  # tokens, predicted s, varlen s, padded s
        for _ in range(_check_positive_int(steps, "steps")):
            drawn = np.array([rng.choice(pools[d]) for d in request_domains])
            c, accepted = records.confidences[drawn], records.n_accepted[drawn]
            for k in rng.permutation(len(names)):
                name, choose = names[k]
                lengths = _checked_lengths(choose(c, c, curve), R, records.gamma, name)
                totals[name] += [(np.minimum(lengths, accepted) + 1).sum(), 1.0 / curve.sps(R + int(lengths.sum())),
                                 time_packed_step(batch, lengths, repeats, seed=seed),
                                 time_batched_step(target, R, lengths.tolist(), context_len, repeats, seed=seed)]
        for name, (tokens, predicted, varlen, padded) in totals.items():
            rows.append({"R": R, "scheduler": name, "predicted (table)": tokens / predicted,
                         "real, varlen kernel": tokens / varlen, "real, padded": tokens / padded})
    return pd.DataFrame(rows)


def sample_block_records(confidences: Any, domains: Any, rng: np.random.Generator) -> BlockRecords:
    """SYNTHETIC records whose acceptances follow their confidences exactly (perfect
    calibration): token k survives with probability c_k given that tokens < k did
    (chapter 06; for tests and exercises, not a measurement)."""
    c = _checked_record_confidences(confidences)
    survived = rng.random(c.shape) < c
    return BlockRecords(c, np.cumprod(survived, axis=1).sum(axis=1), domains)
