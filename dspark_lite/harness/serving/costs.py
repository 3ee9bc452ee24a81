"""What a forward costs: the target's latency against the number of query tokens (chapter
01), a drafter's latency against the number of drafted tokens (chapters 03 and 04), and the
steps-per-second table SPS(B) that the scheduler reads (chapter 06b).

Verifying gamma drafted tokens takes ONE target forward over gamma + 1 query tokens on top
of the cached context. On any hardware that forward costs far less than gamma + 1 separate
forwards; this module measures by how much. `profile_step_curve` turns the same measurement
into SPS(B), target forward steps per second when B verification tokens (spread over several
requests, each on a cached context) go through the target in one forward;
`save_step_curve` / `load_step_curve` keep such a table as JSON, with `device_meta` saying
where it was measured. `profile_step_curves` measures one table per concurrency R (B from R
to R(gamma + 1), over exactly R requests), because on a CPU a step's time depends on how many
requests' contexts it attends to, not only on B; `simulator.curve_at` picks the table for an R.
`load_gpu_cost_table` reads the tables chapter 07 measured on a GPU at Qwen3-4B's shape, when
one is committed.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import transformers
from transformers import DynamicCache, PreTrainedModel

from ...checks import positive_int
from ...progress import progress
from ...runtime import device_generator, model_device
from ...kvcache import cache_kwarg, new_cache, remove_tokens
from ...stepcurve import StepCurve
from ...speculative import Drafter, target_hidden
from ..result_files import cpu_name, results_dir, write_json
from .timing import check_positions, interleaved_medians, seconds


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
    positive_int(repeats, "repeats")
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    context = torch.randint(0, vocab, (1, context_len), generator=generator).to(device)
    cache = new_cache(model)
    model(input_ids=context, **cache_kwarg(cache), use_cache=True, logits_to_keep=1)
    order = list(query_counts)

    def time_one(j: int) -> float:
        q = order[j]
        queries = torch.randint(0, vocab, (1, q), generator=generator).to(device)
        positions = torch.arange(context_len, context_len + q, device=device)[None]
        elapsed = seconds(lambda: model(input_ids=queries, **cache_kwarg(cache), use_cache=True,
                                        position_ids=positions), device)
        remove_tokens(cache, q)
        return elapsed

    medians = interleaved_medians(len(order), time_one, repeats, warmup, generator, "latency vs query tokens")
    return dict(zip(order, medians))


def draft_latency_curve(
    drafters: dict[int, Drafter], target: PreTrainedModel, context_ids: torch.Tensor, repeats: int = 10,
    warmup: int = 2, seed: int = 0,
) -> dict[int, float]:
    """Median seconds of one steady-state draft call of gamma tokens, for each gamma in
    `drafters` (gamma -> a drafter able to draft gamma tokens).

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
    them alike (a head's overhead is timed this way); name -> gamma -> median seconds."""
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
    generator, order = device_generator(seed, device), torch.Generator().manual_seed(seed)

    def time_one(j: int) -> float:
        name, gamma, drafter = entries[j]
        hidden = hidden_of[getattr(drafter, "target_layer_ids", None)]
        drafter.start(ids[:length], None if hidden is None else hidden[:length])
        drafter.draft(ids[:length + 1], 1, 1.0, generator)
        drafter.accept(0, None if hidden is None else hidden[length:length + 1])
        return seconds(lambda: drafter.draft(ids, gamma, 1.0, generator), device)

    medians = interleaved_medians(len(entries), time_one, repeats, warmup, order, "draft latency vs gamma")
    timed = {(name, gamma): m for (name, gamma, _), m in zip(entries, medians)}
    return {name: {gamma: timed[(name, gamma)] for gamma in curve} for name, curve in drafters.items()}


# ========================================================================== SPS(B), the step curve


def device_meta(model: PreTrainedModel) -> dict[str, Any]:
    """Where a measurement ran: device, its name, torch/transformers versions, threads,
    dtype and model size. JSON-ready."""
    device = model_device(model)
    meta: dict[str, Any] = {
        "device": str(device), "cpu": cpu_name(), "torch": torch.__version__,
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
    query counts, longest first. spread_tokens(10, 4) == [3, 3, 2, 2]."""
    rows = min(requests, batch)
    return [batch // rows + (r < batch % rows) for r in range(rows)]


def _prefill(model: PreTrainedModel, rows: int, context_len: int, generator: torch.Generator) -> DynamicCache:
    """A cache holding `rows` random contexts of `context_len` tokens each. Only the last
    position's logits are computed: full-vocabulary logits of 64 x 256 positions of
    Qwen3-4B would take 4.6 GiB in bf16."""
    device = model_device(model)
    context = torch.randint(0, model.config.vocab_size, (rows, context_len), generator=generator).to(device)
    cache = new_cache(model)
    model(input_ids=context, **cache_kwarg(cache), use_cache=True, logits_to_keep=1)
    return cache


def _first_rows(full: DynamicCache, rows: int, model: PreTrainedModel) -> DynamicCache:
    """A new cache holding a copy of the first `rows` rows of `full`."""
    cache = new_cache(model)
    for index, layer in enumerate(full.layers):
        cache.update(layer.keys[:rows], layer.values[:rows], index)
    return cache


def _timed_forward(model: PreTrainedModel, cache: DynamicCache, counts: Sequence[int], context_len: int,
                   generator: torch.Generator) -> float:
    """Seconds of one forward of right-padded query blocks (counts[r] real tokens in row r)
    on top of a cache of `context_len` tokens per row; the cache is cropped back after."""
    device = model_device(model)
    rows, width = len(counts), max(counts)
    ids = torch.randint(0, model.config.vocab_size, (rows, width), generator=generator).to(device)
    real = (torch.arange(width)[None] < torch.tensor(counts)[:, None]).long()
    mask = torch.cat([torch.ones(rows, context_len, dtype=torch.long), real], dim=1).to(device)
    positions = (context_len + torch.arange(width, device=device)).expand(rows, width)
    elapsed = seconds(lambda: model(input_ids=ids, attention_mask=mask, position_ids=positions, **cache_kwarg(cache),
                                    use_cache=True), device)
    remove_tokens(cache, width)
    return elapsed


@torch.inference_mode()
def median_step_seconds(model: PreTrainedModel, layouts: list[list[int]], context_len: int, repeats: int,
                        warmup: int, seed: int, desc: str | None) -> list[float]:
    """Median seconds of a padded batched forward for each layout (per-request query counts).

    One cache of random contexts is prefilled for the largest row count; layouts with fewer
    rows time on a copy of its first rows. Layouts sharing a row count take turns
    (`timing.interleaved_medians`); row counts are timed one after another, largest first, so
    only one extra copy is alive at a time.
    """
    generator = torch.Generator().manual_seed(seed)
    most = max(len(layout) for layout in layouts)
    full = _prefill(model, most, context_len, generator)
    medians: list[float] = [0.0] * len(layouts)
    groups: dict[int, list[int]] = {}
    for index, layout in enumerate(layouts):
        groups.setdefault(len(layout), []).append(index)
    bar = progress(total=len(groups), desc=desc, leave=False, disable=desc is None)
    for rows in sorted(groups, reverse=True):
        cache = full if rows == most else _first_rows(full, rows, model)
        members = groups[rows]
        times = interleaved_medians(len(members), lambda j: _timed_forward(model, cache, layouts[members[j]],
                                                                           context_len, generator),
                                    repeats, warmup, generator)
        for member, median in zip(members, times):
            medians[member] = median
        cache = None  # free this row count's copy before the next one is made
        bar.update()
    bar.close()
    return medians


def profile_step_curve(target: PreTrainedModel, batch_sizes: Sequence[int], requests: int, context_len: int,
                       repeats: int, device: str | torch.device | None = None, seed: int = 0,
                       warmup: int = 2) -> StepCurve:
    """Measure SPS(B), target forward steps per second at B verification tokens.

    For each B the tokens are spread as evenly as possible over min(requests, B) requests
    (`spread_tokens`), each on a cached random context of `context_len` tokens; one padded
    forward of the query blocks [R', ceil(B / R')] is timed (median of `repeats` after
    `warmup` untimed calls) and the cache cropped back. `device` moves the target there first
    (None: where it already is). CUDA is synchronised around each timing. `meta` records the
    device, versions, dtype, context_len, requests, repeats and "kind": "measured".
    """
    sizes = sorted({positive_int(b, "each batch size") for b in batch_sizes})
    if not sizes:
        raise ValueError("batch_sizes is empty; expected at least one batch size >= 1")
    requests, context_len = positive_int(requests, "requests"), positive_int(context_len, "context_len")
    repeats = positive_int(repeats, "repeats")
    if device is not None:
        target.to(device)
    layouts = [spread_tokens(b, requests) for b in sizes]
    check_positions(target, context_len + max(layout[0] for layout in layouts))
    step_seconds = median_step_seconds(target.eval(), layouts, context_len, repeats, warmup, seed, "profiling SPS(B)")
    meta = {**device_meta(target), "kind": "measured", "context_len": context_len, "requests": requests,
            "repeats": repeats, "warmup": warmup, "seed": seed, "padding": "right-padded query blocks",
            "seconds_per_step": step_seconds}
    return StepCurve.from_latencies(sizes, step_seconds, meta)


def concurrency_batch_sizes(requests: int, gamma: int, points: int) -> list[int]:
    """The batch sizes profiled for concurrency R: `points` sizes spread evenly
    from R (every request sends its anchor only) to R(gamma + 1) (every request its whole
    block), both ends included. concurrency_batch_sizes(4, 7, 8) == [4, 8, ..., 32]."""
    requests, gamma, points = (positive_int(v, name) for v, name in
                               ((requests, "requests"), (gamma, "gamma"), (points, "points")))
    return sorted({int(round(b)) for b in np.linspace(requests, requests * (gamma + 1), max(points, 2))})


def profile_step_curves(target: PreTrainedModel, concurrencies: Sequence[int], gamma: int, points: int,
                        context_len: int, repeats: int, device: str | torch.device | None = None,
                        seed: int = 0) -> dict[int, StepCurve]:
    """One measured SPS(B) per concurrency R: `profile_step_curve` at
    `concurrency_batch_sizes(R, gamma, points)` with the tokens spread over exactly R requests.
    A step at concurrency R always carries R requests, and on a CPU their cached contexts
    cost attention time whatever B is, so a table measured with B spread over B requests
    would charge an R = 16 step of 128 tokens like a step of 128 requests."""
    sizes = sorted({positive_int(r, "each concurrency R") for r in concurrencies})
    if not sizes:
        raise ValueError("concurrencies is empty; expected at least one R >= 1")
    return {R: profile_step_curve(target, concurrency_batch_sizes(R, gamma, points), R, context_len, repeats,
                                  device=device, seed=seed)
            for R in progress(sizes, desc="profiling SPS(B) per R", leave=False)}


def _read_json_object(path: str | Path, what: str, how: str) -> tuple[Path, dict[str, Any]]:
    """(path, the JSON object in it); FileNotFoundError saying `how` to make one when the file
    is missing, ValueError when it is not JSON or not an object."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}; {how}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}); expected {what} ({how})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}; expected a JSON object of {what} ({how})")
    return path, data


def save_step_curves(curves: Mapping[int, StepCurve], path: str | Path) -> Path:
    """Write per-concurrency step curves as one JSON object {"R": curve}."""
    if not curves or not all(isinstance(c, StepCurve) for c in curves.values()):
        raise ValueError("curves must be a non-empty mapping R -> StepCurve")
    return write_json({str(R): c.to_dict() for R, c in sorted(curves.items())}, path)


def step_curves_file(device: torch.device | str) -> Path:
    """The run's cost tables for `device`'s kind, next to its results: the notebook that profiles
    them saves them there, and the notebooks after it read them
    (`batching.saved_or_profiled_step_curves`)."""
    return results_dir() / "tables" / f"step_curves_{torch.device(device).type}.json"


def load_step_curves(path: str | Path) -> dict[int, StepCurve]:
    """Read per-concurrency step curves written by `save_step_curves`."""
    path, data = _read_json_object(path, "step curves", "profile them with profile_step_curves and save them "
                                                        "with save_step_curves")
    try:
        return {int(R): StepCurve.from_dict(c) for R, c in data.items()}
    except (AttributeError, TypeError, KeyError, ValueError) as error:
        raise ValueError(f"{path} is not a valid set of step curves ({error}); expected a JSON object "
                         f"{{\"R\": step curve}} from save_step_curves") from None


def save_step_curve(curve: StepCurve, path: str | Path) -> Path:
    """Write a step curve as JSON (sizes, steps_per_second, meta); returns the path."""
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    return write_json(curve.to_dict(), path)


def load_step_curve(path: str | Path) -> StepCurve:
    """Read a step curve written by `save_step_curve`. FileNotFoundError when
    the file is missing, ValueError when it is not a valid step curve."""
    path, data = _read_json_object(path, "step curve", "profile one with profile_step_curve and save it with "
                                                       "save_step_curve")
    try:
        return StepCurve.from_dict(data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} is not a valid step curve: {error}") from None


# ========================================================================== a GPU's measured table (chapter 07)

GPU_COST_FILES = "qwen3_4b_*_costs.json"  # the costs-first run's results files (harness/gpu/costs_first.py)


def load_gpu_cost_table(folder: str | Path | None = None) -> dict[int, StepCurve] | None:
    """The SPS(B) tables that the costs-first run (`gpu.costs_first`) measured on a GPU with Qwen3-4B's shape, as
    the simulator takes them: {R: dense StepCurve} (`StepCurve.dense`), each curve's meta naming the
    GPU, its dtype and the file. Reads the committed results files `qwen3_4b_<gpu>_costs.json` in
    `folder` (default data/results/), skipping CPU dry runs; of several GPU files, the newest measured.
    None when no GPU has measured one. ValueError for a file that is not such a results file."""
    from ..result_files import committed_results_dir

    folder = committed_results_dir() if folder is None else Path(folder)
    found = []
    for path in sorted(folder.glob(GPU_COST_FILES)) if folder.is_dir() else []:
        path, data = _read_json_object(path, "costs-first results", "python -m "
                                       "dspark_lite.harness.gpu.costs_first writes them")
        results = data.get("results")
        if not isinstance(results, dict) or not isinstance(results.get("cost_table"), dict):
            raise ValueError(f"{path} holds no results.cost_table; expected a costs-first results file")
        if not str(results.get("device", "")).startswith("cuda") or not results["cost_table"]:
            continue
        found.append((str(data.get("provenance", {}).get("date", "")), path.name, results))
    if not found:
        return None
    _, name, results = max(found)
    try:
        return {int(R): StepCurve.from_dict({**entry["curve"], "meta": {
                    **entry["curve"].get("meta", {}), "gpu": results.get("gpu"), "dtype": results.get("dtype"),
                    "file": name}}).dense()
                for R, entry in sorted(results["cost_table"].items(), key=lambda item: int(item[0]))}
    except (AttributeError, TypeError, KeyError, ValueError) as error:
        raise ValueError(f"{name}: its cost table is not a set of step curves ({error}); expected "
                         "{\"R\": {\"curve\": step curve}} as costs_first writes it") from None
