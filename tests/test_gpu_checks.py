"""Issue 31 (chapter 07): every setting of a GPU run is checked before any weight is read, fp16 is
refused and an overflow is named as one, the drafter files may leave out the target's copies, the
page prints no NaN and no machine paths, and tau is measured untimed with a timed sample and an
estimate of the run's wall time. No GPU needed: a CUDA device is faked where the check needs one."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import transformers

from dspark_lite.harness.gpu import checkpoints, released_config, weights
from dspark_lite.harness.gpu import evalsets
from dspark_lite.harness.gpu import headless, loading, measure, memory, preflight
from dspark_lite.harness import result_files
from dspark_lite.harness.toy.profiles import get_profile
from room_patch import gpu_room, patch_room

REPO = Path(__file__).resolve().parent.parent
CUDA = torch.device("cuda:0")
GiB = 2**30


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way chapter 07 reads weights fails the test if it runs."""
    import safetensors
    import safetensors.torch

    def forbidden(*args, **kwargs):
        pytest.fail("weights were read (or a model was loaded) before the setup check refused the settings")

    patch_room(monkeypatch, gpu_room, "load_target", forbidden)
    patch_room(monkeypatch, gpu_room, "load_world", forbidden)
    patch_room(monkeypatch, gpu_room, "random_target", forbidden)
    monkeypatch.setattr(checkpoints, "load_released", forbidden)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", forbidden)
    monkeypatch.setattr(safetensors, "safe_open", forbidden)
    monkeypatch.setattr(safetensors.torch, "load_file", forbidden)


def fake_gpu(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int] = (9, 0), free_gib: float = 80.0) -> None:
    """A CUDA device as check_setup sees it: its compute capability, free memory and name."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the command line's `launch_device` asks
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    patch_room(monkeypatch, gpu_room, "free_memory_bytes", lambda device: int(free_gib * GiB) if device.type == "cuda" else None)
    patch_room(monkeypatch, gpu_room, "gpu_name", lambda device: "NVIDIA H100 80GB HBM3" if device.type == "cuda" else "cpu")


def model_folders(root: Path) -> dict[str, Path]:
    """Folders that look like the released models (configs, a tokenizer file, weight files that
    hold no tensor): a check that reads only what it may passes them; a loader would fail on them."""
    target = root / "Qwen3-4B"
    target.mkdir(parents=True)
    shutil.copy(loading.QWEN3_4B / "config.json", target / "config.json")
    (target / "tokenizer_config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"not read")
    folders = {"target": target}
    for kind, hub_id in loading.DRAFTER_IDS.items():
        folder = root / Path(hub_id).name
        folder.mkdir()
        shutil.copy(loading.QWEN3_4B / Path(hub_id).name / "config.json", folder / "config.json")
        (folder / "model.safetensors").write_bytes(b"not read")
        folders[kind] = folder
    return folders


def eval_clone(root: Path, skip: str | None = None) -> Path:
    (root / "eval_datasets").mkdir(parents=True)
    for name in evalsets.TABLE1_ORDER:
        if name != skip:
            (root / "eval_datasets" / f"{name}.jsonl").write_text('{"turns": ["a real prompt"]}\n')
    return root


def good_real(tmp_path: Path) -> dict:
    folders = model_folders(tmp_path / "models")
    return dict(target=str(folders["target"]), drafters={k: str(folders[k]) for k in loading.DRAFTER_IDS},
                eval_folder=eval_clone(tmp_path / "DeepSpec"), out=tmp_path / "out" / "run.json")


def test_a_good_real_setup_passes_without_reading_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          no_weights: None) -> None:
    fake_gpu(monkeypatch)
    setup = preflight.check_setup("real", CUDA, "full", **good_real(tmp_path))
    assert setup.mode == "real" and setup.dtype == torch.bfloat16 and setup.prompt_source == "deepspec"
    assert setup.protocol == "subset" and setup.study.new_tokens == get_profile("full").gpu.new_tokens
    assert 9 < setup.need_gib < 80 and setup.free_gib == pytest.approx(80)
    full = preflight.check_setup("real", CUDA, "full", **good_real(tmp_path / "again"), prompts_per_benchmark=None,
                           new_tokens=2048)
    assert full.protocol == "table1" and dict(full.counts) == evalsets.DEEPSPEC_COUNTS
    assert all(not line.count(str(tmp_path)) for line in setup.describe())


BAD_SETTINGS = {  # name: (how to break the good setup, the parameter the error must name)
    "mode on a CPU": (lambda kw, tmp: {**kw, "device": torch.device("cpu")}, "Set MODE (command line: --mode)"),
    "no prompt source": (lambda kw, tmp: {**kw, "eval_folder": None},
                         "Set EVAL_FOLDER, DOWNLOAD_PROMPTS or ALLOW_FIXTURE"),
    "eval folder missing": (lambda kw, tmp: {**kw, "eval_folder": tmp / "nowhere"}, "Set EVAL_FOLDER"),
    "eval folder lacks a file": (lambda kw, tmp: {**kw, "eval_folder": eval_clone(tmp / "short", skip="mbpp")},
                                 "mbpp.jsonl"),
    "download while offline": (lambda kw, tmp: {**kw, "eval_folder": None, "download_prompts": True}, "offline"),
    "results folder unwritable": (lambda kw, tmp: {**kw, "out": tmp / "a_file" / "run.json"}, "Set OUT (command line: --out)"),
    "results file is a folder": (lambda kw, tmp: {**kw, "out": tmp}, "--out"),
    "drafter folder without weights": (lambda kw, tmp: {**kw, "drafters": {**kw["drafters"], "dspark": str(tmp / "empty")}},
                                       'Set DRAFTERS["dspark"] (command line: --dspark)'),
    "drafter hub id not cached offline": (lambda kw, tmp: {**kw, "drafters": {**kw["drafters"],
                                                                               "dflash": "nobody/not-a-cached-drafter"}},
                                          'DRAFTERS["dflash"]'),
    "drafter neither folder nor hub id": (lambda kw, tmp: {**kw, "drafters": {**kw["drafters"], "dflash": "no such/thing/x"}},
                                          "--dflash"),
    "unknown drafter kind": (lambda kw, tmp: {**kw, "drafters": {"medusa": "a/b"}}, "Set DRAFTERS"),
    "target without a tokenizer": (lambda kw, tmp: {**kw, "target": str(tmp / "bare")}, "Set TARGET (command line: --target)"),
    "fp16 by name": (lambda kw, tmp: {**kw, "dtype": "float16"}, "Set DTYPE (command line: --dtype)"),
    "fp16 as a dtype": (lambda kw, tmp: {**kw, "dtype": torch.float16}, "overflow fp16"),
    "unknown dtype": (lambda kw, tmp: {**kw, "dtype": "int8"}, "Set DTYPE"),
    "zero prompts": (lambda kw, tmp: {**kw, "prompts_per_benchmark": 0}, "Set PROMPTS_PER_BENCHMARK (command line: --prompts)"),
    "zero new tokens": (lambda kw, tmp: {**kw, "new_tokens": 0}, "Set NEW_TOKENS (command line: --new-tokens)"),
}


@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_each_bad_setting_fails_fast_naming_its_parameter(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          no_weights: None) -> None:
    """Item 5: one clear error naming the notebook's parameter and the command-line flag, before
    any weight is read (the loaders fail the test if called)."""
    fake_gpu(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "a_file").write_text("a file, not a folder")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bare").mkdir()
    shutil.copy(loading.QWEN3_4B / "config.json", tmp_path / "bare" / "config.json")
    (tmp_path / "bare" / "model.safetensors").write_bytes(b"not read")
    kwargs = {"device": CUDA, **good_real(tmp_path)}
    broken = BAD_SETTINGS[case][0](kwargs, tmp_path)
    device = broken.pop("device")
    with pytest.raises(preflight.SetupError, match=re.escape(BAD_SETTINGS[case][1])):
        preflight.check_setup("real", device, "full", **broken)


def test_memory_for_the_chosen_sizes_is_checked_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      no_weights: None) -> None:
    """Item 5 and 7 (and issue 54): on a T4-like GPU (sm 7.5, 15 GiB free) float32 does not fit: DTYPE
    "auto" falls back to bf16 with a note, an explicit float32 gets an error that says to set DTYPE to
    bfloat16; bf16 fits there (with a note that it is emulated); a GPU whose memory cannot hold even
    the bf16 weights is told to use a larger one."""
    fake_gpu(monkeypatch, capability=(7, 5), free_gib=15.0)
    auto = preflight.check_setup("real", CUDA, "full", **good_real(tmp_path / "a"))
    assert auto.dtype == torch.bfloat16 and any("chose bfloat16" in note for note in auto.notes)
    assert not any(note.startswith("float32 on") for note in auto.notes)
    with pytest.raises(preflight.SetupError, match=r"bfloat16.*Set DTYPE \(command line: --dtype\)"):
        preflight.check_setup("real", CUDA, "full", **good_real(tmp_path / "c"), dtype="float32")
    setup = preflight.check_setup("real", CUDA, "full", **good_real(tmp_path / "b"), dtype="bfloat16")
    assert setup.dtype == torch.bfloat16 and any("emulated" in note for note in setup.notes)
    fake_gpu(monkeypatch, capability=(8, 9), free_gib=6.0)
    with pytest.raises(preflight.SetupError, match="Set DEVICE"):
        preflight.check_setup("random-weights", CUDA, "full", out=tmp_path / "rw.json")
    fake_gpu(monkeypatch, capability=(8, 9), free_gib=12.0)
    with pytest.raises(preflight.SetupError, match="Set NEW_TOKENS"):
        preflight.check_setup("random-weights", CUDA, "full", out=tmp_path / "rw.json", new_tokens=200_000)


def test_the_command_line_checks_before_it_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 no_weights: None) -> None:
    """Item 5: `python -m dspark_lite.harness.gpu` runs the same check before any download or load:
    random weights on a CPU, and a real run without prompts, stop with the flag to set."""
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    with pytest.raises(preflight.SetupError, match="--mode"):
        headless.main(["--mode", "random-weights", "--device", "cpu"])
    fake_gpu(monkeypatch)
    with pytest.raises(preflight.SetupError, match="--eval-folder, --download-prompts or --allow-fixture"):
        headless.main(["--mode", "real", "--device", "cuda:0", "--out", str(tmp_path / "run.json")])
    with pytest.raises(preflight.SetupError, match="--dtype"):
        headless.main(["--mode", "real", "--device", "cuda:0", "--allow-fixture", "--dtype", "fp16",
                  "--out", str(tmp_path / "run.json")])


def test_the_notebook_checks_its_parameters_before_loading() -> None:
    """Item 5: chapter 07's first code cell after its parameters calls check_setup with every
    parameter, before load_world."""
    cells = nbformat.read(REPO / "chapters" / "07_qwen3_4b_gpu.ipynb", as_version=4).cells
    at = next(i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    params = [line.split("=")[0].strip() for line in cells[at].source.splitlines() if "=" in line]
    first = next(c for c in cells[at + 1:] if c.cell_type == "code").source
    assert "preflight.check_setup(" in first and "loading.load_world(" in first
    assert first.index("preflight.check_setup(") < first.index("loading.load_world(")
    call = first[first.index("preflight.check_setup("):first.index("loading.load_world(")]
    for name in ("MODE", "TARGET", "DRAFTERS", "EVAL_FOLDER", "DOWNLOAD_PROMPTS", "ALLOW_FIXTURE",
                 "PROMPTS_PER_BENCHMARK", "NEW_TOKENS", "DTYPE", "OUT"):
        assert name in params and name in call, name
    assert "measure.load_prompts(" not in "".join(c.source for c in cells if c.cell_type == "code")


# ---------------------------------------------------------------------------------------- item 7: fp16


def tiny_world(dtype: torch.dtype = torch.float32) -> loading.World:
    tok = loading.tiny_tokenizer(get_profile("smoke").gpu.tiny_vocab)
    config = transformers.Qwen3Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=8, intermediate_size=48,
                                      max_position_embeddings=256)
    torch.manual_seed(0)
    target = transformers.Qwen3ForCausalLM(config).to(dtype).eval()
    return loading.World("real", torch.device("cpu"), dtype, target, tok, {})


def test_an_overflow_is_named_as_one_not_blamed_on_the_cache() -> None:
    """Item 7: inf/NaN logits (what fp16 does to Qwen3) stop the run with an error naming the dtype
    and the overflow, before the KV-cache self-check could blame the cache."""
    world = tiny_world()
    assert 0 <= loading.check_cache(world) < 1e-3  # healthy: the self-check runs and passes
    with torch.no_grad():
        world.target.model.layers[0].mlp.down_proj.weight.fill_(float("inf"))
    with pytest.raises(loading.NonFiniteLogits, match=r"overflows its dtype \(float32\).*DTYPE") as error:
        loading.check_cache(world)
    assert "KV cache self-check" not in str(error.value)


# ---------------------------------------------------------------------------------------- item 9: check_keys


def test_released_files_may_leave_out_the_targets_copies() -> None:
    """Item 9: embed_tokens.weight and lm_head.weight are never loaded, so a file without them is
    accepted; present, they are still shape-checked; any other missing key is still refused."""
    expected = {"fc.weight": (8, 24), "norm.weight": (8,), "embed_tokens.weight": (100, 8), "lm_head.weight": (100, 8)}
    own = {k: v for k, v in expected.items() if k not in released_config.SHARED_KEYS}
    checkpoints.check_keys(own, expected)  # no copies at all
    checkpoints.check_keys({**own, "lm_head.weight": (100, 8)}, expected)  # one of them
    checkpoints.check_keys(dict(expected), expected)
    with pytest.raises(weights.CheckpointError, match="another target"):
        checkpoints.check_keys({**own, "embed_tokens.weight": (120, 8)}, expected)
    with pytest.raises(weights.CheckpointError, match="missing key 'norm.weight'"):
        checkpoints.check_keys({"fc.weight": (8, 24)}, expected)
    with pytest.raises(weights.CheckpointError, match="wrong shape"):
        checkpoints.check_keys({**own, "fc.weight": (8, 16)}, expected)


# ---------------------------------------------------------------------------------------- item 11: the page's outputs


def test_the_memory_table_prints_no_nan() -> None:
    """Item 11: the KV cache has no parameter count; the page says n/a, never NaN."""
    from transformers import Qwen3Config

    config = Qwen3Config(**json.loads((loading.QWEN3_4B / "config.json").read_text()))
    folders = {k: loading.QWEN3_4B / Path(v).name for k, v in loading.DRAFTER_IDS.items()}
    shown = memory.memory_display(memory.memory_table(config, folders, torch.bfloat16, 2304))
    text = shown.to_string()
    assert "NaN" not in text and "nan" not in text and "n/a" in text
    assert all(len(part) <= 40 for part in shown.index), "row labels fit the page"
    assert shown.loc["target weights", "GiB"] == pytest.approx(7.492, abs=1e-3)


def test_paths_are_printed_without_the_build_machines_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 11: temporary and cache folders are never printed as absolute paths; the repository's
    and the results folder's files are named relative to them."""
    from huggingface_hub import constants

    temp = Path(tempfile.gettempdir()) / "dspark_ch07_abc" / "dspark_tiny_block7"
    assert result_files.describe_path(temp) == "a temporary folder (dspark_tiny_block7)"
    cached = Path(constants.HF_HUB_CACHE) / "models--Qwen--Qwen3-4B" / "snapshots" / "abc"
    assert result_files.describe_path(cached) == "the hub cache (models--Qwen--Qwen3-4B)"
    assert result_files.describe_path(REPO / "data" / "results" / "qwen3_4b_l4.json") == "data/results/qwen3_4b_l4.json"
    monkeypatch.setenv("DSPARK_RESULTS", str(Path(tempfile.gettempdir()) / "ch07" / "results"))
    assert result_files.describe_path(Path(tempfile.gettempdir()) / "ch07" / "results" / "x.json") == "$DSPARK_RESULTS/x.json"
    monkeypatch.setenv("DSPARK_RESULTS", str(REPO / "_build" / "results"))  # as `make book` sets it: a page says where
    assert result_files.describe_path(REPO / "_build" / "results" / "x.json") == "_build/results/x.json"
    for path in (temp, cached, Path(tempfile.gettempdir()) / "x.json"):
        shown = result_files.describe_path(path)
        assert not shown.startswith("/") and tempfile.gettempdir() not in shown, shown


# ---------------------------------------------------------------------------------------- item 12: timing


def test_tau_untimed_and_only_a_seeded_sample_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 12: every prompt counts toward tau, only `timed_prompts` of them (a seeded sample) run
    with the stopwatch; the timed draws equal the untimed ones, so tau does not depend on it."""
    study = get_profile("smoke").gpu
    world = loading.load_world("smoke", torch.device("cpu"), study, 0, workdir=tmp_path / "world")
    timed_flags: list[bool] = []
    real = measure.speculative_generate

    def spy(*args, timed: bool = False, **kwargs):
        timed_flags.append(timed)
        return real(*args, timed=timed, **kwargs)

    patch_room(monkeypatch, gpu_room, "speculative_generate", spy)
    prompts = ["Solve 2 + 2.", "Write a haiku.", "Sort a list.", "Name a river.", "Add 3 and 4.", "Say hi."]
    sample = dataclasses.replace(study, timed_prompts=2)
    run = measure.run_benchmark(world, "dspark", prompts, sample, seed=3)
    assert sum(timed_flags) == 2 and len(timed_flags) == len(prompts)
    chosen = measure.timed_sample(len(prompts), 2, 3)
    assert [i for i, t in enumerate(timed_flags) if t] == chosen == measure.timed_sample(len(prompts), 2, 3)
    assert run.seconds["verify"] > 0 and 0 < run.rounds_timed < run.acceptance.rounds
    every = measure.run_benchmark(world, "dspark", prompts, dataclasses.replace(study, timed_prompts=len(prompts)), seed=3)
    assert np.array_equal(every.acceptance.record.accepted, run.acceptance.record.accepted)
    assert every.acceptance.tau == run.acceptance.tau and every.rounds_timed == every.acceptance.rounds
    overheads = measure.engine_overheads({"dspark": {"gsm8k": run}})
    assert overheads.loc["dspark", "rounds"] == run.rounds_timed


def test_a_wall_time_estimate_after_the_first_generations() -> None:
    """Item 12: after the first generations the run says how long it and the full protocol take."""
    text = measure.wall_time_estimate(seconds=10.0, tokens=1000, generations=3, total_generations=60, new_tokens=256,
                                  drafters=2)
    assert "100 tokens/s" in text and "60 generations" in text and "3 min" in text
    full = sum(evalsets.DEEPSPEC_COUNTS.values()) * 2 * 2048 / 100  # seconds: 3,030 prompts x 2 drafters x 2048 tokens
    assert measure.duration_words(full) == "34.5 h" and "34.5 h" in text
    printed: list[str] = []
    clock = measure.RunClock(total_generations=10, new_tokens=64, drafters=2, after=3, echo=printed.append)
    for _ in range(5):
        clock.step(32)
    assert len(printed) == 1 and "10 generations" in printed[0]
    assert measure.duration_words(30) == "30 s" and measure.duration_words(2 * 3600) == "2.0 h"
