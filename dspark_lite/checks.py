"""The checks at the public entry points, in one place (chapter 02 shows the engine's door): the engine (`prompt`, `generation`,
`layer_ids`, and the per-round `draft` check the engine runs only when asked), the record of
rounds (`round_columns`), the confidences and logits calibration (chapter 05) and the scheduler read, the
step curve, and the drafters' constructors, `start`, `accept` and `draft` (`layer_ids`,
`target_hidden`, `drafter_round`). One wording for one mistake, saying what was wrong and where.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

PROB_SUM_TOLERANCE = 1e-3  # how far a draft's probability row may sum from 1


def positive_int(value: Any, name: str, minimum: int = 1) -> int:
    """`value` as an int; ValueError unless it is an integer >= `minimum` (1 unless given; a
    bool is not)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def in_interval(value: Any, name: str, low: float, high: float = math.inf, *, closed: bool = True) -> float:
    """`value` as a float; ValueError unless it is a finite number in [low, high] (or in
    (low, high) when not `closed`; no `high`: no upper bound)."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not (number and math.isfinite(value) and (low <= value <= high if closed else low < value < high)):
        bounds = (f"be {'>=' if closed else '>'} {low:g}" if high == math.inf
                  else f"lie in {'[' if closed else '('}{low:g}, {high:g}{']' if closed else ')'}")
        raise ValueError(f"{name} must {bounds}; got {value if number else repr(value)}")
    return float(value)


def lengths_in_range(lengths: Any, requests: int, gamma: int, name: str = "lengths") -> np.ndarray:
    """Draft lengths l (a scheduler's answer) as int64 [requests], each in 0..gamma; ValueError
    naming them `name` otherwise."""
    l = np.asarray(lengths)
    if l.shape != (requests,) or l.dtype.kind not in "iu" or l.min() < 0 or l.max() > gamma:
        raise ValueError(f"{name} must be {requests} integers in [0, {gamma}]; got {l.tolist()}")
    return l.astype(np.int64)


def positive_finite(values: Any, name: str) -> np.ndarray:
    """`values` (a number or an array) as float64; ValueError unless every one is positive and finite."""
    arr = float_array(values, name)
    if not np.isfinite(arr).all() or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite; got {arr.tolist()}")
    return arr


def finite_at_least(values: Any, name: str, low: float) -> np.ndarray:
    """`values` (a number or an array) as float64; ValueError unless every one is finite and >= `low`."""
    arr = float_array(values, name)
    if not np.isfinite(arr).all() or np.any(arr < low):
        raise ValueError(f"{name} must be finite and >= {low:g}; got {arr.tolist()}")
    return arr


def integers(values: Any, name: str) -> np.ndarray:
    """`values` as int64; ValueError unless they are whole numbers (ints, or floats without a fraction)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf" or not np.array_equal(arr, np.round(arr)):
        raise ValueError(f"{name} must be integers; got {arr.tolist()}")
    return arr.astype(np.int64)


def has_keys(data: Any, keys: Sequence[str], what: str) -> None:
    """ValueError unless the mapping `data` holds every one of `keys`."""
    missing = sorted(set(keys) - set(data))
    if missing:
        raise ValueError(f"{what} needs keys {sorted(keys)}; missing {missing}")


def _where(flat_index: int, shape: tuple[int, ...]) -> str:
    """'row 3, position k=2' for a 2-D array, 'index 3' for a 1-D one (k is 1-based)."""
    if len(shape) == 1:
        return f"index {flat_index}"
    row, col = np.unravel_index(flat_index, shape)
    return f"row {row}, position k={col + 1}"


def float_array(values: Any, name: str) -> np.ndarray:
    """`values` as a float64 array; ValueError when they are not numbers."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric; could not convert to floats ({error})") from None


def _block_shaped(arr: np.ndarray, name: str, allow_1d: bool) -> None:
    shapes = "(N, gamma) or (gamma,)" if allow_1d else "(N, gamma)"
    if arr.ndim not in ((1, 2) if allow_1d else (2,)):
        raise ValueError(f"{name} must have shape {shapes}; got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one block and one position; got shape {arr.shape}")


def confidences(c: Any, *, allow_1d: bool = False, name: str = "confidences") -> np.ndarray:
    """Confidences c[N, gamma] (or one block's c[gamma] with `allow_1d`) as float64: finite
    probabilities in [0, 1]. ValueError saying what was wrong and where."""
    arr = float_array(c, name)
    _block_shaped(arr, name, allow_1d)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite probabilities in [0, 1]; got {arr.flat[i]} at {_where(i, arr.shape)}")
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} are probabilities and must lie in [0, 1]; got {arr.flat[i]} at {_where(i, arr.shape)}")
    return arr


def confidence_trials(c: Any) -> np.ndarray:
    """Confidences of many trials, c[N, R, gamma] with N >= 1, as float64 (each trial's
    [R, gamma] is checked by the scheduler that reads it); ValueError otherwise."""
    arr = float_array(c, "confidences")
    if arr.ndim != 3 or arr.shape[0] == 0:
        raise ValueError(f"confidences must be shaped (N trials >= 1, R, gamma); got {arr.shape}")
    return arr


def probability(value: Any, name: str) -> float:
    """`value` as a float; ValueError unless it is a number in [0, 1] (`in_interval`'s wording)."""
    return in_interval(value, name, 0.0, 1.0)


def distribution(p: Any, name: str) -> np.ndarray:
    """A probability vector p[V] as float64: finite, non-negative, summing to 1 (within 1e-9)."""
    arr = float_array(p, name)
    if arr.ndim != 1 or arr.size == 0 or not np.isfinite(arr).all() or arr.min() < 0 or abs(arr.sum() - 1) > 1e-9:
        raise ValueError(f"{name} must be a 1-D probability vector summing to 1; got {arr.tolist()}")
    return arr


def series(values: Any, name: str) -> np.ndarray:
    """`values` as a non-empty 1-D float64 array; ValueError otherwise."""
    arr = float_array(values, name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array; got shape {arr.shape}")
    return arr


def logits(z: Any, *, allow_1d: bool = False, name: str = "confidence logits") -> np.ndarray:
    """Confidence logits z[N, gamma] (or z[gamma] with `allow_1d`) as float64: no NaN (a
    saturated head's +-inf is allowed: sigmoid gives exactly 1 or 0). ValueError otherwise."""
    arr = float_array(z, name)
    _block_shaped(arr, name, allow_1d)
    if np.isnan(arr).any():
        i = int(np.flatnonzero(np.isnan(arr))[0])
        raise ValueError(f"{name} must not be NaN (a position without a confidence); got NaN at {_where(i, arr.shape)}")
    return arr


def accepted_counts(n_accepted: Any, gamma: int, blocks: int | None = None) -> np.ndarray:
    """Accepted drafts per block as int64 [N], each in 0..gamma (and N == `blocks` if given)."""
    gamma = positive_int(gamma, "gamma (draft positions per block)")
    arr = np.asarray(n_accepted)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"n_accepted must be a non-empty 1-D array (one count per block); got shape {arr.shape}")
    if blocks is not None and arr.shape[0] != blocks:
        raise ValueError(f"mismatched lengths: {blocks} confidence rows but {arr.shape[0]} acceptance counts")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"n_accepted must hold integers in 0..{gamma}; got dtype {arr.dtype}")
    values = arr.astype(float)
    bad = ~np.isfinite(values) | (values != np.round(values)) | (values < 0) | (values > gamma)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"n_accepted must hold integers in 0..{gamma} (accepted draft tokens per block); "
                         f"got {arr[i]} at index {i}")
    return values.astype(np.int64)


def round_columns(proposed: Any, accepted: Any, ended_in_draft: Any, logits_: Any,
                  domain: Any) -> tuple[np.ndarray, ...]:
    """The columns of a `record.Rounds`, checked and converted (int64, int64, bool, float32
    [N, G], object strings)."""
    p, a = np.asarray(proposed), np.asarray(accepted)
    n = p.shape[0] if p.ndim == 1 else -1
    if p.ndim != 1 or a.shape != (n,):
        raise ValueError(f"proposed and accepted must be 1-D of one length; got shapes {p.shape} and {a.shape}")
    for values, what in ((p, "proposed"), (a, "accepted")):
        if values.size and (values.dtype.kind not in "iuf" or not np.array_equal(values, np.round(values))):
            raise ValueError(f"{what} must hold integers; got {values.dtype} values")
    p, a = p.astype(np.int64), a.astype(np.int64)
    if n and ((a < 0).any() or (a > p).any()):
        i = int(np.flatnonzero((a < 0) | (a > p))[0])
        raise ValueError(f"each round needs 0 <= accepted <= proposed; round {i} has accepted {a[i]} of {p[i]}")
    e = np.asarray(ended_in_draft)
    e = e.astype(bool) if e.size == 0 else e  # an empty list comes as float64
    if e.shape != (n,) or (e.size and e.dtype != bool):
        raise ValueError(f"ended_in_draft must be {n} booleans; got {e.dtype} of shape {e.shape}")
    if (e & ~((a == p) & (p >= 1))).any():
        raise ValueError("a round with ended_in_draft needs accepted == proposed >= 1 (the drafts up to and including "
                         "the end token)")
    z = float_array(logits_, "logits").astype(np.float32)
    if z.ndim != 2 or z.shape[0] != n or z.shape[1] < int(p.max(initial=0)):
        raise ValueError(f"logits must be shaped (N = {n}, G >= the most proposed, {int(p.max(initial=0))}); "
                         f"got {z.shape}")
    beyond = np.arange(z.shape[1])[None, :] >= p[:, None]
    if (~np.isnan(z) & beyond).any():
        raise ValueError("logits past a round's proposed drafts must be NaN (no draft, no confidence)")
    d = np.asarray(domain, dtype=object)
    if d.shape != (n,) or not all(isinstance(x, str) for x in d):
        raise ValueError(f"domain must be {n} strings, one per round; got shape {d.shape}")
    return p, a, e.astype(bool), z, d


def some_rounds(rounds: Any, record_type: type) -> Any:
    """`rounds` itself: a `record.Rounds` (`record_type`) holding at least one round; ValueError otherwise."""
    if not isinstance(rounds, record_type):
        raise ValueError(f"expected a Rounds record, got {type(rounds).__name__}")
    if len(rounds) == 0:
        raise ValueError("no rounds recorded; expected at least one round")
    return rounds


def full_blocks_found(kept: int, gamma: int, rounds: int, widest: int) -> None:
    """ValueError unless some round proposed a whole block of `gamma` drafts with confidences."""
    if kept == 0:
        raise ValueError(f"no round proposed a full block of gamma = {gamma} drafts with confidences "
                         f"({rounds} rounds, the widest {widest})")


def calibration_split(z: Any, n_accepted: Any) -> tuple[np.ndarray, np.ndarray]:
    """A calibrator's fitting data: confidence logits z[N, gamma] (`logits`) and the accepted
    drafts of the same N blocks (`accepted_counts`)."""
    z = logits(z)
    return z, accepted_counts(n_accepted, z.shape[1], blocks=z.shape[0])


def fitted_logits(z: Any, gamma: int | None, who: str) -> np.ndarray:
    """Logits z[N, gamma] or z[gamma] for a calibrator `who` fitted on `gamma` positions (None:
    not fitted yet, a RuntimeError); ValueError when they are not logits of that width."""
    if gamma is None:
        raise RuntimeError(f"{who} is not fitted; call fit(z_cal, n_acc_cal) first")
    z = logits(z, allow_1d=True)
    if z.shape[-1] != gamma:
        raise ValueError(f"{who} was fitted for gamma={gamma} positions; got logits with {z.shape[-1]} positions")
    return z


def weighted_values(y: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    """Values y[n] and their weights w[n] (None: all 1) as float64: non-empty, 1-D, of one
    length, finite, the weights positive. ValueError otherwise."""
    values = float_array(y, "y")
    w = np.ones_like(values) if weights is None else float_array(weights, "weights")
    if values.ndim != 1 or w.shape != values.shape or values.size == 0:
        raise ValueError(f"y and weights must be non-empty 1-D arrays of equal length; got shapes "
                         f"{values.shape} and {w.shape}")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(w)) and w.min() > 0):
        raise ValueError("y must be finite and weights finite and positive")
    return values, w


def outcomes(p: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Predictions p (1-D probabilities in [0, 1]) and binary outcomes y of equal length, as
    float64 arrays; ValueError otherwise (the calibration metrics)."""
    pred = float_array(p, "predictions")
    if pred.ndim != 1 or pred.size == 0:
        raise ValueError(f"predictions must be a non-empty 1-D array; got shape {pred.shape}")
    bad = ~np.isfinite(pred) | (pred < 0) | (pred > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"predictions must be finite probabilities in [0, 1]; got {pred[i]} at index {i}")
    out = np.asarray(y)
    if out.ndim != 1 or out.shape[0] != pred.shape[0]:
        raise ValueError(f"mismatched lengths: {pred.shape[0]} predictions but outcomes of shape {out.shape}")
    if not (out.dtype == bool or np.issubdtype(out.dtype, np.number)):
        raise ValueError(f"outcomes must be binary (bool or 0/1); got dtype {out.dtype}")
    out = out.astype(float)
    bad = (out != 0) & (out != 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"outcomes must be binary (bool or 0/1); got {out[i]} at index {i}")
    return pred, out


def step_curve(sizes: Any, steps_per_second: Any, meta: Any, max_size: int) -> tuple[np.ndarray, np.ndarray]:
    """A step curve's columns (`stepcurve.StepCurve`): batch sizes as int64, strictly increasing
    from >= 1 up to `max_size`, and their positive finite rates as float64."""
    sizes = np.asarray(sizes)
    sps = np.asarray(steps_per_second, dtype=np.float64)
    if sizes.ndim != 1 or sizes.size == 0:
        raise ValueError(f"sizes must be a non-empty 1-D list of batch sizes; got shape {sizes.shape}")
    if sps.shape != sizes.shape:
        raise ValueError(f"sizes and steps_per_second must have the same length; got {sizes.size} sizes "
                         f"and {sps.size} rates")
    sizes = integers(sizes, "batch sizes")
    if sizes[0] < 1:
        raise ValueError(f"batch sizes must be positive (>= 1); got {sizes.tolist()}")
    if np.any(np.diff(sizes) <= 0):
        raise ValueError(f"batch sizes must be strictly increasing, without duplicates; got {sizes.tolist()}")
    if sizes[-1] > max_size:
        raise ValueError(f"batch sizes up to {max_size} are supported; got {sizes[-1]}")
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict; got {type(meta).__name__}")
    return sizes, positive_finite(sps, "steps per second")


def batch_sizes(batch: Any, low: int, high: int) -> np.ndarray:
    """Batch sizes B (a number or an array) as int64, each inside a step curve's profiled range
    [low, high]; ValueError otherwise (the curve refuses to extrapolate)."""
    b = integers(batch, "batch sizes")
    outside = (b < low) | (b > high)
    if np.any(outside):
        raise ValueError(f"batch size(s) {np.unique(b[outside]).tolist()} outside the profiled range "
                         f"[{low}, {high}]; StepCurve refuses to extrapolate: profile those sizes")
    return b


def requests_fit(requests: int, curve: Any) -> None:
    """ValueError unless R requests, one anchor each, fit the step curve: min_batch <= R <= max_batch."""
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need a batch of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")


# ----------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------


def temperature(temperature: float) -> None:
    """ValueError unless temperature >= 0 (0 = greedy)."""
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")


def prompt(prompt_ids: Tensor, min_length: int = 1) -> Tensor:
    """A prompt [T] or [1, T] as a LongTensor [T]; ValueError when it is empty, shorter than
    `min_length` or of another shape."""
    if prompt_ids.dim() == 2 and prompt_ids.shape[0] == 1:
        prompt_ids = prompt_ids[0]
    if prompt_ids.dim() != 1:
        raise ValueError(f"prompt_ids must have shape [T] or [1, T], got {tuple(prompt_ids.shape)}")
    if prompt_ids.numel() == 0:
        raise ValueError("prompt_ids is empty; expected at least one token")
    if prompt_ids.numel() < min_length:
        raise ValueError(f"prompt_ids must hold at least {min_length} tokens, got {prompt_ids.numel()}")
    return prompt_ids.long()


def prompt_batch(prompt_ids: Tensor) -> Tensor:
    """Prompts [T] or [B, T] (T >= 1) as a LongTensor [B, T] (B = 1 for [T]); ValueError otherwise."""
    if prompt_ids.dim() == 1:
        return prompt(prompt_ids)[None]
    if prompt_ids.dim() != 2 or prompt_ids.shape[1] == 0:
        raise ValueError(f"prompt_ids must have shape [T] or [B, T] with T >= 1, got {tuple(prompt_ids.shape)}")
    return prompt_ids.long()


def generation(max_new_tokens: int, temperature_: float) -> None:
    """ValueError unless max_new_tokens >= 1 and temperature >= 0."""
    positive_int(max_new_tokens, "max_new_tokens")
    temperature(temperature_)


def end_ids(eos_token_id: Any) -> tuple[int, ...]:
    """The end-of-sequence ids as a tuple: None gives (), an int (id,), a sequence of ints its
    ids in order without repeats. Qwen3's generation config lists two, 151645 (<|im_end|>) and
    151643 (<|endoftext|>); generation stops at either."""
    if eos_token_id is None:
        return ()
    values = eos_token_id.tolist() if isinstance(eos_token_id, Tensor) else eos_token_id
    values = [values] if isinstance(values, (int, np.integer)) else values
    values = [] if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) else list(values)
    is_id = lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0
    if not values or not all(is_id(v) for v in values):
        raise ValueError(f"eos_token_id must be None, a token id >= 0 or a non-empty sequence of them, "
                         f"got {eos_token_id!r}")
    return tuple(dict.fromkeys(int(v) for v in values))


def speculation(target_config: Any, drafter: Any, prompt_ids: Tensor, max_new_tokens: int, gamma: int,
                temperature_: float) -> Tensor:
    """The speculative engine's arguments (`speculative.speculative_generate`): the generation
    length and temperature, gamma >= 1, a drafter over the target's vocabulary reading existing
    target layers; returns the prompt as a LongTensor [T]."""
    generation(max_new_tokens, temperature_)
    positive_int(gamma, "gamma")
    if drafter.vocab_size != target_config.vocab_size:
        raise ValueError(f"drafter vocab_size {drafter.vocab_size} differs from the target's "
                         f"{target_config.vocab_size}")
    layer_ids(drafter.target_layer_ids, target_config.num_hidden_layers)
    return prompt(prompt_ids)


def measured_seconds(phases: Sequence[float | None]) -> Sequence[float]:
    """A rollout's phase seconds; ValueError when they were not measured (None)."""
    if any(seconds is None for seconds in phases):
        raise ValueError("this rollout's phase seconds were not measured; run speculative_generate(..., "
                         "timed=True) to time them")
    return phases


def draft_length(draft_gamma: int, gamma: int) -> None:
    """ValueError unless a drafter asked for `gamma` tokens returned between 1 and gamma."""
    if not 1 <= draft_gamma <= gamma:
        raise ValueError(f"drafter returned {draft_gamma} draft tokens; expected between 1 and the {gamma} "
                         "requested (fewer when it stops early, e.g. at an end id)")


def layer_ids(layer_ids: Sequence[int] | None, num_layers: int) -> tuple[int, ...] | None:
    """A drafter's target layer ids as a tuple (None: it reads no layers); ValueError unless they
    are non-empty, strictly increasing (DeepSpec's convention) 0-based decoder layer ids."""
    if layer_ids is None:
        return None
    ids = tuple(int(i) for i in layer_ids)
    if not ids or not all(0 <= i < num_layers for i in ids) or any(b <= a for a, b in zip(ids, ids[1:])):
        raise ValueError(f"target_layer_ids must be non-empty, strictly increasing 0-based decoder layer ids "
                         f"in [0, {num_layers}); got {ids}")
    return ids


def draft(draft: Any, target_logits: Tensor) -> None:
    """Raise ValueError unless `draft` (a `speculative.Draft`) fits `target_logits` [gamma+1, V]
   : shapes, ids in range, rows that are distributions, and a positive probability
    at every drafted token."""
    if target_logits.dim() != 2:
        raise ValueError(f"target_logits must have shape [gamma+1, V], got {tuple(target_logits.shape)}")
    if draft.tokens.dim() != 1:
        raise ValueError(f"draft.tokens must have shape [gamma], got {tuple(draft.tokens.shape)}")
    gamma, vocab_size = draft.gamma, target_logits.shape[1]
    if target_logits.shape[0] != gamma + 1:
        raise ValueError(
            f"target_logits has {target_logits.shape[0]} rows; expected gamma + 1 = {gamma + 1} "
            "(the anchor's prediction plus one per draft token)"
        )
    if draft.probs.dim() != 2 or draft.probs.shape[0] != gamma:
        raise ValueError(
            f"draft.probs must have shape [gamma, V] = [{gamma}, V] to match draft.tokens, "
            f"got {tuple(draft.probs.shape)}"
        )
    if draft.probs.shape[1] != vocab_size:
        raise ValueError(
            f"draft vocabulary size {draft.probs.shape[1]} differs from the target's {vocab_size}"
        )
    if draft.confidence_logits is not None and tuple(draft.confidence_logits.shape) != (gamma,):
        raise ValueError(f"draft.confidence_logits must have shape [{gamma}], got "
                         f"{tuple(draft.confidence_logits.shape)}")
    if gamma == 0:
        return
    if draft.tokens.dtype != torch.long:
        raise ValueError(f"draft.tokens must be int64 ids, got dtype {draft.tokens.dtype}")
    if not _draft_values_ok(draft.probs.float(), draft.tokens):
        _explain_bad_values(draft.probs.float(), draft.tokens, vocab_size)


def _draft_values_ok(probs: Tensor, tokens: Tensor) -> bool:
    """Every check of `_explain_bad_values` in one host sync (this runs every round): ids in
    range, no negative entry, rows summing to 1 (a NaN or inf row fails this too), and a
    positive probability at each drafted token."""
    vocab_size = probs.shape[-1]
    tokens = tokens.to(probs.device)
    in_range = (tokens >= 0) & (tokens < vocab_size)
    at_tokens = probs.gather(-1, tokens.clamp(0, vocab_size - 1)[:, None])[:, 0]
    sums_ok = (probs.sum(-1) - 1).abs() <= PROB_SUM_TOLERANCE
    return bool((in_range & sums_ok & (at_tokens > 0)).all() & (probs.amin() >= 0))


def _explain_bad_values(probs: Tensor, tokens: Tensor, vocab_size: int) -> None:
    """Raise the ValueError that says which check of `_draft_values_ok` failed."""
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size:
        raise ValueError(f"draft.tokens must be int64 ids in [0, {vocab_size}), got {tokens.tolist()}")
    if not bool(torch.isfinite(probs).all()):
        raise ValueError("draft.probs contains non-finite values (NaN or inf); expected probabilities")
    if bool((probs < 0).any()):
        raise ValueError("draft.probs contains negative probabilities; expected values in [0, 1]")
    row_sums = probs.sum(-1)
    if bool(((row_sums - 1).abs() > PROB_SUM_TOLERANCE).any()):
        raise ValueError(
            f"draft.probs rows must sum to 1 (within {PROB_SUM_TOLERANCE}), got sums {row_sums.tolist()}; "
            "compute the softmax in float32"
        )
    at_tokens = probs.gather(-1, tokens.to(probs.device)[:, None]).squeeze(-1)
    if bool((at_tokens <= 0).any()):
        positions = (at_tokens <= 0).nonzero().flatten().tolist()
        raise ValueError(
            f"draft token(s) at position(s) {positions} have zero draft probability; a drafter must "
            "sample each token from the distribution it reports"
        )
    raise ValueError("draft.probs failed validation for a reason no check above names")  # unreachable


# ----------------------------------------------------------------------------------------
# The drafters: their constructors, `start`, `accept`, `draft` and training forwards
# ----------------------------------------------------------------------------------------


def head_counts(num_heads: int, num_kv_heads: int) -> None:
    """ValueError unless the query heads split evenly over the key/value heads (grouped-query)."""
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")


def token_id(value: Any, vocab_size: int, name: str) -> int:
    """`value` as an int; ValueError unless it is an id of the target's vocabulary."""
    if not 0 <= int(value) < vocab_size:
        raise ValueError(f"{name} {value} is outside the target's vocabulary [0, {vocab_size})")
    return int(value)


def shareable(embed: Any, lm_head: Any) -> None:
    """ValueError unless the target has an input embedding and an LM head for a drafter to share."""
    if embed is None or lm_head is None:
        raise ValueError("the target must expose an input embedding and an LM head to share")


def target_hidden(hidden: Tensor | None, axes: int, width: int) -> None:
    """ValueError unless the target's selected hidden states have `axes` axes, the last `width`
    (= len(target_layer_ids) * hidden_size)."""
    if hidden is None or hidden.dim() != axes or hidden.shape[-1] != width:
        shape = None if hidden is None else tuple(hidden.shape)
        raise ValueError(f"target hidden states must have {axes} axes ending in len(target_layer_ids) * "
                         f"hidden_size = {width}, got {shape}")


def anchor_positions(anchors: Tensor, low: int, high: int, who: str) -> None:
    """ValueError unless every anchor position lies in [low, high]."""
    if bool((anchors < low).any()) or bool((anchors > high).any()):
        raise ValueError(f"anchor_pos must lie in [{low}, {high}] for {who}, got {anchors.tolist()}")


def anchor_batch(block_ids: Tensor, anchor_pos: Tensor, low: int, high: int) -> None:
    """ValueError unless blocks [B, G] come with anchors [B], or [B, A, G] with [B, A], each in [low, high]."""
    if block_ids.dim() not in (2, 3) or tuple(anchor_pos.shape) != tuple(block_ids.shape[:-1]):
        raise ValueError(f"block ids must be [B, gamma] with anchor_pos [B], or [B, A, gamma] with [B, A]; got "
                         f"{tuple(block_ids.shape)} and {tuple(anchor_pos.shape)}")
    anchor_positions(anchor_pos, low, high, "this context")


def drafter_started(context_length: int | None, who: str) -> None:
    """ValueError when a drafter is used before `start` (it then holds no context: None)."""
    if context_length is None:
        raise ValueError(f"{who} used before start(); call start(prompt_ids, target_hidden) first")


def drafter_round(context_length: int | None, context_ids: Tensor, gamma: int, block_size: int | None,
                  who: str) -> None:
    """ValueError unless the drafter was started, holds context for every position before the
    anchor (the last of `context_ids`), and 1 <= gamma (<= block_size, when it has one)."""
    drafter_started(context_length, who)
    if block_size is None:
        positive_int(gamma, "gamma")
    elif not 1 <= gamma <= block_size:
        raise ValueError(f"gamma must be in [1, block_size = {block_size}] for this drafter, got {gamma}")
    anchor_position = context_ids.shape[0] - 1
    if context_length != anchor_position:
        raise ValueError(f"the drafter holds context for {context_length} positions but the anchor sits at "
                         f"position {anchor_position}; expected equal (did the loop skip accept()?)")


def accepted_rows(n_accepted: int, rows: int) -> None:
    """ValueError unless `accept` got hidden states for the anchor and each accepted draft."""
    if rows != n_accepted + 1:
        raise ValueError(f"expected hidden states for n_accepted + 1 = {n_accepted + 1} positions, got {rows}")


def one_of(value: Any, choices: Sequence[Any], what: str) -> None:
    """ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; expected one of {tuple(choices)}")


def confidence_head(head: Any) -> None:
    """ValueError when a DSpark drafter without a confidence head is asked for confidences."""
    if head is None:
        raise ValueError("this DSpark drafter has no confidence head; build it with confidence_head=True "
                         "or call add_confidence_head()")


def same_shapes(ours: dict[str, Any], theirs: dict[str, Any], what: str) -> None:
    """ValueError unless two state_dicts' key -> shape maps agree; names the first keys that differ."""
    if ours != theirs:
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        raise ValueError(f"{what}: keys {differ[:4]} differ in name or shape")


# ----------------------------------------------------------------------------------------
# Training (`training`, `resume`)
# ----------------------------------------------------------------------------------------


def training_sequences(sequences: Sequence[Tensor], prompt_lengths: Sequence[int]) -> None:
    """ValueError unless each sequence is 1-D with a prompt of >= 1 token and a reply of >= 2
    (one anchor and one target), one prompt length per sequence."""
    if len(sequences) != len(prompt_lengths):
        raise ValueError(f"{len(sequences)} sequences but {len(prompt_lengths)} prompt lengths")
    for index, (seq, prompt_length) in enumerate(zip(sequences, prompt_lengths)):
        if seq.dim() != 1 or not 1 <= prompt_length <= seq.shape[0] - 2:
            raise ValueError(f"sequence {index}: needs a 1-D tensor with a prompt of >= 1 token and a reply of "
                             f">= 2 tokens (one anchor and one target), got length {tuple(seq.shape)} and "
                             f"prompt {prompt_length}")


def drafters_to_train(drafters: Any, target: Any) -> tuple[int, ...] | None:
    """The target layers the drafters (a mapping name -> drafter) read, checked: at least one
    drafter, all reading the same layers (they share one view of the target), and none holding
    a target parameter (the target, its embedding and LM head included, stays frozen)."""
    positive_int(len(drafters), "the number of drafters")
    layers = {None if d.target_layer_ids is None else tuple(d.target_layer_ids) for d in drafters.values()}
    if len(layers) != 1:
        raise ValueError(f"drafters trained together must read the same target layers, got {sorted(map(str, layers))}")
    target_parameters = {id(p) for p in target.parameters()}
    for drafter in drafters.values():
        shared = [name for name, p in drafter.named_parameters() if id(p) in target_parameters]
        if shared:
            raise ValueError(f"drafter parameters {shared} belong to the target; the target must stay frozen")
    return layers.pop()


def checkpoint_runs(saved: Any, runs: Any, path: Any) -> None:
    """ValueError unless the checkpoint at `path` holds exactly the named runs being trained."""
    if set(saved) != set(runs):
        raise ValueError(f"{path} holds drafters {sorted(saved)}, not {sorted(runs)}; delete it")


def device(name: str) -> torch.device:
    """`name` as a torch device; ValueError unless torch knows it and, for CUDA, a GPU is visible."""
    try:
        resolved = torch.device(name)
    except RuntimeError as exc:
        raise ValueError(f"DEVICE={name!r} is not a torch device (try 'auto', 'cpu' or 'cuda')") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"DEVICE={name!r} but no CUDA GPU is visible; use DEVICE='auto' or 'cpu'")
    return resolved


def finite_loss(loss: float, who: str) -> None:
    """RuntimeError if a training run `who` ended with a non-finite loss."""
    if not math.isfinite(loss):
        raise RuntimeError(f"{who}: training diverged (final loss {loss})")
