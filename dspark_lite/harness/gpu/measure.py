"""Chapter 07's measurement under the paper's protocol: prompts, tau, the timed sample, Table 1,
Figure 2 and the STS calibration.

The measurement reuses the package: `speculative.speculative_generate` (the chapter-02 engine),
`evaluation.summarize` (tau, Figure 2's conditional acceptance, prefix survival),
`calibration` (STS, threshold sweep), `costs.profile_step_curve` (SPS(B)) and `serving`
(the simulator). Prompts follow the paper's protocol: DeepSpec's evaluation files (never the
book's fixture for a run set beside Table 1), the chat template with thinking off, the first turn
only, temperature 1.0, gamma 7, both end ids, each prompt seeded with seed + its index.

A run is filed as Table 1 only under DeepSpec's full protocol (`run_protocol`); a smaller one
is a named subset. Tau is measured on untimed generations, a seeded sample of prompts is timed
(`timed_sample`), and a run prints an estimate of its wall time after its first generations
(`RunClock`).
"""
from __future__ import annotations

import random
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

pass
from ... import calibration, speculative
from ...progress import progress
from ...record import Rounds, sigmoid
from ...runtime import device_generator
from ...speculative import speculative_generate
from ..toy.evaluation import DomainAcceptance, summarize, summarize_rollouts
from ..toy.profiles import GpuStudy
from ..toy.replies import encode_prompt
from . import evalsets
from .loading import PAPER_TABLE1, World

# ========================================================================== prompts and acceptance

PROMPT_SOURCES = ("deepspec", "hub", "fixture")


def load_prompts(counts: int | Mapping[str, int | None] | None, eval_folder: str | Path | None = None,
                 download: bool = False, allow_fixture: bool = False,
                 names: Sequence[str] = evalsets.TABLE1_ORDER) -> tuple[dict[str, list[str]], str]:
    """Table 1's prompts and where they came from: ("deepspec", a clone of
    deepseek-ai/DeepSpec or its eval_datasets/ at `eval_folder`), ("hub", rebuilt from the source
    datasets through `datasets`, only when `download` and online), or ("fixture", the book's 22
    stand-in prompts, only when `allow_fixture`). The fixture is not the benchmarks: its tau is
    never Table 1's, and a run on it is named and saved as a fixture run."""
    if eval_folder is not None:
        return evalsets.load_benchmarks(eval_folder, counts, names), "deepspec"
    if download:
        counted = evalsets.prompt_counts(counts, names)
        return {name: evalsets.load_from_hub(name, count) for name, count in counted.items()}, "hub"
    if allow_fixture:
        return evalsets.load_benchmarks(evalsets.FIXTURE, counts, names), "fixture"
    raise FileNotFoundError("no evaluation prompts: Table 1 needs DeepSpec's evaluation files. Set EVAL_FOLDER "
                            "(--eval-folder) to a clone of deepseek-ai/DeepSpec, or allow downloading them from the hub "
                            "(DOWNLOAD_PROMPTS = True, --download-prompts). The book's fixture prompts are not the "
                            "benchmarks; run on them only knowingly (ALLOW_FIXTURE = True, --allow-fixture): the run "
                            "is then saved as a fixture run and never compared with the paper")


def comparable_to_paper(mode: str, prompt_source: str) -> bool:
    """Whether a run's tau may stand beside Table 1's: real weights on DeepSpec's
    prompts only. Random weights, the smoke world and the fixture prompts never are."""
    if prompt_source not in PROMPT_SOURCES:
        raise ValueError(f"prompt_source must be one of {PROMPT_SOURCES}, got {prompt_source!r}")
    return mode == "real" and prompt_source != "fixture"


# DeepSpec's evaluation protocol (eval.py): its prompt counts, its generation length, T = 1, gamma 7.
PAPER_GAMMA, PAPER_TEMPERATURE = 7, 1.0


def protocol_differences(mode: str, prompt_source: str, counts: Mapping[str, int], new_tokens: int,
                         temperature: float, gamma: int) -> list[str]:
    """How a run differs from DeepSpec's protocol behind Table 1, one phrase each (empty: it is the
    protocol): real weights, DeepSpec's own prompt files, its full prompt counts per benchmark, 2048
    new tokens, T = 1 and gamma 7."""
    found = {evalsets.check_benchmark(k): int(v) for k, v in counts.items()}
    wrong = [n for n, c in evalsets.DEEPSPEC_COUNTS.items() if found.get(n) != c]
    out = []
    if mode != "real":
        out.append(f"{mode} models, not the released weights")
    if prompt_source != "deepspec":
        out.append(f"prompts from {prompt_source}, not DeepSpec's files")
    if wrong:
        sizes = sorted({found.get(n, 0) for n in wrong})
        out.append(f"{', '.join(map(str, sizes))} prompts a benchmark on {len(wrong)} of {len(evalsets.DEEPSPEC_COUNTS)} "
                   "benchmarks, not DeepSpec's counts")
    if new_tokens != PAPER_NEW_TOKENS:
        out.append(f"{new_tokens} new tokens a prompt, not {PAPER_NEW_TOKENS}")
    if temperature != PAPER_TEMPERATURE:
        out.append(f"temperature {temperature}, not {PAPER_TEMPERATURE:g}")
    if gamma != PAPER_GAMMA:
        out.append(f"gamma {gamma}, not {PAPER_GAMMA}")
    return out


def run_protocol(mode: str, prompt_source: str, counts: Mapping[str, int], new_tokens: int, temperature: float,
                 gamma: int) -> str | None:
    """What a run's tau may be called: "table1" only under DeepSpec's full protocol
    (`protocol_differences` empty); "subset" for real weights on DeepSpec's (or the hub's) prompts
    at other sizes, set beside the paper's numbers but named a subset with its sizes; None for
    anything else (fixture prompts, random weights, the smoke world), never set beside the paper."""
    if not comparable_to_paper(mode, prompt_source):
        return None
    return "subset" if protocol_differences(mode, prompt_source, counts, new_tokens, temperature, gamma) else "table1"


PHASES = ("prefill", "draft", "verify", "overhead")


@dataclass
class BenchmarkRun:
    """One drafter on one benchmark: the acceptance summary (with every round's record) and the
    engine's seconds per phase (prefill, draft, verify, overhead), summed over the prompts that were
    timed, whose rounds `timed_rounds` counts (None: every prompt was timed)."""

    acceptance: DomainAcceptance
    seconds: dict[str, float]
    timed_rounds: int | None = None

    @property
    def rounds_timed(self) -> int:
        """The rounds the phase seconds cover."""
        return self.acceptance.rounds if self.timed_rounds is None else self.timed_rounds


def timed_sample(size: int, count: int, seed: int) -> list[int]:
    """The indices of the prompts of a benchmark of `size` prompts that are generated with the
    phase stopwatch on: `count` of them, drawn with random.Random(seed), sorted. The
    stopwatch synchronises the GPU about six times a round, so tau is measured on untimed
    generations and only this sample is timed; a sharded run times the same prompts."""
    if count < 0:
        raise ValueError(f"timed_prompts must be >= 0, got {count}")
    return sorted(random.Random(seed).sample(range(size), min(count, size)))


def duration_words(seconds: float) -> str:
    """'40 min', '3.2 h', '1.5 days': a wall time as a reader plans with it."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def wall_time_estimate(seconds: float, tokens: int, generations: int, total_generations: int, new_tokens: int,
                       drafters: int) -> str:
    """The sentence printed after the first generations of a run: from their pace
    (generated tokens per second), at most how long all `total_generations` of this run take, each
    up to `new_tokens` tokens, and how long DeepSpec's full protocol (its prompt counts, 2048 new
    tokens, `drafters` drafters) would take on this machine. An upper estimate: replies that end
    early take less."""
    if seconds <= 0 or tokens <= 0:
        return f"after {generations} generations no token was timed; no estimate"
    pace = tokens / seconds
    full = sum(evalsets.DEEPSPEC_COUNTS.values()) * drafters * PAPER_NEW_TOKENS / pace
    return (f"estimate after the first {generations} generations ({pace:.0f} tokens/s): this run's "
            f"{total_generations} generations of up to {new_tokens} tokens take at most about "
            f"{duration_words(total_generations * new_tokens / pace)}; DeepSpec's full protocol "
            f"({sum(evalsets.DEEPSPEC_COUNTS.values())} prompts x {drafters} drafters x {PAPER_NEW_TOKENS} tokens) "
            f"about {duration_words(full)} on this machine")


@dataclass
class RunClock:
    """Counts a run's generations and prints `wall_time_estimate` once, after the first `after`
   , so a reader knows early whether the run takes an hour or a day."""

    total_generations: int
    new_tokens: int
    drafters: int
    after: int = 3
    echo: Any = print
    started: float = field(default_factory=time.perf_counter)
    done: int = 0
    tokens: int = 0
    message: str | None = None

    def step(self, tokens: int) -> None:
        """One generation of `tokens` tokens finished."""
        self.done, self.tokens = self.done + 1, self.tokens + int(tokens)
        if self.message is None and self.done >= min(self.after, self.total_generations):
            self.message = wall_time_estimate(time.perf_counter() - self.started, self.tokens, self.done,
                                              self.total_generations, self.new_tokens, self.drafters)
            if self.echo is not None:
                self.echo(self.message)


def generate_one(world: World, kind: str, ids: torch.Tensor, study: GpuStudy, seed: int,
                 timed: bool = False) -> speculative.Rollout:
    """One speculative generation of prompt `ids` with drafter `kind`, its sampling seeded with
    `seed` (DeepSpec seeds each prompt with seed + its index, so a sharded run draws what a
    single run draws), stopping on any end id; phase seconds when `timed`."""
    generator = device_generator(seed, world.device)
    return speculative_generate(world.target, world.drafters[kind], ids, study.new_tokens, study.gamma,
                                study.temperature, generator, world.eos_token_ids or None, timed=timed)


def run_benchmark(world: World, kind: str, prompts: Sequence[str], study: GpuStudy, seed: int = 0,
                  desc: str = "", indices: Sequence[int] | None = None, size: int | None = None,
                  clock: RunClock | None = None) -> BenchmarkRun:
    """Speculative generation of every prompt with drafter `kind` at gamma and temperature of
    `study`, prompt i seeded with seed + indices[i] (default: its position) in a benchmark of
    `size` prompts (default: these); the rounds are kept for calibration and the simulator
   . Only the prompts of `timed_sample(size, study.timed_prompts, seed)` run with the
    phase stopwatch on; timing does not change what is drawn (same seed, same tokens), so tau pools
    every prompt. `clock` counts the generations (the wall-time estimate)."""
    indices = list(range(len(prompts))) if indices is None else list(indices)
    if len(indices) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(indices)} indices; expected one index per prompt")
    size = len(prompts) if size is None else size
    timed = set(timed_sample(size, study.timed_prompts, seed))
    rollouts, timed_rounds = [], 0
    for index, prompt in progress(list(zip(indices, prompts)), desc=desc or kind, leave=False):
        out = generate_one(world, kind, encode_prompt(world.tokenizer, prompt).to(world.device), study, seed + index,
                           timed=index in timed)
        rollouts.append(out)
        timed_rounds += len(out.rounds) if index in timed else 0
        if clock is not None:
            clock.step(len(out.tokens))
    seconds = {phase: sum(float(getattr(out, f"{phase}_seconds") or 0.0) for out in rollouts) for phase in PHASES}
    return BenchmarkRun(summarize_rollouts(desc or kind, rollouts, study.gamma, keep_record=True), seconds, timed_rounds)


def run_clock(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, rank: int = 0,
              world_size: int = 1, echo: Any = print) -> RunClock:
    """The clock of this rank's generations: every drafter on its shard of every benchmark."""
    total = len(world.drafters) * sum(len(shard(p, rank, world_size)) for p in prompts.values())
    return RunClock(total, study.new_tokens, len(world.drafters), echo=echo)


def run_table1(world: World, prompts: Mapping[str, Sequence[str]], study: GpuStudy, seed: int = 0,
               eta: bool = True) -> dict[str, dict[str, BenchmarkRun]]:
    """{drafter kind: {benchmark: BenchmarkRun}} for every drafter of the world; with
    `eta`, the wall-time estimate is printed after the first generations."""
    clock = run_clock(world, prompts, study, echo=print if eta else None)
    return {kind: {name: run_benchmark(world, kind, p, study, seed, f"{kind}: {name}", clock=clock)
                   for name, p in prompts.items()} for kind in world.drafters}


def table1_frame(runs: Mapping[str, Mapping[str, BenchmarkRun]], compare: bool = True) -> pd.DataFrame:
    """Ours, one row per (drafter, benchmark) with tau and its rounds; with `compare`
    (only for a run `comparable_to_paper`), beside Table 1's tau and the relative difference in %."""
    rows = []
    for kind, by_bench in runs.items():
        for name, run in by_bench.items():
            row = {"drafter": kind, "benchmark": evalsets.BENCHMARKS[name].column, "domain": evalsets.domain_of(name),
                   "tau (ours)": run.acceptance.tau, "rounds": run.acceptance.rounds}
            if compare:
                paper = PAPER_TABLE1.get(kind, {}).get(name, np.nan)
                row.update({"tau (paper)": paper, "difference %": 100 * (run.acceptance.tau / paper - 1)})
            rows.append(row)
    return pd.DataFrame(rows)


def rounds_by_domain(runs: Mapping[str, BenchmarkRun]) -> dict[str, Rounds]:
    """One drafter's rounds pooled by domain (math, code, chat), labelled with it."""
    pooled: dict[str, list[Rounds]] = {}
    for name, run in runs.items():
        domain = evalsets.domain_of(name)
        pooled.setdefault(domain, []).append(run.acceptance.record.labelled(domain))
    return {domain: Rounds.concat(parts) for domain, parts in pooled.items()}


def domain_acceptance(runs: Mapping[str, BenchmarkRun], gamma: int) -> dict[str, DomainAcceptance]:
    """Figure 2's input: conditional acceptance (and prefix survival) per domain, pooled over benchmarks."""
    tokens = {d: 0 for d in evalsets.DOMAINS}
    for name, run in runs.items():
        tokens[evalsets.domain_of(name)] += run.acceptance.tokens
    return {d: summarize(d, rounds, gamma, tokens[d]) for d, rounds in rounds_by_domain(runs).items()}


def block_records(runs: Mapping[str, BenchmarkRun], gamma: int) -> Rounds:
    """The DSpark drafter's full blocks with confidences, by domain (what calibration and the scheduler read)."""
    return Rounds.concat(list(rounds_by_domain(runs).values())).full_blocks(gamma)


def engine_overheads(runs: Mapping[str, Mapping[str, BenchmarkRun]]) -> pd.DataFrame:
    """Per drafter: milliseconds per round of drafting, verifying and the rest (sampling, cache
    crops, bookkeeping), and each phase's share (prefill included) of the engine's time, over the
    prompts measured with the phase stopwatch on (`timed_sample`)."""
    rows = {}
    for kind, by_bench in runs.items():
        seconds = {phase: sum(r.seconds[phase] for r in by_bench.values()) for phase in PHASES}
        rounds = max(1, sum(r.rounds_timed for r in by_bench.values()))
        total = sum(seconds.values()) or float("nan")
        rows[kind] = {**{f"{phase} ms/round": 1e3 * seconds[phase] / rounds for phase in ("draft", "verify", "overhead")},
                      **{f"{phase} %": 100 * seconds[phase] / total for phase in PHASES}, "rounds": rounds}
    return pd.DataFrame(rows).T


# ========================================================================== calibration and the simulator


@dataclass
class Calibration:
    """The calibration measurements on the DSpark drafter's recorded blocks: the static-threshold
    sweep per domain, STS fitted on one split and scored on the other (raw and calibrated
    confidences of the test split, per-position metrics, mean ECE of a_k)."""

    records: Rounds
    sweep: dict[str, pd.DataFrame]
    sts: calibration.SequentialTemperatureScaling
    cal_idx: np.ndarray
    test_idx: np.ndarray
    calibrated: dict[str, np.ndarray]
    metrics: dict[str, pd.DataFrame]
    ece: dict[str, float]

    @property
    def test_records(self) -> Rounds:
        """The test split with STS-calibrated logits (the simulator's input)."""
        test = self.records[self.test_idx]
        return test.with_logits(self.sts.transform(test.logits))


def calibrate(records: Rounds, study: GpuStudy, seed: int = 0) -> Calibration:
    """Threshold sweep (Figure 5) and STS (Figure 6) on real recorded full blocks."""
    confidences = records.confidences()
    sweep = {d: calibration.threshold_sweep(confidences[records.domain == d], records.accepted[records.domain == d],
                                            study.thresholds)
             for d in records.domains}
    cal_idx, test_idx = calibration.split_calibration_test(len(records), study.calibration_fraction, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", calibration.CalibrationWarning)
        sts = calibration.SequentialTemperatureScaling().fit(records.logits[cal_idx], records.accepted[cal_idx])
        z_test, n_test = records.logits[test_idx], records.accepted[test_idx]
        calibrated = {"raw": sigmoid(z_test), "STS": sigmoid(sts.transform(z_test))}
        metrics = {name: calibration.per_position_metrics(c, n_test).set_index("position") for name, c in calibrated.items()}
    ece = {name: float(m["prefix_ece"].mean()) for name, m in metrics.items()}
    return Calibration(records, sweep, sts, cal_idx, test_idx, calibrated, metrics, ece)


# ========================================================================== several GPUs: shards and parts


def shard(items: Sequence[Any], rank: int, world_size: int) -> list[Any]:
    """Every world_size-th item from `rank` (DeepSpec's split of prompts over GPUs), for torchrun /
    accelerate launches: each process measures its shard, the records are pooled afterwards."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size = {world_size}), got {rank}")
    return list(items)[rank::world_size]


# ========================================================================== the headless entry point

PAPER_NEW_TOKENS = 2048  # DeepSpec's eval.py --max-new-tokens
