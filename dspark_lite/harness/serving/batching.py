"""Batched verification: R requests verified in ONE target forward, padded or packed into a
varlen kernel, and timed (chapter 06b).

`batched_verify` verifies R requests with different draft lengths l_r (0 allowed) in ONE
target forward, then runs each request's rows through `speculative.verify_block`, so each
request gets exactly what one-request verification would give it. `PackedBatch` does the
same forward the way a server with a varlen kernel does (see below). `time_batched_step` and
`time_packed_step` time one such forward; `real_step_throughput` times whole scheduler steps
against the prediction of the cost table (`costs.profile_step_curve`) that the serving
simulator (`simulator.simulate`) runs on.

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
and costs sum(1 + l_r) query tokens. `time_packed_step` measures that cost, and
`profile_varlen_step_curves` turns it into the scheduler's cost tables, one per concurrency R.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface, DynamicCache, PreTrainedModel

from ...checks import lengths_in_range, positive_int
from ...progress import progress
from ...runtime import model_device
from ...training_data import pad
from .costs import (concurrency_batch_sizes, device_meta, load_step_curves, median_step_seconds, save_step_curves,
                    spread_tokens)
from ...kvcache import cache_kwarg, new_cache, remove_tokens
from ...scheduler import Scheduler
from ...stepcurve import StepCurve
from ...record import Rounds
from .simulator import curve_at, resolve_scheduler
from ...speculative import Draft, verify_block
from .timing import check_positions, interleaved_medians, seconds

PAD_ID = 0  # any valid id: padded positions are masked out and their logits dropped


# ========================================================================== 1. padded batched verification


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
    ids, mask = pad([c[:-1].cpu() for c in contexts], PAD_ID, side="left")
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # each row counts its own tokens from 0; pads 0
    return ids.to(device), mask.to(device), positions.to(device)


def _padded_blocks(contexts: Sequence[Tensor], drafts: Sequence[Draft],
                   device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """Right-padded blocks [anchor, x_1..x_l]: ids, mask, positions [R, Q]."""
    blocks = [torch.cat([c[-1:].cpu(), d.tokens.cpu().long()]) for c, d in zip(contexts, drafts)]
    ids, mask = pad(blocks, PAD_ID)
    width = ids.shape[1]
    starts = torch.tensor([c.numel() - 1 for c in contexts])
    positions = starts[:, None] + torch.arange(width)[None]
    return ids.to(device), mask.to(device), positions.to(device)


@torch.inference_mode()
def batched_verify_logits(target: PreTrainedModel, contexts: Sequence[Tensor],
                          drafts: Sequence[Draft]) -> list[Tensor]:
    """The target's logits [1 + l_r, V] for each request's block [anchor, drafts], all R
    blocks in ONE forward. contexts[r] is every token so far, ending with the
    anchor; its other tokens are first prefilled into a KV cache (left-padded), standing in
    for the cache a server already holds. The blocks are right-padded; see the module doc."""
    _check_batch(target, contexts, drafts)
    device = model_device(target)
    cache = new_cache(target)
    prefix_ids, prefix_mask, prefix_positions = _padded_prefixes(contexts, device)
    if prefix_ids.shape[1]:
        target(input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=prefix_positions, **cache_kwarg(cache),
               use_cache=True, logits_to_keep=1)
    ids, mask, positions = _padded_blocks(contexts, drafts, device)
    logits = target(input_ids=ids, attention_mask=torch.cat([prefix_mask, mask], dim=1), position_ids=positions,
                    **cache_kwarg(cache), use_cache=True).logits
    return [logits[r, :1 + d.gamma] for r, d in enumerate(drafts)]


def batched_verify(target: PreTrainedModel, contexts: Sequence[Tensor], drafts: Sequence[Draft],
                   temperature: float, generator: torch.Generator | None) -> list[tuple[int, int]]:
    """Verify R requests in one target forward: per request (n_accepted, next_token), as
    `speculative.verify_block` gives on that request's rows. Draft lengths may
    differ, 0 included (a plain target step). Requests are verified in order r = 0..R-1,
    each drawing its uniforms from `generator`, as R one-request calls in that order would."""
    logits = batched_verify_logits(target, contexts, drafts)
    return [verify_block(rows, draft, temperature, generator) for rows, draft in zip(logits, drafts)]


def time_batched_step(target: PreTrainedModel, R: int, lengths: Sequence[int], context_len: int, repeats: int,
                      seed: int = 0, warmup: int = 2) -> float:
    """Median seconds of one real batched verification forward: R requests, request r
    sending its anchor plus lengths[r] drafted tokens, on cached contexts of `context_len`
    tokens, blocks right-padded to the longest."""
    R = positive_int(R, "R (requests)")
    if len(lengths) != R or any(int(l) != l or l < 0 for l in lengths):
        raise ValueError(f"lengths must be R = {R} integers >= 0 (drafted tokens per request); got {list(lengths)}")
    layout = [1 + int(l) for l in lengths]
    check_positions(target, positive_int(context_len, "context_len") + max(layout))
    return median_step_seconds(target.eval(), [layout], context_len, positive_int(repeats, "repeats"),
                           warmup, seed, None)[0]


# ========================================================================== 2. packed (varlen) verification

PACKED_ATTENTION = "dspark_packed_sdpa"  # the name the packed kernel is registered under


@dataclass(frozen=True)
class PackedLayout:
    """Where R requests sit in one packed forward. Q: the longest query block,
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
    """The layout of one packed forward: request r adds q_lens[r] new tokens after
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
    """Varlen attention: the R requests' tokens share ONE row; each request's
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
    its name, PACKED_ATTENTION."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    return PACKED_ATTENTION


def packed_model(target: PreTrainedModel) -> PreTrainedModel:
    """A copy of the target whose attention is the packed varlen kernel. A copy,
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
    for varlen verification forwards. Build it with `PackedBatch.prefill`;
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
        check_positions(model, max(lens))
        cache, device = new_cache(model), model_device(model)
        if sum(lens):
            positions = torch.cat([torch.arange(n) for n in lens])[None].to(device)
            model(input_ids=torch.cat([p.cpu() for p in prefixes])[None].to(device), position_ids=positions,
                  **cache_kwarg(cache), use_cache=True, logits_to_keep=1,
                  packed_layout=pack_layout(lens, [0] * len(lens), device))
        return cls(model, cache, lens)

    def layout(self, q_lens: Sequence[int]) -> PackedLayout:
        """The layout of a forward adding q_lens[r] tokens to request r."""
        if len(q_lens) != len(self.lens):
            raise ValueError(f"need one block per request ({len(self.lens)}); got {len(q_lens)}")
        check_positions(self.model, max(n + int(q) for n, q in zip(self.lens, q_lens)))
        return pack_layout(q_lens, self.lens, model_device(self.model))

    @torch.inference_mode()
    def forward(self, blocks: Sequence[Tensor], layout: PackedLayout | None = None) -> list[Tensor]:
        """Logits [len(blocks[r]), V] of every request's block (each >= 1 token), all in ONE
        packed forward on top of the cached prefixes; the cache is cropped back after.
        `layout`: `self.layout` of the block lengths, precomputed (for timing) or None."""
        q = [int(b.numel()) for b in blocks]
        layout = self.layout(q) if layout is None else layout
        device = model_device(self.model)
        positions = torch.cat([torch.arange(n, n + m) for n, m in zip(self.lens, q)])[None].to(device)
        logits = self.model(input_ids=torch.cat([b.cpu() for b in blocks])[None].to(device), position_ids=positions,
                            **cache_kwarg(self.cache), use_cache=True, packed_layout=layout).logits[0]
        remove_tokens(self.cache, sum(q))
        return list(logits.split(q))


def packed_verify_logits(model: PreTrainedModel, contexts: Sequence[Tensor], drafts: Sequence[Draft]) -> list[Tensor]:
    """`batched_verify_logits` with the varlen kernel: the logits [1 + l_r, V] of
    every request's block [anchor, drafts], all R blocks packed in ONE forward of a
    `packed_model`, on the packed cache of each context minus its anchor."""
    _check_batch(model, contexts, drafts)
    batch = PackedBatch.prefill(model, [c[:-1] for c in contexts])
    return batch.forward([torch.cat([c[-1:].cpu(), d.tokens.cpu().long()]) for c, d in zip(contexts, drafts)])


def time_packed_step(batch: PackedBatch, lengths: Sequence[int], repeats: int, warmup: int = 2,
                     seed: int = 0) -> float:
    """Median seconds of one real packed (varlen) verification forward: request r
    of `batch` sends its anchor plus lengths[r] drafted tokens (random ids). The layout is
    built once, untimed; CUDA is synchronised around each timing."""
    if len(lengths) != len(batch.lens) or any(int(l) != l or l < 0 for l in lengths):
        raise ValueError(f"lengths must be R = {len(batch.lens)} integers >= 0 (drafted tokens per request); "
                         f"got {list(lengths)}")
    repeats = positive_int(repeats, "repeats")
    generator = torch.Generator().manual_seed(seed)
    blocks = [torch.randint(0, batch.model.config.vocab_size, (1 + int(l),), generator=generator) for l in lengths]
    layout, device = batch.layout([b.numel() for b in blocks]), model_device(batch.model)
    return interleaved_medians(1, lambda _: seconds(lambda: batch.forward(blocks, layout), device), repeats, warmup,
                               generator)[0]


def profile_varlen_step_curves(target: PreTrainedModel, concurrencies: Sequence[int], gamma: int, points: int,
                               context_len: int, repeats: int, seed: int = 0) -> dict[int, StepCurve]:
    """SPS(B) per concurrency R, measured with the varlen kernel the server verifies with
   : `costs.profile_step_curves`' sizes (B from R to R(gamma + 1), spread evenly
    over exactly R requests), each timed as a `PackedBatch` forward on R cached random contexts
    of `context_len` tokens. After one warm-up pass, `repeats` rounds time every size once, in
    a fresh random order each round (so the machine's drifts hit all sizes alike); the table
    keeps the median."""
    sizes_by_R = {positive_int(R, "each concurrency R"): concurrency_batch_sizes(R, gamma, points)
                  for R in sorted(set(concurrencies))}
    if not sizes_by_R:
        raise ValueError("concurrencies is empty; expected at least one R >= 1")
    repeats, context_len = positive_int(repeats, "repeats"), positive_int(context_len, "context_len")
    packed, generator = packed_model(target), torch.Generator().manual_seed(seed)
    curves = {}
    for R, sizes in progress(sizes_by_R.items(), desc="profiling SPS(B), varlen"):
        batch = PackedBatch.prefill(packed, [torch.randint(0, target.config.vocab_size, (context_len,),
                                                           generator=generator) for _ in range(R)])
        lengths = [[q - 1 for q in spread_tokens(b, R)] for b in sizes]
        step_seconds = interleaved_medians(len(sizes), lambda i: time_packed_step(batch, lengths[i], repeats=1, warmup=0,
                                                                                  seed=seed),
                                           repeats, 1, generator)
        meta = {**device_meta(target), "kind": "measured", "kernel": "varlen (packed)", "context_len": context_len,
                "requests": R, "repeats": repeats, "seed": seed, "seconds_per_step": step_seconds}
        curves[R] = StepCurve.from_latencies(sizes, step_seconds, meta)
    return curves


def saved_or_profiled_step_curves(target: PreTrainedModel, concurrencies: Sequence[int], gamma: int, points: int,
                                  context_len: int, repeats: int, path: str | Path, seed: int = 0
                                  ) -> tuple[dict[int, StepCurve], bool]:
    """The cost tables of `profile_varlen_step_curves`, read from `path` when a notebook before
    this one profiled them there with the same settings on the same machine and model (R, sizes,
    context, repeats, seed, and `device_meta`), else profiled now and saved there. One table then
    serves a chapter and its studies (at `costs.step_curves_file`), and a study run alone still
    measures its own. Returns (tables, whether they were read)."""
    path = Path(path)
    with contextlib.suppress(OSError, ValueError):
        saved = load_step_curves(path)
        machine = device_meta(target)
        wanted = {R: concurrency_batch_sizes(R, gamma, points) for R in set(concurrencies)}
        if set(saved) == set(wanted) and all(
                list(curve.sizes) == wanted[R] and curve.meta.get("context_len") == context_len
                and curve.meta.get("repeats") == repeats and curve.meta.get("seed") == seed
                and all(curve.meta.get(key) == value for key, value in machine.items())
                for R, curve in saved.items()):
            return saved, True
    curves = profile_varlen_step_curves(target, concurrencies, gamma, points, context_len, repeats, seed)
    save_step_curves(curves, path)
    return curves, False


# ========================================================================== 3. real batched steps


def real_step_throughput(target: PreTrainedModel, records: Rounds, schedulers: Sequence[str | Scheduler],
                         curve: StepCurve | Mapping[int, StepCurve], concurrencies: Sequence[int], steps: int, context_len: int, repeats: int,
                         domains: Sequence[str] | None = None, seed: int = 0) -> pd.DataFrame:
    """Real batched verification steps against the cost table's prediction.

    For each R: each request's domain is drawn uniformly from `domains` (None: all the records'
    domains) and R random contexts of `context_len` tokens are cached; then `steps` steps, each
    drawing one record of its domain per request, as `simulate` does. Every scheduler, in a
    fresh random order each step (so drifts of the machine hit them alike), chooses lengths from
    the step's confidences and is credited the tokens sum_r (min(l_r, accepted_r) + 1); its
    step is timed with the varlen kernel (`time_packed_step`) and right-padded
    (`time_batched_step`), median of `repeats` each. One row per (R, scheduler): tokens per
    second predicted by the table (tokens over sum 1 / SPS(B)) and measured with each kernel.
    `curve`: one step curve for every R, or one per R (`simulator.curve_at` picks it).
    """
    names = [resolve_scheduler(s) for s in schedulers]
    records = records.full_blocks()
    confidences = records.confidences()
    domains = records.domains if domains is None else list(domains)
    pools = {d: np.flatnonzero(records.domain == d) for d in domains}
    if not domains or any(pool.size == 0 for pool in pools.values()):
        raise ValueError(f"domains must be non-empty and each must have records; got {domains}, records hold "
                         f"{records.domains}")
    packed = packed_model(target)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    steps = positive_int(steps, "steps")
    bar = progress(total=len(concurrencies) * steps, desc="real batched steps")
    for R in concurrencies:
        R = positive_int(R, "each concurrency R")
        table = curve_at(curve, R)
        rng = np.random.default_rng([seed, 8, R])
        request_domains = rng.choice(domains, size=R)
        batch = PackedBatch.prefill(packed, [torch.randint(0, target.config.vocab_size, (context_len,),
                                                           generator=generator) for _ in range(R)])
        totals = {name: np.zeros(4) for name, _ in names}  # tokens, predicted s, varlen s, padded s
        for _ in range(steps):
            drawn = np.array([rng.choice(pools[d]) for d in request_domains])
            c, accepted = confidences[drawn], records.accepted[drawn]
            for k in rng.permutation(len(names)):
                name, choose = names[k]
                lengths = lengths_in_range(choose(c, table, c), R, records.width, f"the lengths of scheduler {name!r}")
                totals[name] += [(np.minimum(lengths, accepted) + 1).sum(), 1.0 / table.sps(R + int(lengths.sum())),
                                 time_packed_step(batch, lengths, repeats, seed=seed),
                                 time_batched_step(target, R, lengths.tolist(), context_len, repeats, seed=seed)]
            bar.update()
        for name, (tokens, predicted, varlen, padded) in totals.items():
            rows.append({"R": R, "scheduler": name, "predicted (table)": tokens / predicted,
                         "real, varlen kernel": tokens / varlen, "real, padded": tokens / padded})
    bar.close()
    return pd.DataFrame(rows)
