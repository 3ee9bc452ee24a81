"""DeepSpec's evaluation files (chapter 07): the `turns` format, prompt counts, domains, clear errors."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from dspark_lite.harness.gpu import evalsets
from dspark_lite.harness.gpu.evalsets import EvalSetError


def test_fixture_covers_table1_with_first_turns() -> None:
    prompts = evalsets.load_benchmarks()
    assert list(prompts) == list(evalsets.TABLE1_ORDER) and len(prompts) == 9
    assert all(prompts[name] and all(isinstance(p, str) and p for p in prompts[name]) for name in prompts)
    assert prompts["mt-bench"][0] == "Write a short note inviting a friend to a picnic."  # first turn only
    assert {evalsets.domain_of(n) for n in prompts} == {"math", "code", "chat"}
    assert [evalsets.domain_of(n) for n in ("gsm8k", "humaneval", "arena-hard")] == ["math", "code", "chat"]


def test_prompt_counts_per_benchmark() -> None:
    full = evalsets.load_benchmarks()
    one = evalsets.load_benchmarks(counts=1)
    assert all(len(v) == 1 for v in one.values())
    mixed = evalsets.load_benchmarks(counts={"gsm8k": 2, "arena-hard": 1}, names=["gsm8k", "alpaca", "arena-hard-v2"])
    assert [len(v) for v in mixed.values()] == [2, len(full["alpaca"]), 1]
    assert evalsets.prompt_counts(evalsets.DEEPSPEC_COUNTS)["aime25"] == 30
    with pytest.raises(ValueError, match=r"prompt count \(None for the full set\) must be an integer >= 1"):
        evalsets.load_benchmark("gsm8k", count=0)


def test_subsampling_follows_deepspec(tmp_path: Path) -> None:
    rows = [[f"prompt {i}", "second turn"] for i in range(10)]
    (tmp_path / "gsm8k.jsonl").write_text("".join(json.dumps({"turns": r}) + "\n" for r in rows))
    chosen = evalsets.load_benchmark("gsm8k", tmp_path, count=4, seed=7)
    expected = list(rows)
    random.Random(7).shuffle(expected)
    assert chosen == [r[0] for r in expected[:4]]
    assert evalsets.load_benchmark("gsm8k", tmp_path, count=50) == [r[0] for r in rows]  # fewer rows: all, in order


def test_deepspec_clone_layout(tmp_path: Path) -> None:
    (tmp_path / "eval_datasets").mkdir()
    (tmp_path / "eval_datasets" / "mbpp.jsonl").write_text('{"turns": ["write code"]}\n\n')
    assert evalsets.load_benchmark("mbpp", tmp_path) == ["write code"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ('{"prompt": "no turns"}', "non-empty `turns` list"),
    ('{"turns": []}', "non-empty `turns` list"),
    ('{"turns": ["ok", 3]}', "non-empty `turns` list"),
    ('["turns"]', "non-empty `turns` list"),
])
def test_bad_line_names_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "alpaca.jsonl"
    path.write_text('{"turns": ["fine"]}\n' + line + "\n")
    with pytest.raises(EvalSetError, match=rf"alpaca\.jsonl:2: .*{message}"):
        evalsets.load_benchmark("alpaca", tmp_path)


def test_missing_file_and_unknown_benchmark(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no evaluation file .*humaneval\.jsonl"):
        evalsets.load_benchmark("humaneval", tmp_path)
    with pytest.raises(FileNotFoundError, match="no evaluation folder"):
        evalsets.load_benchmark("humaneval", tmp_path / "nowhere")
    with pytest.raises(ValueError, match="unknown benchmark 'swe'"):
        evalsets.load_benchmark("swe", tmp_path)
    (tmp_path / "mbpp.jsonl").write_text("\n")
    with pytest.raises(EvalSetError, match="holds no prompts"):
        evalsets.load_benchmark("mbpp", tmp_path)


def test_hub_is_never_used_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="pass a local folder"):
        evalsets.load_from_hub("gsm8k", count=2)


def test_hub_formats_match_deepspec_turns() -> None:
    assert evalsets.HUB_FORMATS["gsm8k"]({"question": "Q?"}) == ["Q?" + evalsets.REASONING_SUFFIX]
    assert evalsets.HUB_FORMATS["alpaca"]({"instruction": "Do", "input": ""}) == ["Do"]
    assert evalsets.HUB_FORMATS["alpaca"]({"instruction": "Do", "input": "x"}) == ["Do\n\nInput:\nx"]
    assert evalsets.HUB_FORMATS["mt-bench"]({"prompt": ["a", "b"]}) == ["a", "b"]


def test_livecodebench_reads_deepspec_six_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31, item 10: LiveCodeBench is rebuilt from the six files DeepSpec's converter names
    (test.jsonl ... test6.jsonl), in that order; a seventh file on the hub is never read, so the
    seeded subset stays DeepSpec's."""
    import huggingface_hub

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    names = ["test.jsonl"] + [f"test{i}.jsonl" for i in range(2, 8)]  # the hub holds a seventh release
    for i, name in enumerate(names):
        rows = [{"question_content": f"{name} problem {j}", "starter_code": ""} for j in range(3)]
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    asked: list[str] = []

    def fake_download(repo_id: str, filename: str, repo_type: str | None = None, **kwargs) -> str:
        assert repo_id == "livecodebench/code_generation_lite" and repo_type == "dataset"
        asked.append(filename)
        return str(tmp_path / filename)

    def no_glob(*args, **kwargs):
        raise AssertionError("datasets.load_dataset with a pattern would read every file the hub holds")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", no_glob)
    prompts = evalsets.load_from_hub("livecodebench")
    assert asked == names[:6] and len(prompts) == 18
    assert not any("test7.jsonl" in p for p in prompts) and "test.jsonl problem 0" in prompts[0]
    subset = evalsets.load_from_hub("lcb", count=5, seed=11)
    expected = list(prompts)
    random.Random(11).shuffle(expected)
    assert subset == expected[:5]
