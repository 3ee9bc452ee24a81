"""The KV cache across transformers versions: one keyword, one crop, and a self-check
(chapter 02, which the engine's rounds rely on; chapter 07 runs the self-check before any GPU
measurement).

Every forward in the package that reads or extends a KV cache hands it over with
`cache_kwarg(cache)`, and every rollback goes through `remove_tokens(cache, n)`. The book pins
transformers 5.24.0; DeepSpec's evaluation pins 5.10.2; both work, and the tests run the
engine at both (tests/test_transformers_range.py). What differs, read in transformers' own
source (models/qwen3/modeling_qwen3.py and cache_utils.py of each release):

- The keyword. Up to 5.23 a model's forward takes the cache as `past_key_values=`; from 5.24
  it is `cache=` (`past_key_values=` stays as a deprecated alias until 5.40). A keyword the
  forward does not know is swallowed by its `**kwargs` without an error: handing `cache=` to
  5.23 leaves our cache empty, the model builds a fresh one per call, and every block is
  scored as if it were the whole context (on 5.10.2 and 5.17.0 the next crop of the empty
  cache then fails with "'NoneType' object is not subscriptable"; 5.23 skips the crop of an
  empty layer and goes on with wrong logits). `CACHE_KEYWORD` is chosen once, at import, from
  the installed Qwen3 forward's signature.
- `DynamicCache.crop`. Up to 5.14 `crop(k)` keeps the first k tokens when k >= 0 and removes
  -k tokens when k < 0, so `crop(0)` EMPTIES the cache. From 5.15 the argument is a count to
  remove: `crop(-n)` removes n, `crop(0)` does nothing, and a positive count is deprecated
  (5.15-5.17 read it the old way, with a warning) and rejected later (5.20 raises). Negative
  counts mean the same on every version, so `remove_tokens` passes -n and skips n = 0.
- `logits_to_keep` (an int: keep the logits of the last k positions only; 0 keeps all) is a
  keyword of the causal-LM forward on every 5.x release; prefills pass `logits_to_keep=1`.

`check_kv_cache` runs a prompt cached and uncached and stops with an error naming the
transformers version when they disagree.
"""
from __future__ import annotations

import inspect

import torch
import transformers
from torch import Tensor
from transformers import Cache, DynamicCache, PreTrainedModel, Qwen3ForCausalLM

from . import checks
from .runtime import model_device
from .sampling import total_variation


def _cache_keyword() -> str:
    """The name under which this transformers' forward takes the KV cache."""
    parameters = inspect.signature(Qwen3ForCausalLM.forward).parameters
    for name in ("cache", "past_key_values"):
        if name in parameters:
            return name
    raise ImportError(
        f"transformers {transformers.__version__}: Qwen3ForCausalLM.forward takes neither `cache` nor "
        "`past_key_values`; dspark_lite supports transformers 5.10.2 to 5.24.0"
    )


CACHE_KEYWORD: str = _cache_keyword()


def new_cache(model: PreTrainedModel) -> DynamicCache:
    """An empty dynamic KV cache laid out for `model`'s layers."""
    return DynamicCache(config=model.config)


def cache_kwarg(cache: Cache | None) -> dict[str, Cache | None]:
    """`{CACHE_KEYWORD: cache}`: splat it into a forward call, `model(ids, **cache_kwarg(cache),
    use_cache=True)`, to hand over the cache under the name the installed transformers reads
    (see the module doc)."""
    return {CACHE_KEYWORD: cache}


def remove_tokens(cache: Cache, n: int) -> None:
    """Drop the last `n` >= 0 positions from every layer of `cache`. `n = 0` is a no-op on every
    transformers version (`cache.crop(0)` empties the cache up to 5.14)."""
    n = checks.positive_int(n, "n (positions to remove)", minimum=0)
    if n:
        cache.crop(-n)


# ----------------------------------------------------------------------------------------
# The self-check
# ----------------------------------------------------------------------------------------

# Largest total variation allowed between cached and uncached next-token distributions: a
# cache that works differs by rounding only; one that is ignored or emptied changes the
# context each position sees, which moves a trained model's distributions by far more.
KV_CHECK_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 0.05, torch.bfloat16: 0.1}
SUPPORTED = "dspark_lite supports transformers 5.10.2 to 5.24.0 (see dspark_lite/kvcache.py)"


@torch.inference_mode()
def check_kv_cache(target: PreTrainedModel, prompt_ids: Tensor) -> float:
    """Score `prompt_ids` ([T] or [1, T], T >= 3) as the engine does, a prefill of all but the
    last (up to) three tokens followed by single-token steps, then a rollback of two positions
    (`remove_tokens`, after a no-op removal of 0) and a two-token block, and compare every
    next-token distribution with one uncached forward of the whole prompt. Returns the largest
    total variation between them; RuntimeError naming the transformers version when it exceeds
    KV_CHECK_TOLERANCE for the target's dtype, or when the cache does not hold the prompt
    afterwards (a forward that ignored the cache keyword)."""
    ids = checks.prompt(prompt_ids, min_length=3).to(model_device(target))
    length, prefix = ids.shape[0], max(1, ids.shape[0] - 3)
    reference = target(input_ids=ids[None]).logits[0]  # [T, V]
    cache = new_cache(target)
    rows = [target(input_ids=ids[None, :prefix], **cache_kwarg(cache), use_cache=True, logits_to_keep=1).logits[0]]
    for position in range(prefix, length):
        rows.append(target(input_ids=ids[None, position:position + 1], **cache_kwarg(cache), use_cache=True).logits[0])
    remove_tokens(cache, 0)
    remove_tokens(cache, 2)
    rows.append(target(input_ids=ids[None, length - 2:], **cache_kwarg(cache), use_cache=True).logits[0])
    cached = torch.softmax(torch.cat(rows).float(), -1)  # [N, V]
    uncached = torch.softmax(torch.cat([reference[prefix - 1:], reference[length - 2:]]).float(), -1)  # [N, V]
    tv = total_variation(cached, uncached)  # [N]
    dtype = next(target.parameters()).dtype
    worst, tolerance = float(tv.max()), KV_CHECK_TOLERANCE.get(dtype, 0.1)
    where = (f"transformers {transformers.__version__} (torch {torch.__version__}, {str(dtype).replace('torch.', '')}, "
             f"cache passed as `{CACHE_KEYWORD}=`)")
    if cache.get_seq_length() != length:
        raise RuntimeError(f"KV cache self-check failed on {where}: after a {length}-token prompt the cache holds "
                           f"{cache.get_seq_length()} positions; the forward did not use the cache it was given. "
                           f"{SUPPORTED}")
    if not worst <= tolerance:
        raise RuntimeError(f"KV cache self-check failed on {where}: cached and uncached next-token distributions "
                           f"differ by total variation {worst:.3g} (allowed {tolerance:g}); every tau measured "
                           f"with this cache would be wrong. {SUPPORTED}")
    return worst
