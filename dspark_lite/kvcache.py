"""The KV cache across transformers versions: one keyword, one crop (chapter 02).

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

`check_kv_cache` in `speculative` runs a prompt cached and uncached and stops with an error
naming the transformers version when they disagree.
"""
from __future__ import annotations

import inspect

import transformers
from transformers import Cache, DynamicCache, PreTrainedModel, Qwen3ForCausalLM


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
    """An empty dynamic KV cache laid out for `model`'s layers (chapter 02)."""
    return DynamicCache(config=model.config)


def cache_kwarg(cache: Cache | None) -> dict[str, Cache | None]:
    """`{CACHE_KEYWORD: cache}`: splat it into a forward call, `model(ids, **cache_kwarg(cache),
    use_cache=True)`, to hand over the cache under the name the installed transformers reads
    (chapter 02; see the module doc)."""
    return {CACHE_KEYWORD: cache}


def remove_tokens(cache: Cache, n: int) -> None:
    """Drop the last `n` >= 0 positions from every layer of `cache` (chapter 02). `n = 0` is a
    no-op on every transformers version (`cache.crop(0)` empties the cache up to 5.14)."""
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n (positions to remove) must be an integer >= 0, got {n!r}")
    if n:
        cache.crop(-int(n))
