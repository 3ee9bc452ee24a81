"""DeepSpec's evaluation prompts, the benchmarks of the paper's Table 1 (chapter 07).

DeepSpec (deepseek-ai/DeepSpec) keeps one file per benchmark in `eval_datasets/`, named
`<benchmark>.jsonl`: one JSON object a line with a non-empty `turns` list of strings. The
evaluation uses the FIRST turn only (the paper's protocol), and when a benchmark has more rows
than its prompt count it shuffles the rows with `random.Random(seed)` and keeps the first ones.
`select_prompts` does the same, so a run with DeepSpec's seed (980406) and counts (`DEEPSPEC_COUNTS`)
sees DeepSpec's prompts.

`load_benchmark(name, folder)` reads a local folder (a clone of DeepSpec, or its
`eval_datasets/`, or our fixture `data/fixtures/deepspec_eval/`); `load_from_hub(name)` rebuilds
the same prompts from the source datasets through `datasets`, only when the hub is reachable.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ...checks import positive_int

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "data" / "fixtures" / "deepspec_eval"
DEEPSPEC_SEED = 980406  # eval.py's default --seed
REASONING_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class Benchmark:
    """One Table 1 benchmark: DeepSpec's file stem, our domain, the paper's column,
    DeepSpec's default prompt count and the hub dataset its prompts come from."""

    name: str
    domain: str
    column: str
    default_count: int
    hub: tuple[str, str | None, str]  # (dataset, "json:<hf:// path>" or "files:<dataset>" (HUB_FILES), config, split)


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("gsm8k", "math", "GSM8K", 500, ("openai/gsm8k", "main", "test")),
    Benchmark("math500", "math", "MATH", 500, ("HuggingFaceH4/MATH-500", None, "test")),
    Benchmark("aime25", "math", "AIME25", 30, ("MathArena/aime_2025", None, "train")),
    Benchmark("mbpp", "code", "MBPP", 256, ("google-research-datasets/mbpp", "sanitized", "test")),
    Benchmark("humaneval", "code", "HumanEval", 164, ("openai/openai_humaneval", None, "test")),
    Benchmark("livecodebench", "code", "LCB", 500, ("files:livecodebench/code_generation_lite", None, "test")),
    Benchmark("mt-bench", "chat", "MT-Bench", 80, ("HuggingFaceH4/mt_bench_prompts", None, "train")),
    Benchmark("alpaca", "chat", "Alpaca", 500, ("tatsu-lab/alpaca", None, "train")),
    Benchmark("arena-hard-v2", "chat", "Arena-Hard", 500,
              ("json:hf://datasets/lmarena-ai/arena-hard-auto/data/arena-hard-v2.0/question.jsonl", None, "train")),
)}
# Hub datasets read file by file, in this order, as DeepSpec's converter reads them (its DatasetSpec
# `jsonl_files`, read with hf_hub_download in eval_datasets/convert_eval_datasets_to_jsonl.py of
# deepseek-ai/DeepSpec, commit afdfa7c): the six LiveCodeBench releases by name, never a glob,
# so a seventh file added on the hub does not change the rows, nor the seeded subset drawn from them.
HUB_FILES: dict[str, tuple[str, ...]] = {
    "livecodebench": ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl"),
}
TABLE1_ORDER: tuple[str, ...] = tuple(BENCHMARKS)
DEEPSPEC_COUNTS: dict[str, int] = {b.name: b.default_count for b in BENCHMARKS.values()}
ALIASES = {"arena-hard": "arena-hard-v2", "math": "math500", "lcb": "livecodebench", "mtbench": "mt-bench"}
DOMAINS: tuple[str, ...] = ("math", "code", "chat")


class EvalSetError(ValueError):
    """A malformed evaluation file: the message names the file and the line."""


def check_benchmark(name: str) -> str:
    """The canonical benchmark name (aliases: arena-hard, math, lcb); ValueError lists the known ones."""
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; expected one of {', '.join(TABLE1_ORDER)} "
                         f"(or an alias: {', '.join(ALIASES)})")
    return key


def domain_of(name: str) -> str:
    """math, code or chat: the domain a benchmark counts toward."""
    return BENCHMARKS[check_benchmark(name)].domain


def eval_folder(folder: str | Path) -> Path:
    """The folder holding `<benchmark>.jsonl`: `folder` itself, or its `eval_datasets/` (a DeepSpec clone)."""
    folder = Path(folder).expanduser()
    if (folder / "eval_datasets").is_dir():
        return folder / "eval_datasets"
    if not folder.is_dir():
        raise FileNotFoundError(f"no evaluation folder at {folder}; pass a clone of deepseek-ai/DeepSpec, its "
                                f"eval_datasets/ folder, or {FIXTURE}")
    return folder


def read_turns_file(path: str | Path) -> list[list[str]]:
    """Every row's `turns` of one JSONL file. Blank lines are skipped; a line that is
    not a JSON object with a non-empty list of strings under `turns` raises EvalSetError naming
    the file and the line number."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation file {path}; expected one JSON object a line with a `turns` list")
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                rows.append(_turns_of(line, path, number))
    if not rows:
        raise EvalSetError(f"{path} holds no prompts (empty, or a git-lfs pointer never fetched?)")
    return rows


def _turns_of(line: str, path: Path, number: int) -> list[str]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise EvalSetError(f"{path}:{number}: not valid JSON ({error.msg}); expected an object with a `turns` "
                           "list of strings") from None
    turns = row.get("turns") if isinstance(row, dict) else None
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t for t in turns):
        raise EvalSetError(f"{path}:{number}: expected a JSON object with a non-empty `turns` list of "
                           f"non-empty strings, got {line.strip()[:80]!r}")
    return turns


def select_prompts(rows: Sequence[list[str]], count: int | None, seed: int = DEEPSPEC_SEED) -> list[str]:
    """First turns of `count` rows (None: all), chosen as DeepSpec's evaluation chooses them:
    the rows shuffled by random.Random(seed) when there are more than `count`."""
    if count is not None:
        positive_int(count, "prompt count (None for the full set)")
    rows = list(rows)
    if count is not None and len(rows) > count:
        random.Random(seed).shuffle(rows)
        rows = rows[:count]
    return [turns[0] for turns in rows]


def load_benchmark(name: str, folder: str | Path = FIXTURE, count: int | None = None,
                   seed: int = DEEPSPEC_SEED) -> list[str]:
    """The first-turn prompts of one benchmark from `folder`."""
    key = check_benchmark(name)
    return select_prompts(read_turns_file(eval_folder(folder) / f"{key}.jsonl"), count, seed)


def prompt_counts(counts: int | Mapping[str, int | None] | None, names: Sequence[str] = TABLE1_ORDER) -> dict[str, int | None]:
    """Per-benchmark prompt counts: None (full sets), one int for every benchmark,
    or a mapping benchmark -> count such as DEEPSPEC_COUNTS (missing names: the full set)."""
    if counts is None or isinstance(counts, int):
        return {check_benchmark(n): counts for n in names}
    unknown = [k for k in counts if check_benchmark(k) not in {check_benchmark(n) for n in names}]
    if unknown:
        raise ValueError(f"prompt counts for {unknown}, which are not among the benchmarks asked for {list(names)}")
    given = {check_benchmark(k): v for k, v in counts.items()}
    return {check_benchmark(n): given.get(check_benchmark(n)) for n in names}


def load_benchmarks(folder: str | Path = FIXTURE, counts: int | Mapping[str, int | None] | None = None,
                    names: Sequence[str] = TABLE1_ORDER, seed: int = DEEPSPEC_SEED) -> dict[str, list[str]]:
    """{benchmark: first-turn prompts} for every benchmark in `names`."""
    return {name: load_benchmark(name, folder, count, seed) for name, count in prompt_counts(counts, names).items()}


# ========================================================================== the hub (online only)


def _math(row: dict) -> list[str]:
    return [f"{row['problem']}{REASONING_SUFFIX}"]


def _livecodebench(row: dict) -> list[str]:
    starter = row.get("starter_code") or ""
    label = "Use the following code structure:" if starter else "Write your code in the following format:"
    return ["You are an expert Python programmer. You will be given a question (problem specification) and will "
            "generate a correct Python program that matches the specification and passes all tests. You will NOT "
            f"return anything except for the program\n\n### Question:\n{row['question_content']}\n\n"
            f"### Format: {label}\n```python\n{starter or '# YOUR CODE HERE'}\n```\n\n"
            "### Answer: (use the provided format with backticks)"]


# How DeepSpec's converter turns a source row into `turns` (eval_datasets/convert_eval_datasets_to_jsonl.py).
HUB_FORMATS: dict[str, Callable[[dict], list[str]]] = {
    "gsm8k": lambda row: [f"{row['question']}{REASONING_SUFFIX}"],
    "math500": _math,
    "aime25": _math,
    "mbpp": lambda row: [row["prompt"]],
    "humaneval": lambda row: ["Write a solution to the following problem and make sure that it passes the "
                              f"tests:\n```python\n{row['prompt']}\n```"],
    "livecodebench": _livecodebench,
    "mt-bench": lambda row: list(row["prompt"]),
    "alpaca": lambda row: [f"{row['instruction']}\n\nInput:\n{row['input']}" if row["input"] else row["instruction"]],
    "arena-hard-v2": lambda row: [row["prompt"]],
}


def load_from_hub(name: str, count: int | None = None, seed: int = DEEPSPEC_SEED) -> list[str]:
    """One benchmark's first-turn prompts rebuilt from its source dataset through `datasets`
   . Only when online: with HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set it raises,
    saying to pass a local folder instead."""
    from .checkpoints import hub_offline

    key = check_benchmark(name)
    if hub_offline() or os.environ.get("HF_DATASETS_OFFLINE", "").strip() in ("1", "true", "yes", "on"):
        raise FileNotFoundError(f"the hub is offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): {key} is not downloaded; "
                                "pass a local folder (a clone of deepseek-ai/DeepSpec) to load_benchmark instead")
    source, config, split = BENCHMARKS[key].hub
    if source.startswith("files:"):
        rows = [row for name in HUB_FILES[key] for row in hub_jsonl_rows(source[len("files:"):], name)]
        return select_prompts([HUB_FORMATS[key](row) for row in rows], count, seed)
    import datasets

    if source.startswith("json:"):
        rows = datasets.load_dataset("json", data_files=source[len("json:"):], split=split)
    else:
        rows = datasets.load_dataset(source, config, split=split)
    return select_prompts([HUB_FORMATS[key](dict(row)) for row in rows], count, seed)


def hub_jsonl_rows(dataset: str, filename: str) -> list[dict]:
    """The rows of one JSONL file of a hub dataset, in file order: the file is fetched
    with `huggingface_hub.hf_hub_download`, as DeepSpec's converter fetches it (online only)."""
    from huggingface_hub import hf_hub_download

    path = Path(hf_hub_download(dataset, filename=filename, repo_type="dataset"))
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
