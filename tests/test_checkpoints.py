"""DeepSpec-format checkpoints (chapter 07): our drafters round-trip through the released layout,
and every kind of mismatch fails with a message that names it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

from dspark_lite.harness.gpu import checkpoints, released_config, weights
from dspark_lite.harness.gpu.weights import CheckpointError
from dspark_lite.dflash import DFlashDrafter
from dspark_lite.dspark import DSparkDrafter
from dspark_lite.hidden_drafter import DrafterConfig

QWEN3_4B = Path(__file__).resolve().parent.parent / "data" / "qwen3_4b"


def tiny_target(vocab: int = 97, hidden: int = 32, layers: int = 3, seed: int = 0) -> Qwen3ForCausalLM:
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, intermediate_size=48, max_position_embeddings=128,
                         tie_word_embeddings=True)
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).eval()


def tiny_dspark(target: Qwen3ForCausalLM, head_type: str = "markov", confidence: bool = True) -> DSparkDrafter:
    cfg = DrafterConfig(target_layer_ids=(0, 1), mask_token_id=5, gamma=4, num_layers=2, head_type=head_type,
                       head_rank=6, confidence_head=confidence)
    drafter = DSparkDrafter(target, cfg, seed=3)
    with torch.no_grad():  # non-zero biases and norms, so that a dropped tensor would show
        for param in drafter.parameters():
            param.add_(0.05 * torch.randn_like(param))
    return drafter


@pytest.fixture
def target() -> Qwen3ForCausalLM:
    return tiny_target()


@pytest.fixture
def saved(tmp_path: Path, target: Qwen3ForCausalLM) -> tuple[DSparkDrafter, Path]:
    drafter = tiny_dspark(target)
    return drafter, checkpoints.save_released(drafter, tmp_path / "dspark", target.config)


def _rewrite(folder: Path, edit) -> None:
    path = folder / weights.WEIGHTS_FILE
    tensors = load_file(str(path))
    edit(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize("head_type", ["markov", "rnn"])
def test_round_trip_in_released_layout(tmp_path: Path, target: Qwen3ForCausalLM, head_type: str) -> None:
    drafter = tiny_dspark(target, head_type)
    folder = checkpoints.save_released(drafter, tmp_path / head_type, target.config)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    keys = set(weights.checkpoint_shapes(folder))
    assert {"embed_tokens.weight", "lm_head.weight", "fc.weight", "hidden_norm.weight", "norm.weight",
            "markov_head.markov_w1.weight", "markov_head.markov_w2.weight", "confidence_head.proj.weight",
            "confidence_head.proj.bias", "layers.1.self_attn.k_norm.weight", "layers.0.mlp.down_proj.weight"} <= keys
    loaded = checkpoints.load_released(folder, target)
    assert isinstance(loaded, DSparkDrafter) and loaded.cfg == drafter.cfg
    for (k1, v1), (k2, v2) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1
    context = checkpoints_context(target, loaded)
    block = loaded.make_block_ids(torch.tensor([7]))
    with torch.inference_mode():
        torch.testing.assert_close(loaded.block_logits(context, block, torch.tensor([10])),
                                   drafter.block_logits(context, block, torch.tensor([10])), rtol=0, atol=0)


def checkpoints_context(target: Qwen3ForCausalLM, drafter: DFlashDrafter) -> torch.Tensor:
    from dspark_lite.speculative import target_hidden

    ids = torch.arange(3, 15)
    return target_hidden(target, ids, drafter.target_layer_ids)[None]


def test_config_fields_map_onto_ours(saved: tuple[DSparkDrafter, Path], target: Qwen3ForCausalLM) -> None:
    drafter, folder = saved
    raw = json.loads((folder / "config.json").read_text())
    assert raw["architectures"] == ["Qwen3DSparkModel"] and raw["num_hidden_layers"] == 2
    assert raw["block_size"] == 4 and raw["target_layer_ids"] == [0, 1] and raw["mask_token_id"] == 5
    assert raw["markov_rank"] == 6 and raw["markov_head_type"] == "vanilla"
    assert raw["enable_confidence_head"] is True and raw["confidence_head_with_markov"] is True
    assert raw["num_target_layers"] == 3 and raw["tie_word_embeddings"] is False
    released = released_config.read_released_config(folder)
    assert released.kind == "dspark" and released.num_target_layers == 3
    assert released_config.drafter_config(released, target.config) == drafter.cfg


def test_dflash_round_trip_has_no_heads(tmp_path: Path, target: Qwen3ForCausalLM) -> None:
    drafter = DFlashDrafter(target, DrafterConfig(target_layer_ids=(1,), mask_token_id=4, gamma=3), seed=1)
    folder = checkpoints.save_released(drafter, tmp_path / "dflash", target.config)
    raw = json.loads((folder / "config.json").read_text())
    assert raw["markov_rank"] == 0 and raw["enable_confidence_head"] is False and "markov_head_type" not in raw
    loaded = checkpoints.load_released(folder, target)
    assert type(loaded) is DFlashDrafter and loaded.cfg == drafter.cfg


def test_released_qwen3_4b_configs_map_onto_ours() -> None:
    target_config = Qwen3Config(**json.loads((QWEN3_4B / "config.json").read_text()))
    dspark = released_config.read_released_config(QWEN3_4B / "dspark_qwen3_4b_block7")
    assert released_config.drafter_config(dspark, target_config) == DrafterConfig(
        target_layer_ids=(1, 9, 17, 25, 33), mask_token_id=151669, gamma=7, num_layers=5,
        head_type="markov", head_rank=256, confidence_head=True)
    dflash = released_config.read_released_config(QWEN3_4B / "dflash_qwen3_4b_block7")
    assert released_config.drafter_config(dflash, target_config) == DrafterConfig(
        target_layer_ids=(1, 9, 17, 25, 33), mask_token_id=151669, gamma=7, num_layers=5)


def test_renamed_key_fails_naming_the_key(saved: tuple[DSparkDrafter, Path], target: Qwen3ForCausalLM) -> None:
    _, folder = saved
    _rewrite(folder, lambda t: t.__setitem__("context_proj.weight", t.pop("fc.weight")))
    with pytest.raises(CheckpointError, match=r"missing key 'fc.weight' \(expected shape \[32, 64\]"):
        checkpoints.load_released(folder, target)


def test_unexpected_key_fails_naming_it(saved: tuple[DSparkDrafter, Path], target: Qwen3ForCausalLM) -> None:
    _, folder = saved
    _rewrite(folder, lambda t: t.__setitem__("markov_head.gate_proj.weight", torch.zeros(6, 38)))
    with pytest.raises(CheckpointError, match=r"unexpected key 'markov_head.gate_proj.weight' \(found shape \[6, 38\]"):
        checkpoints.load_released(folder, target)


def test_wrong_shape_fails_naming_both_shapes(saved: tuple[DSparkDrafter, Path], target: Qwen3ForCausalLM) -> None:
    _, folder = saved
    _rewrite(folder, lambda t: t.__setitem__("markov_head.markov_w1.weight", torch.zeros(97, 7)))
    with pytest.raises(CheckpointError, match=r"'markov_head.markov_w1.weight'.*expected \[97, 6\], found \[97, 7\]"):
        checkpoints.load_released(folder, target)


@pytest.mark.parametrize("other", [dict(vocab=101), dict(hidden=40)])
def test_drafter_of_another_target_fails_saying_so(saved: tuple[DSparkDrafter, Path], other: dict) -> None:
    _, folder = saved
    with pytest.raises(CheckpointError, match="another target"):
        checkpoints.load_released(folder, tiny_target(**other))


def test_shared_weights_of_another_shape_say_another_target(saved: tuple[DSparkDrafter, Path],
                                                             target: Qwen3ForCausalLM) -> None:
    _, folder = saved
    _rewrite(folder, lambda t: t.__setitem__("embed_tokens.weight", torch.zeros(120, 32)))
    with pytest.raises(CheckpointError, match=r"embed_tokens.weight .* \[120, 32\].*\[97, 32\].*another target"):
        checkpoints.load_released(folder, target)


def test_unsupported_fields_fail_clearly(saved: tuple[DSparkDrafter, Path], target: Qwen3ForCausalLM) -> None:
    _, folder = saved
    raw = json.loads((folder / "config.json").read_text())
    for field, value, message in (("markov_head_type", "gated", "gated"),
                                  ("confidence_head_with_markov", False, "confidence_head_with_markov")):
        edited = dict(raw, **{field: value})
        with pytest.raises(CheckpointError, match=message):
            released_config.drafter_config(released_config.parse_released_config(edited), target.config)
    with pytest.raises(CheckpointError, match="lacks the field 'block_size'"):
        released_config.parse_released_config({k: v for k, v in raw.items() if k != "block_size"})


def test_hub_id_offline_never_downloads(monkeypatch: pytest.MonkeyPatch, target: Qwen3ForCausalLM,
                                        tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    with pytest.raises(FileNotFoundError, match="pass a local folder"):
        checkpoints.load_released("deepseek-ai/dspark_qwen3_4b_block7", target)
    with pytest.raises(FileNotFoundError, match="neither a folder nor a hub id"):
        checkpoints.load_released(str(tmp_path / "no" / "such" / "folder"), target)


def test_qwen3_4b_shaped_drafter_has_about_1_39b_parameters() -> None:
    """Counted on the meta device: nothing is allocated."""
    config = Qwen3Config(**json.loads((QWEN3_4B / "config.json").read_text()))
    with torch.device("meta"):
        target = Qwen3ForCausalLM(config)
    released = released_config.read_released_config(QWEN3_4B / "dspark_qwen3_4b_block7")
    drafter = checkpoints.build_drafter(released, target, dtype=torch.bfloat16)
    assert drafter.fc.weight.device.type == "meta"
    shapes = checkpoints.expected_shapes(drafter)
    total = sum(torch.Size(s).numel() for s in shapes.values())
    assert 1.38e9 < total < 1.40e9, total
    assert shapes["markov_head.markov_w1.weight"] == (151936, 256)
    assert shapes["confidence_head.proj.weight"] == (1, 2560 + 256)
    assert shapes["fc.weight"] == (2560, 5 * 2560)


def _float32_inv_freq(drafter: DFlashDrafter) -> torch.Tensor:
    with torch.device("cpu"):
        return type(drafter.rotary_emb)(drafter.rotary_emb.config).inv_freq


def test_rope_frequencies_stay_float32_in_bf16(saved: tuple[DSparkDrafter, Path]) -> None:
    """Issue 19, item 7: a bf16 drafter keeps float32 RoPE frequencies (DeepSpec's evaluator does),
    whether built with random weights or loaded from a released folder."""
    drafter, folder = saved
    bf16_target = tiny_target().to(torch.bfloat16)
    built = checkpoints.build_drafter(released_config.read_released_config(folder), bf16_target)
    loaded = checkpoints.load_released(folder, bf16_target)
    for model in (built, loaded):
        assert model.fc.weight.dtype == torch.bfloat16
        assert model.rotary_emb.inv_freq.dtype == torch.float32
        assert torch.equal(model.rotary_emb.inv_freq, _float32_inv_freq(model))
    rounded = _float32_inv_freq(built).to(torch.bfloat16).float()
    assert not torch.equal(rounded, _float32_inv_freq(built)), "bf16 rounding must change some frequency"


def test_loader_reads_only_the_compared_rows_and_builds_on_meta(saved: tuple[DSparkDrafter, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 11: the shared embedding / LM-head copies are never read whole (16 rows are
    sliced), and the drafter is initialised on the meta device (no random weights first)."""
    import safetensors

    from dspark_lite import hidden_drafter

    drafter, folder = saved
    whole, devices = [], []
    real_open, real_init = safetensors.safe_open, hidden_drafter.init_linear_weights

    class Spy:
        def __init__(self, *args, **kwargs) -> None:
            self.inner = real_open(*args, **kwargs)

        def __enter__(self):
            self.handle = self.inner.__enter__()
            return self

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

        def keys(self):
            return self.handle.keys()

        def get_slice(self, key):
            return self.handle.get_slice(key)

        def get_tensor(self, key):
            whole.append(key)
            return self.handle.get_tensor(key)

    def init_spy(module, std, seed):
        devices.append(next(module.parameters()).device.type)
        return real_init(module, std, seed)

    monkeypatch.setattr(safetensors, "safe_open", Spy)
    monkeypatch.setattr(hidden_drafter, "init_linear_weights", init_spy)
    loaded = checkpoints.load_released(folder, tiny_target())
    assert whole and not set(whole) & set(released_config.SHARED_KEYS), whole
    assert devices and set(devices) == {"meta"}, devices
    assert all(p.device.type == "cpu" for p in loaded.parameters())
    for (k1, v1), (k2, v2) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert k1 == k2 and torch.equal(v1, v2), k1


def test_a_file_without_the_targets_copies_loads_with_the_shared_check_on(saved, target, recwarn) -> None:
    """Issue 31, item 9: a released file written without embed_tokens / lm_head (the loader never reads
    them) loads, with `check_shared` on, to the same drafter; there is nothing to compare, so no warning."""
    drafter, folder = saved
    _rewrite(folder, lambda tensors: [tensors.pop(key) for key in released_config.SHARED_KEYS])
    assert not set(released_config.SHARED_KEYS) & set(weights.checkpoint_shapes(folder))
    loaded = checkpoints.load_released(folder, target, check_shared=True)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), drafter.state_dict().values()))
    assert not [w for w in recwarn if "differs from the target" in str(w.message)]
