"""The validators several modules share (chapter 02 shows the engine's door), one per concept.
Two kinds, told apart by their names: a function named for a value returns that value checked
and converted (`positive_int`, `in_interval`, `positive_finite`, `float_array`, `probability`,
`confidences`, `logits`, `lengths_in_range`, `prompt`, `end_ids`, `layer_ids`, and
`speculation_prompt`: the engine's arguments checked, the prompt returned); a function named
`validate_*` returns nothing and raises (`validate_requests_fit`, `validate_generation`,
`validate_temperature`, `validate_draft`, `validate_draft_length`, `validate_finite_loss`). One
wording for one mistake, saying what was wrong and where.

Every other module checks its own inputs at its doors, inline or in a short checks section at
its end; the drafters' protocol invariants (`drafter_round` and its kin) sit with the protocol
in `hidden_drafter`. Two modules near the line limit keep their checks here for now:
calibration (chapter 05: `accepted_counts`, `calibration_split`, `fitted_logits`,
`weighted_values`, `outcomes`) and the engine (`speculation_prompt`, `measured_seconds`,
`validate_draft_length`, `finite_at_least`, and `validate_draft`, the per-round check the engine
runs only when asked).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

PROB_SUM_TOLERANCE = 1e-3  # how far a draft's probability row may sum from 1


# ----------------------------------------------------------------------------------------
# Numbers, arrays and confidences
# ----------------------------------------------------------------------------------------


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
    return _finite_where(values, name, lambda arr: arr > 0, "positive and finite")


def finite_at_least(values: Any, name: str, low: float) -> np.ndarray:
    """`values` (a number or an array) as float64; ValueError unless every one is finite and >= `low`."""
    return _finite_where(values, name, lambda arr: arr >= low, f"finite and >= {low:g}")


def _finite_where(values: Any, name: str, holds: Any, wording: str) -> np.ndarray:
    """`values` as float64; ValueError (`name` must be `wording`) unless every one is finite and `holds`."""
    arr = float_array(values, name)
    if not np.isfinite(arr).all() or not np.all(holds(arr)):
        raise ValueError(f"{name} must be {wording}; got {arr.tolist()}")
    return arr


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


def probability(value: Any, name: str) -> float:
    """`value` as a float; ValueError unless it is a number in [0, 1] (`in_interval`'s wording)."""
    return in_interval(value, name, 0.0, 1.0)


def logits(z: Any, *, allow_1d: bool = False, name: str = "confidence logits") -> np.ndarray:
    """Confidence logits z[N, gamma] (or z[gamma] with `allow_1d`) as float64: no NaN (a
    saturated head's +-inf is allowed: sigmoid gives exactly 1 or 0). ValueError otherwise."""
    arr = float_array(z, name)
    _block_shaped(arr, name, allow_1d)
    if np.isnan(arr).any():
        i = int(np.flatnonzero(np.isnan(arr))[0])
        raise ValueError(f"{name} must not be NaN (a position without a confidence); got NaN at {_where(i, arr.shape)}")
    return arr


def validate_requests_fit(requests: int, curve: Any) -> None:
    """ValueError unless R requests, one anchor each, fit the step curve: min_batch <= R <= max_batch."""
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need a batch of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")


# ----------------------------------------------------------------------------------------
# Calibration (`calibration`: its metrics and each calibrator's `fit` and `transform`)
# ----------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------
# The engine
# ----------------------------------------------------------------------------------------


def validate_temperature(temperature: float) -> None:
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


def validate_generation(max_new_tokens: int, temperature_: float) -> None:
    """ValueError unless max_new_tokens >= 1 and temperature >= 0."""
    positive_int(max_new_tokens, "max_new_tokens")
    validate_temperature(temperature_)


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


def speculation_prompt(target_config: Any, drafter: Any, prompt_ids: Tensor, max_new_tokens: int, gamma: int,
                temperature_: float) -> Tensor:
    """The speculative engine's arguments (`speculative.speculative_generate`): the generation
    length and temperature, gamma >= 1, a drafter over the target's vocabulary reading existing
    target layers; returns the prompt as a LongTensor [T]."""
    validate_generation(max_new_tokens, temperature_)
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


def validate_draft_length(draft_gamma: int, gamma: int) -> None:
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


def validate_draft(draft: Any, target_logits: Tensor) -> None:
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
# Training (`training`, and the harness's toy target)
# ----------------------------------------------------------------------------------------


def validate_finite_loss(loss: float, who: str) -> None:
    """RuntimeError if a training run `who` ended with a non-finite loss."""
    if not math.isfinite(loss):
        raise RuntimeError(f"{who}: training diverged (final loss {loss})")
