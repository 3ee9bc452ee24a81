"""Chapter 07's harness without a GPU: modes, file names, sharding, the results page's GPU helpers."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from dspark_lite import runtime
from dspark_lite.harness.serving import benchmark
from dspark_lite.harness.gpu import evalsets
from dspark_lite.harness.gpu import headless, loading, measure, memory, preflight
from dspark_lite.harness.gpu import runs
from dspark_lite.harness.toy.evaluation import summarize
from dspark_lite.harness.toy.profiles import get_profile
from dspark_lite.record import Rounds
from dspark_lite.harness.toy.replies import encode_prompt
from room_patch import gpu_room, patch_room

REPO = Path(__file__).resolve().parent.parent


def test_modes_need_a_gpu_except_smoke() -> None:
    cpu = torch.device("cpu")
    assert loading.resolve_mode("auto", cpu) == "smoke" and loading.pick_dtype(cpu) == torch.float32
    for mode in ("real", "random-weights"):
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            loading.resolve_mode(mode, cpu)
    with pytest.raises(ValueError, match="MODE must be"):
        loading.resolve_mode("fast", cpu)


def test_slug_and_shard() -> None:
    assert loading.slug("NVIDIA H100 80GB HBM3") == "h100_80gb_hbm3"
    assert measure.shard(list(range(7)), 1, 3) == [1, 4] and measure.shard([], 0, 2) == []
    with pytest.raises(ValueError, match="rank"):
        measure.shard([1], 2, 2)


def test_paper_table1_covers_the_benchmarks() -> None:
    assert all(list(row) == list(evalsets.TABLE1_ORDER) for row in loading.PAPER_TABLE1.values())


def test_smoke_world_goes_through_the_released_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    study = get_profile("smoke").gpu
    world = loading.load_world("smoke", torch.device("cpu"), study, 0, workdir=tmp_path / "world")
    assert sorted(p.name for p in (tmp_path / "world" / "dspark_tiny_block7").iterdir()) == ["config.json", "model.safetensors"]
    assert set(world.drafters) == {"eagle3", "dflash", "dspark"} and world.drafters["dspark"].confidence_head is not None
    # issue 31, item 6: the Eagle3 row goes through DeepSpec's Eagle3 layout and stops its chain at the end id
    assert json.loads((tmp_path / "world" / "eagle3_tiny_ttt7" / "config.json").read_text())["architectures"] == [
        "Qwen3Eagle3Model"]
    assert type(world.drafters["eagle3"]).__name__ == "EagleDrafter"
    assert list(world.drafters["eagle3"].end_ids) == world.eos_token_ids
    # issue 31, item 11: what the page prints names no temporary folder; the loader's folders stay at hand
    assert not any(str(tmp_path) in text or "/tmp" in text for text in world.sources.values()), world.sources
    assert world.paths["dspark"] == tmp_path / "world" / "dspark_tiny_block7"
    ids = encode_prompt(world.tokenizer, "Solve 2 + 2.")
    assert ids.dim() == 1 and ids.numel() > 3
    for kind in world.drafters:
        run = measure.run_benchmark(world, kind, ["Solve 2 + 2."], study, seed=0)
        assert 1.0 <= run.acceptance.tau <= study.gamma + 1 and len(run.acceptance.record) == run.acceptance.rounds
    path = preflight.save_results(world, {"table1": {"dspark": {"gsm8k": run.acceptance.tau}}}, "smoke")
    assert path.parent == tmp_path / "results" and "data/results" not in str(path)


def _gpu_record(mode: str, date: str, source: str = "deepspec", tau: float = 6.0) -> dict:
    """A results file as written before issue 31: every comparable run under "table1"."""
    comparable = mode == "real" and source != "fixture"
    taus = {"dspark": {"gsm8k": tau}}
    return {"provenance": {"date": date}, "results": {
        "environment": {"mode": mode, "gpu": "NVIDIA L4", "prompt_counts": {"gsm8k": 20}, "prompt_source": source,
                        "comparable_to_paper": comparable, "new_tokens": 256},
        ("table1" if comparable else "tau_not_table1"): taus,
        **({"paper_table1": {"dspark": {"gsm8k": 6.11}}} if comparable else {})}}


def _fake_runs(kinds=("dflash",)) -> dict:
    run = measure.BenchmarkRun(summarize("x", Rounds.of([7, 7], [3, 5]), 7, 10, keep_record=True),
                           dict.fromkeys(measure.PHASES, 0.1))
    return {kind: {name: run for name in evalsets.TABLE1_ORDER} for kind in kinds}


def test_only_the_full_protocol_is_filed_as_table1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 8: a 20-prompt, 256-token run of the released weights is a subset, recorded
    with its sizes beside the paper's numbers; only DeepSpec's counts at 2048 tokens, T = 1 and
    gamma 7 on its own files is Table 1."""
    full, smaller = dict(evalsets.DEEPSPEC_COUNTS), dict.fromkeys(evalsets.TABLE1_ORDER, 20)
    assert measure.run_protocol("real", "deepspec", full, 2048, 1.0, 7) == "table1"
    assert measure.run_protocol("real", "deepspec", smaller, 256, 1.0, 7) == "subset"
    assert measure.run_protocol("real", "deepspec", full, 256, 1.0, 7) == "subset"
    assert measure.run_protocol("real", "deepspec", full, 2048, 0.6, 7) == "subset"
    assert measure.run_protocol("real", "deepspec", full, 2048, 1.0, 5) == "subset"
    assert measure.run_protocol("real", "hub", full, 2048, 1.0, 7) == "subset"
    assert measure.run_protocol("real", "fixture", full, 2048, 1.0, 7) is None
    assert measure.run_protocol("random-weights", "deepspec", full, 2048, 1.0, 7) is None
    assert measure.protocol_differences("real", "deepspec", smaller, 256, 1.0, 7) == [
        "20 prompts a benchmark on 9 of 9 benchmarks, not DeepSpec's counts", "256 new tokens a prompt, not 2048"]
    world = loading.World("real", torch.device("cpu"), torch.bfloat16, None, None, {})
    study = get_profile("full").gpu
    payload = headless.analyze(world, _fake_runs(), study, 0, "deepspec",
                          {n: ["p"] * 20 for n in evalsets.TABLE1_ORDER}, race=False, profile=False)
    assert "table1" not in payload and payload["environment"]["protocol"] == "subset"
    assert payload["subset"]["prompts_per_benchmark"] == smaller and payload["subset"]["new_tokens"] == 256
    assert payload["subset"]["tau"]["dflash"]["gsm8k"] == pytest.approx(5.0) and "paper_table1" in payload
    protocol_study = dataclasses.replace(study, new_tokens=2048)
    payload = headless.analyze(world, _fake_runs(), protocol_study, 0, "deepspec",
                          {n: ["p"] * c for n, c in full.items()}, race=False, profile=False)
    assert "table1" in payload and "subset" not in payload and payload["environment"]["protocol"] == "table1"
    patch_room(monkeypatch, gpu_room, "gpu_name", lambda device: "NVIDIA L4")
    cuda = torch.device("cuda:0")
    assert preflight.results_file("real", cuda, "deepspec", subset=True).name == "qwen3_4b_l4_subset.json"
    assert preflight.results_file("real", cuda, "deepspec").name == "qwen3_4b_l4.json"


def test_results_page_reads_old_and_new_files(tmp_path: Path) -> None:
    """Issue 31, item 8: an old file that filed a 20-prompt, 256-token run under "table1" reads as a
    subset; a new subset file and a full Table 1 file read as what they are, Table 1 first."""
    old = _gpu_record("real", "2026-05-01 10:00 UTC")
    assert runs.gpu_protocol(old) == "subset"
    (row,) = runs.gpu_table1_rows(old)
    assert row["compared as"] == "subset (20 prompts a benchmark, 256 new tokens)" and row["tau (paper)"] == 6.11
    new = {"provenance": {"date": "2026-06-01 10:00 UTC"}, "results": {
        "environment": {"mode": "real", "gpu": "NVIDIA L4", "prompt_counts": {"gsm8k": 20}, "prompt_source": "deepspec",
                        "comparable_to_paper": True, "protocol": "subset", "new_tokens": 256},
        "subset": {"tau": {"dspark": {"gsm8k": 5.5}}, "prompts_per_benchmark": {"gsm8k": 20}, "new_tokens": 256},
        "paper_table1": {"dspark": {"gsm8k": 6.11}}}}
    (row,) = runs.gpu_table1_rows(new)
    assert row["tau (ours)"] == 5.5 and row["compared as"].startswith("subset") and row["difference %"] < 0
    full = {"provenance": {"date": "2026-01-01 10:00 UTC"}, "results": {
        "environment": {"mode": "real", "gpu": "NVIDIA H100", "prompt_counts": dict(evalsets.DEEPSPEC_COUNTS),
                        "prompt_source": "deepspec", "comparable_to_paper": True, "new_tokens": 2048},
        "table1": {"dspark": {"gsm8k": 6.0}}, "paper_table1": {"dspark": {"gsm8k": 6.11}}}}
    assert runs.gpu_protocol(full) == "table1" and runs.gpu_protocol_label(full) == "Table 1"
    for name, record in {"qwen3_4b_l4": old, "qwen3_4b_l4_subset": new, "qwen3_4b_h100": full}.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    assert [name for name, _ in runs.gpu_results(tmp_path)] == ["qwen3_4b_h100", "qwen3_4b_l4_subset", "qwen3_4b_l4"]
    assert runs.gpu_protocol(_gpu_record("real", "2026-01-01", "fixture")) is None


def test_results_page_prefers_real_runs(tmp_path: Path) -> None:
    """Issue 19, item 12: a newer random-weights (or fixture) run never hides a real one, and only
    a real run on DeepSpec's prompts is set beside the paper."""
    assert runs.best_gpu_result(tmp_path) is None
    files = {"qwen3_4b_l4": _gpu_record("real", "2026-01-01 10:00 UTC"),
             "qwen3_4b_l4_fixture": _gpu_record("real", "2026-02-01 10:00 UTC", "fixture", 5.0),
             "qwen3_4b_h100_random_weights": _gpu_record("random-weights", "2026-03-01 10:00 UTC", "fixture", 7.9)}
    for name, record in files.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    ranked = [name for name, _ in runs.gpu_results(tmp_path)]
    assert ranked == ["qwen3_4b_l4", "qwen3_4b_l4_fixture", "qwen3_4b_h100_random_weights"]
    name, record = runs.best_gpu_result(tmp_path)
    assert name == "qwen3_4b_l4"
    (row,) = runs.gpu_table1_rows(record)
    assert row["prompts"] == 20 and row["difference %"] == pytest.approx(100 * (6.0 / 6.11 - 1))
    assert row["kind"] == runs.GPU_RUN_KINDS[0] and row["compared as"].startswith("subset")
    for other in ("qwen3_4b_l4_fixture", "qwen3_4b_h100_random_weights"):
        (row,) = runs.gpu_table1_rows(files[other])
        assert row["tau (paper)"] is None and row["difference %"] is None and row["kind"] != runs.GPU_RUN_KINDS[0]
    newer_real = _gpu_record("real", "2026-04-01 10:00 UTC", tau=6.1)
    (tmp_path / "qwen3_4b_a100.json").write_text(json.dumps(newer_real))
    assert runs.best_gpu_result(tmp_path)[0] == "qwen3_4b_a100"  # the newest within the best kind


# ---------------------------------------------------------------------------------------- issue 19, harness side


def test_dtype_follows_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 8, and issue 31, items 3 and 7: one rule, by compute capability. A T4 (sm 7.5)
    answers is_bf16_supported() == True but gets float32 (DeepSpec evaluates in bf16 only and Qwen3
    overflows fp16), and the toy chapters' training autocast follows the same rule."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    cuda = torch.device("cuda:0")
    for capability, dtype in (((7, 5), torch.float32), ((7, 0), torch.float32), ((8, 0), torch.bfloat16),
                              ((8, 9), torch.bfloat16), ((9, 0), torch.bfloat16)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, c=capability, **k: c)
        assert loading.pick_dtype(cuda) == dtype, capability
        assert runtime.pick_dtype(cuda) == dtype, capability
        assert runtime.bf16_autocast_pays(cuda) == (dtype == torch.bfloat16), capability



def test_cpu_bf16_autocast_follows_the_cpu_and_the_matmul_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU, AMX makes every bf16 matmul pay; AVX512-BF16 alone only the wide ones (the target's
    training batch), not a drafter's small step; a CPU with neither trains in float32."""
    cpu = torch.device("cpu")
    for amx, avx512_bf16, narrow, wide in ((True, True, True, True), (True, False, True, True),
                                           (False, True, False, True), (False, False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda a=amx: a)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda b=avx512_bf16: b)
        assert runtime.bf16_autocast_pays(cpu) == narrow, (amx, avx512_bf16)
        assert runtime.bf16_autocast_pays(cpu, wide=True) == wide, (amx, avx512_bf16)

def test_baseline_samples_at_t1_whatever_the_hub_config_says() -> None:
    """Issue 19, item 9: the target-only baseline samples from the full distribution at T = 1 even
    when the model's own generation config asks for top-k sampling (Qwen3-4B's: top-k 20, top-p 0.95).
    Here the model's config says top_k = 1, which would make every sample the greedy token."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    target = Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, head_dim=8, intermediate_size=48,
                                          max_position_embeddings=128)).eval()
    target.generation_config = GenerationConfig(do_sample=True, temperature=0.6, top_k=1, top_p=0.95, min_p=0.5,
                                                repetition_penalty=1.5, eos_token_id=[62, 63], pad_token_id=63)
    ids = torch.tensor([1, 2, 3, 4])
    greedy = memory.hf_generate(target, 12, 0.0, None, 0)(ids)
    samples = []
    for seed in range(4):
        torch.manual_seed(seed)
        samples.append(memory.hf_generate(target, 12, 1.0, None, 0)(ids))
    assert any(not torch.equal(s[: len(greedy)], greedy[: len(s)]) for s in samples), "sampling at T = 1 gave greedy"
    config = benchmark.generation_config(12, 1.0, [62, 63], None)
    merged, _ = target._prepare_generation_config(config)  # transformers' own merge with the model's config
    assert (merged.top_k, merged.top_p, merged.min_p, merged.repetition_penalty, merged.temperature) == (0, 1.0, 0.0, 1.0, 1.0)
    assert merged.eos_token_id == [62, 63]


def test_end_ids_come_from_the_generation_config() -> None:
    """Issue 19, item 6 (harness side): both of Qwen3's end ids reach the engine and the baseline."""
    target = loading.random_target(loading.QWEN3_4B / "config.json", torch.device("meta"), torch.bfloat16)
    tok = type("Tok", (), {"eos_token_id": 151645})()
    assert loading.end_token_ids(target, tok) == [151645, 151643]
    world = loading.World("random-weights", torch.device("meta"), torch.bfloat16, target, tok, {})
    assert world.eos_token_ids == [151645, 151643]
    target.generation_config.eos_token_id = None
    assert loading.end_token_ids(target, tok) == [151645]


def test_real_runs_refuse_the_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 4: without DeepSpec's files (or an allowed download) a real run has no prompts;
    on the fixture it is saved as a fixture run and never set beside the paper."""
    with pytest.raises(FileNotFoundError, match="Table 1 needs DeepSpec's evaluation files"):
        measure.load_prompts(2)
    prompts, source = measure.load_prompts(2, allow_fixture=True)
    assert source == "fixture" and all(len(p) <= 2 for p in prompts.values())
    (tmp_path / "eval_datasets").mkdir()
    for name in evalsets.TABLE1_ORDER:
        (tmp_path / "eval_datasets" / f"{name}.jsonl").write_text('{"turns": ["a real prompt"]}\n')
    assert measure.load_prompts(2, tmp_path)[1] == "deepspec"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="offline"):
        measure.load_prompts(2, download=True)
    assert measure.comparable_to_paper("real", "deepspec") and not measure.comparable_to_paper("real", "fixture")
    assert not measure.comparable_to_paper("random-weights", "deepspec")
    patch_room(monkeypatch, gpu_room, "gpu_name", lambda device: "NVIDIA L4")
    world = loading.World("real", torch.device("cuda:0"), torch.bfloat16, None, None, {})
    assert preflight.result_path(world, "fixture").name == "qwen3_4b_l4_fixture.json"
    assert preflight.result_path(world, "deepspec", subset=True).name == "qwen3_4b_l4_subset.json"
    assert preflight.result_path(world, "deepspec").name == "qwen3_4b_l4.json"
    run = measure.BenchmarkRun(summarize("gsm8k", Rounds.of([7], [3]), 7, 4, keep_record=True),
                           dict.fromkeys(measure.PHASES, 0.0))
    assert "tau (paper)" not in measure.table1_frame({"dspark": {"gsm8k": run}}, compare=False)
    assert measure.table1_frame({"dspark": {"gsm8k": run}})["tau (paper)"].tolist() == [6.11]


def test_merge_pools_the_ranks_parts() -> None:
    """torchrun: rank 0 merges every rank's part into one run; a missing or repeated rank is an error."""
    def part(rank: int, rounds: Rounds) -> dict:
        return {"rank": rank, "world_size": 2, "runs": {"dspark": {"gsm8k": {
            "rounds": rounds.to_json(), "tokens": int(rounds.emitted.sum()),
            "seconds": {"prefill": 0.1, "draft": 0.2, "verify": 0.3, "overhead": 0.4}}}}}

    z = np.full((2, 7), 2.0)
    # rank 1's last round accepted 3 drafts, the third an end token: 3 tokens, no bonus (DeepSpec)
    ended = np.where(np.arange(7) < 3, 2.0, np.nan)
    parts = [part(0, Rounds.of([7, 7], [7, 2], z)), part(1, Rounds.of([7, 3], [0, 3], np.stack([z[0], ended]),
                                                                      ended_in_draft=[False, True]))]
    runs = headless.merge_parts(json.loads(json.dumps(parts)), gamma=7)
    run = runs["dspark"]["gsm8k"]
    assert run.acceptance.rounds == 4 and run.acceptance.tau == pytest.approx((8 + 3 + 1 + 3) / 4)
    assert run.seconds["verify"] == pytest.approx(0.6) and run.acceptance.tokens == 8 + 3 + 1 + 3  # the tokens each rank reported, summed
    record = run.acceptance.record
    assert list(zip(record.accepted.tolist(), record.ended_in_draft.tolist())) == [(7, False), (2, False), (0, False),
                                                                                  (3, True)]
    full = measure.block_records(runs["dspark"], 7)
    assert full.logits.shape == (3, 7) and full.domains == ["math"]  # full blocks only, labelled by domain
    overheads = measure.engine_overheads(runs)
    assert overheads.loc["dspark", "verify ms/round"] == pytest.approx(1e3 * 0.6 / 4)
    timed = json.loads(json.dumps(parts))  # issue 31, item 12: seconds cover only the timed prompts' rounds
    for p in timed:
        p["runs"]["dspark"]["gsm8k"]["timed_rounds"] = 1
    sampled = headless.merge_parts(timed, gamma=7)
    assert sampled["dspark"]["gsm8k"].rounds_timed == 2 and sampled["dspark"]["gsm8k"].acceptance.rounds == 4
    assert measure.engine_overheads(sampled).loc["dspark", "verify ms/round"] == pytest.approx(1e3 * 0.6 / 2)
    with pytest.raises(ValueError, match="one part per rank"):
        headless.merge_parts(parts[:1], gamma=7)
    with pytest.raises(ValueError, match="one part per rank"):
        headless.merge_parts([parts[0], parts[0]], gamma=7)


def test_memory_table_and_profile_sizes_from_the_configs() -> None:
    """The chapter's memory table is computed from the configs; the profiler keeps the R that fit."""
    from transformers import Qwen3Config

    config = Qwen3Config(**json.loads((loading.QWEN3_4B / "config.json").read_text()))
    folders = {k: loading.QWEN3_4B / Path(v).name for k, v in loading.DRAFTER_IDS.items()}
    table = memory.memory_table(config, folders, torch.bfloat16, 2048).set_index("part")
    assert 4.0 < table["parameters (B)"].iloc[0] < 4.03  # Qwen3-4B: 4.02B with the tied embedding once
    eagle3, dflash, dspark = table["parameters (B)"].iloc[1:4]
    assert 0.61 < dspark < 0.62, dspark  # of its 1.39B, 0.78B are the embedding / LM-head copies it shares
    markov_and_confidence = 2 * 151936 * 256 + (2560 + 256 + 1)
    assert (dspark - dflash) * 1e9 == pytest.approx(markov_and_confidence, abs=1)
    # Eagle3: fc over five layers, one layer whose q/k/v read [embedding; feature] (2 x 2560), three norms, norm
    hidden, heads, kv, mlp = 2560, 32 * 128, 8 * 128, 9728
    layer = 2 * hidden * (heads + 2 * kv) + heads * hidden + 2 * 128 + 3 * hidden * mlp + 3 * hidden
    assert eagle3 * 1e9 == pytest.approx(5 * hidden * hidden + layer + hidden, abs=1)
    assert memory.kv_bytes_per_token(config, 2) == 2 * 36 * 8 * 128 * 2
    assert table["GiB"].iloc[4] == pytest.approx(2 * 36 * 8 * 128 * 2 * 2048 / 2**30)
    assert memory.memory_display(table.reset_index()).iloc[4, 0] == "n/a"  # issue 31, item 11: no NaN on the page
    need = [memory.profile_step_bytes(config, R, 7, 256, 2) for R in (1, 8, 64)]
    assert need[0] < need[1] < need[2]
    free = need[1] / 0.6 + 1
    assert memory.affordable_concurrencies(config, (1, 8, 64), 7, 256, 2, free) == [1, 8]
    assert memory.affordable_concurrencies(config, (1, 8, 64), 7, 256, 2, None) == [1, 8, 64]
    with pytest.raises(MemoryError, match="lower profile_context"):
        memory.affordable_concurrencies(config, (8, 64), 7, 256, 2, need[0])


def test_generation_length_is_a_parameter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19, item 5 (harness side): chapter 07 and the command line take the generation length
    (the command line's real mode defaults to DeepSpec's 2048) and pass it to the engine."""
    import nbformat

    cell = next(c for c in nbformat.read(REPO / "chapters" / "07_qwen3_4b_gpu.ipynb", as_version=4).cells
                if "parameters" in c.get("metadata", {}).get("tags", []))
    assert "NEW_TOKENS = " in cell.source
    assert headless.HEADLESS_DEFAULTS["real"]["new_tokens"] == measure.PAPER_NEW_TOKENS == 2048
    assert headless.parse_args(["--mode", "real", "--new-tokens", "512"]).new_tokens == 512
    monkeypatch.setenv("DSPARK_RESULTS", str(tmp_path / "results"))
    study = get_profile("smoke").gpu
    world = loading.load_world("smoke", torch.device("cpu"), study, 0, workdir=tmp_path / "world")
    for new_tokens in (3, 11):
        short = dataclasses.replace(study, new_tokens=new_tokens)
        run = measure.run_benchmark(world, "dspark", ["Solve 2 + 2.", "Write a haiku."], short, seed=0)
        assert run.acceptance.tokens <= 2 * new_tokens and run.acceptance.rounds >= 2


def test_preface_gpu_status_says_what_was_measured(tmp_path: Path) -> None:
    """The preface's sentence: no folder, an empty folder, only a random-weights run, then a real run
    on DeepSpec's prompts, which it names with its file, GPU and comparison."""
    missing = runs.gpu_status(tmp_path / "absent")
    assert "does not exist yet" in missing and "without a GPU" in missing
    assert "holds no such run" in runs.gpu_status(tmp_path, has_gpu=True)
    assert "This build had a GPU" in runs.gpu_status(tmp_path, has_gpu=True)
    (tmp_path / "qwen3_4b_h100_random_weights.json").write_text(
        json.dumps(_gpu_record("random-weights", "2026-03-01 10:00 UTC", "fixture", 7.9)))
    other = runs.gpu_status(tmp_path)
    assert "No number in this book" in other and runs.GPU_RUN_KINDS[2] in other
    (tmp_path / "qwen3_4b_l4.json").write_text(json.dumps(_gpu_record("real", "2026-01-01 10:00 UTC")))
    real = runs.gpu_status(tmp_path)
    assert real.startswith("Chapter 07 sets") and "`data/results/qwen3_4b_l4.json`" in real
    assert "No number" not in real and "subset" in real
