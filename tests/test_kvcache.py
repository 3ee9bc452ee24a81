"""Tests for dspark_lite.kvcache and its KV cache self-check `kvcache.check_kv_cache`
(issue 19, item 1), on a tiny random Qwen3 at the installed transformers."""
from __future__ import annotations

import inspect

import pytest
import torch
import transformers
from test_speculative import tiny_qwen3
from transformers import DynamicCache, Qwen3ForCausalLM

from dspark_lite import kvcache
from dspark_lite.kvcache import check_kv_cache

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = torch.tensor([3, 14, 15, 9, 2, 6, 5, 3])


@pytest.fixture(scope="module")
def target():
    return tiny_qwen3(0, logit_scale=20.0)


def test_cache_keyword_is_the_one_the_installed_forward_takes():
    parameters = inspect.signature(Qwen3ForCausalLM.forward).parameters
    assert kvcache.CACHE_KEYWORD in parameters
    expected = "cache" if "cache" in parameters else "past_key_values"
    assert kvcache.CACHE_KEYWORD == expected and kvcache.cache_kwarg(None) == {expected: None}


def test_the_cache_handed_over_is_the_one_filled(target):
    cache = kvcache.new_cache(target)
    with torch.inference_mode():
        target(input_ids=PROMPT[None], **kvcache.cache_kwarg(cache), use_cache=True, logits_to_keep=1)
    assert cache.get_seq_length() == PROMPT.shape[0]


def test_remove_tokens_removes_exactly_n_and_nothing_for_zero(target):
    cache = kvcache.new_cache(target)
    with torch.inference_mode():
        target(input_ids=PROMPT[None], **kvcache.cache_kwarg(cache), use_cache=True)
    kvcache.remove_tokens(cache, 0)
    assert cache.get_seq_length() == 8
    kvcache.remove_tokens(cache, 3)
    assert cache.get_seq_length() == 5
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="integer >= 0"):
            kvcache.remove_tokens(cache, bad)


def test_check_kv_cache_passes_on_a_working_cache(target):
    assert 0 <= check_kv_cache(target, PROMPT) < 1e-5
    assert check_kv_cache(target, PROMPT[None, :3]) < 1e-5
    with pytest.raises(ValueError, match="at least 3 tokens"):
        check_kv_cache(target, PROMPT[:2])


def test_check_kv_cache_stops_when_the_forward_ignores_the_cache(target, monkeypatch):
    """What happened on transformers <= 5.23 with `cache=`: the keyword is swallowed and the
    cache stays empty. The check names the transformers version."""
    monkeypatch.setattr(kvcache, "CACHE_KEYWORD", "kv_cache_under_a_wrong_name")
    with pytest.raises(RuntimeError, match=f"transformers {transformers.__version__}.*holds 0 positions"):
        check_kv_cache(target, PROMPT)


def test_check_kv_cache_stops_when_a_rollback_keeps_the_wrong_positions(target, monkeypatch):
    """A crop that removes the right number of positions from the wrong end leaves the length
    right and the logits wrong: the distributions' total variation catches it."""
    def crop_from_the_front(self, tokens_to_remove: int) -> None:
        for layer in self.layers:
            layer.keys, layer.values = layer.keys[..., -tokens_to_remove:, :], layer.values[..., -tokens_to_remove:, :]

    monkeypatch.setattr(DynamicCache, "crop", crop_from_the_front)
    with pytest.raises(RuntimeError, match="total variation"):
        check_kv_cache(target, PROMPT)
