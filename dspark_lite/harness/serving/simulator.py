"""The serving simulator: real rollout records replayed under each scheduler (chapter 06b).

`simulate` / `sweep` / `replayed_sweep` replay the full blocks of a `record.Rounds` (each
block's confidences c = sigmoid(logits), accepted count and domain) for R concurrent requests
under a scheduler, advancing a clock by
1 / SPS(B) per step, SPS(B) being a step curve measured by `costs.profile_step_curve`;
`sla_gain` reads the best throughput under per-user speed SLAs (paper section 5),
`versus_best_baseline` and `ordering_agreement` compare schedulers within noise.
`batching.real_step_throughput` checks the simulator's cost model against real batched
forwards.
"""
from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ... import checks
from ...checks import lengths_in_range, positive_int
from ...record import Rounds, logit
from ...progress import progress
from ...scheduler import SCHEDULERS, Scheduler, asynchronous_schedule, static_threshold, survival
from ...stepcurve import StepCurve


def curve_at(curves: StepCurve | Mapping[int, StepCurve], requests: int) -> StepCurve:
    """The step curve that serves concurrency R: `curves` itself when it is one
    StepCurve, else the one profiled for R (ValueError naming the profiled R when absent)."""
    if isinstance(curves, StepCurve):
        return curves
    if not isinstance(curves, Mapping) or not all(isinstance(c, StepCurve) for c in curves.values()):
        raise ValueError(f"curves must be a StepCurve or a mapping R -> StepCurve; got {type(curves).__name__}")
    if requests not in curves:
        raise ValueError(f"no step curve was profiled for R = {requests}; profiled: R in {sorted(curves)}")
    return curves[requests]


@dataclass(frozen=True)
class SimResult:
    """One simulated serving run. throughput: tokens/s over all requests;
    per_user: tokens/s per request (throughput / R); mean_budget: mean drafted tokens l_r
    sent to verification per request and step; batch_per_request: mean B / R = 1 +
    mean_budget; tokens_per_step: mean tokens a request gains per step; expected_throughput:
    the scheduler's own expectation sum_r (1 + sum_{j<=l_r} a_{r,j}) per simulated second."""

    scheduler: str
    R: int
    steps: int
    gamma: int
    throughput: float
    per_user: float
    mean_budget: float
    batch_per_request: float
    tokens_per_step: float
    expected_throughput: float
    seconds: float
    tokens: int

    def as_row(self) -> dict[str, Any]:
        """A flat dict, one DataFrame row."""
        return asdict(self)


SIM_SCHEDULERS = (*SCHEDULERS, "threshold", "threshold-cumulative", "async")


def _stateless(fn: Scheduler) -> Choose:
    return lambda current, curve, stale: fn(current, curve)


Choose = Callable[[np.ndarray, StepCurve, np.ndarray], np.ndarray]  # (current, curve, stale) -> lengths


def resolve_scheduler(scheduler: str | Scheduler) -> tuple[str, Choose]:
    """A scheduler name or callable -> (name, choose(current, curve, stale) -> lengths)
   . Names: those of `scheduler.SCHEDULERS` ("dspark", Algorithm 1;
    "global_search"; "fixed", the whole block; "mtp1"),
    "threshold" (cut before the first c_k < 0.5; "threshold:0.7" sets the threshold),
    "threshold-cumulative" (cut before the first prefix survival a_k < 0.5; ":t" likewise) and
    "async" (section 5.2: capacity from the confidences of two steps earlier). A callable
    (confidences, curve) -> lengths is used as is, named by its __name__."""
    if callable(scheduler):
        return getattr(scheduler, "__name__", "custom"), _stateless(scheduler)
    if not isinstance(scheduler, str):
        raise ValueError(f"scheduler must be a name or a callable; got {type(scheduler).__name__}")
    base, _, argument = scheduler.partition(":")
    if base in ("threshold", "threshold-cumulative"):
        try:
            threshold = float(argument) if argument else 0.5
        except ValueError:
            raise ValueError(f"bad threshold in {scheduler!r}; expected e.g. '{base}:0.7'") from None
        return scheduler, _stateless(static_threshold(threshold, cumulative=base == "threshold-cumulative"))
    if base in SCHEDULERS and not argument:
        return scheduler, _stateless(SCHEDULERS[base])
    if scheduler == "async":
        return scheduler, asynchronous_schedule
    raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(SIM_SCHEDULERS)} "
                     f"(threshold:<t> sets a threshold) or a callable (confidences, curve) -> lengths")


def _domain_pools(records: Rounds, domain_mix: Mapping[str, float] | None) -> tuple[list[str], np.ndarray]:
    """Domains and their normalised weights; checks every domain has records."""
    available = records.counts()
    if domain_mix is None:
        domain_mix = available
    if not isinstance(domain_mix, Mapping) or not domain_mix:
        raise ValueError(f"domain_mix must be a non-empty dict domain -> weight; got {domain_mix!r}")
    names = list(domain_mix)
    weights = np.array([domain_mix[name] for name in names], dtype=np.float64)
    if not np.isfinite(weights).all() or weights.min() < 0 or weights.sum() <= 0:
        raise ValueError(f"domain_mix weights must be finite, >= 0, with a positive sum; got {dict(domain_mix)}")
    missing = [name for name, w in zip(names, weights) if w > 0 and name not in available]
    if missing:
        raise ValueError(f"domain(s) {missing} in domain_mix have no records (empty pool); records hold "
                         f"{sorted(available)}")
    return names, weights / weights.sum()


def _request_pools(records: Rounds, names: list[str], weights: np.ndarray, requests: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's domain drawn from the mix: (all record indices grouped by domain,
    each request's pool offset, each request's pool size)."""
    pools = [np.flatnonzero(records.domain == name) for name in names]
    order = np.concatenate(pools)
    starts = np.cumsum([0] + [p.size for p in pools[:-1]])
    chosen = rng.choice(len(names), size=requests, p=weights)
    return order, starts[chosen], np.array([p.size for p in pools])[chosen]


def _check_sim_args(records: Rounds, curve: StepCurve, concurrency: Any, steps: Any,
                    gamma: int | None) -> tuple[int, int, int]:
    if not isinstance(records, Rounds):
        raise ValueError(f"records must be a record.Rounds of full blocks; got {type(records).__name__}")
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    requests = positive_int(concurrency, "concurrency R (active requests)")
    steps = positive_int(steps, "steps")
    gamma = records.width if gamma is None else positive_int(gamma, "gamma")
    if gamma > records.width:
        raise ValueError(f"gamma = {gamma} exceeds the records' block of {records.width} drafted tokens")
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need batches of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")
    return requests, steps, gamma


def simulate(records: Rounds, scheduler: str | Scheduler, curve: StepCurve, concurrency: int, steps: int,
             domain_mix: Mapping[str, float] | None = None, rng: np.random.Generator | None = None,
             gamma: int | None = None, warmup_steps: int = 2) -> SimResult:
    """Simulate R = `concurrency` requests served for `steps` steps.

    `records`: full blocks (`Rounds.full_blocks()`). Each request gets a domain drawn from
    `domain_mix` (None: the records' own mix). Each step every request draws one block of its domain (i.i.d., with `rng`); the
    scheduler picks lengths l_r from the confidences (first `gamma` columns); request r
    gains min(l_r, n_accepted_r) + 1 tokens; the clock advances by 1 / SPS(B) with
    B = sum_r (1 + l_r). The first `warmup_steps` steps run but are not counted; "async"
    needs confidences from two steps earlier, and uses the current ones until they exist
    (only in warm-up with the default 2). Random draws do not depend on the scheduler, so
    schedulers given equal seeds see the same blocks (common random numbers).
    """
    records = records.full_blocks() if isinstance(records, Rounds) else records
    requests, steps, gamma = _check_sim_args(records, curve, concurrency, steps, gamma)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0; got {warmup_steps!r}")
    name, choose = resolve_scheduler(scheduler)
    names, weights = _domain_pools(records, domain_mix)
    rng = np.random.default_rng() if rng is None else rng
    order, offsets, sizes = _request_pools(records, names, weights, requests, rng)
    confidences, accepted = records.confidences()[:, :gamma], np.minimum(records.accepted, gamma)
    history: deque[np.ndarray] = deque(maxlen=2)
    totals = np.zeros(5)  # tokens, seconds, budget, batch tokens, expected tokens
    for step in range(warmup_steps + steps):
        drawn = order[offsets + rng.integers(0, sizes)]
        current = confidences[drawn]
        stale = history[0] if len(history) == 2 else current
        history.append(current)
        lengths = lengths_in_range(choose(current, curve, stale), requests, gamma, f"the lengths of scheduler {name!r}")
        batch = requests + int(lengths.sum())
        if batch > curve.max_batch:
            raise ValueError(f"scheduler {name!r} built a batch of B = {batch} tokens (R = {requests}), beyond "
                             f"the step curve's largest profiled size {curve.max_batch}; profile larger batches")
        if step >= warmup_steps:
            totals += _step_totals(current, accepted[drawn], lengths, batch, curve)
    return _result(name, requests, steps, gamma, totals)


def _step_totals(current: np.ndarray, accepted: np.ndarray, lengths: np.ndarray, batch: int,
                 curve: StepCurve) -> np.ndarray:
    cumulative = np.concatenate([np.zeros((current.shape[0], 1)), np.cumsum(survival(current), axis=1)], 1)
    expected = current.shape[0] + cumulative[np.arange(current.shape[0]), lengths].sum()
    tokens = np.minimum(lengths, accepted).sum() + current.shape[0]
    return np.array([tokens, 1.0 / curve.sps(batch), lengths.sum(), batch, expected])


def _result(name: str, requests: int, steps: int, gamma: int, totals: np.ndarray) -> SimResult:
    tokens, seconds, budget, batch, expected = totals
    throughput = tokens / seconds
    return SimResult(name, requests, steps, gamma, float(throughput), float(throughput / requests),
                     float(budget / (steps * requests)), float(batch / (steps * requests)),
                     float(tokens / (steps * requests)), float(expected / seconds), float(seconds), int(tokens))


def sweep(records: Rounds, schedulers: Sequence[str | Scheduler], curve: StepCurve | Mapping[int, StepCurve],
          concurrencies: Sequence[int], steps: int, domain_mix: Mapping[str, float] | None = None,
          seed: int = 0, gamma: int | None = None) -> pd.DataFrame:
    """`simulate` over every (scheduler, R): one DataFrame row each, the SimResult fields
   . Cell (scheduler, R) uses rng = default_rng([seed, R]), so all schedulers
    at one R replay the same blocks. `curve`: one step curve for every R, or one per R
    (`costs.profile_step_curves`; `curve_at` picks it)."""
    if not schedulers or not concurrencies:
        raise ValueError("schedulers and concurrencies must be non-empty")
    grid = list(itertools.product(schedulers, concurrencies))
    rows = [simulate(records, s, curve_at(curve, R), R, steps, domain_mix, np.random.default_rng([seed, int(R)]),
                     gamma).as_row()
            for s, R in progress(grid, desc="serving sweep", leave=False)]
    return pd.DataFrame(rows)


def sla_gain(df: pd.DataFrame, baseline: str = "mtp1", per_user_slas: Sequence[float] | None = None,
             candidate: str = "dspark", tolerance: float = 0.01) -> pd.DataFrame:
    """Best throughput under per-user speed SLAs (paper section 5).

    For each SLA s, each scheduler's best throughput among its rows with per_user >=
    s * (1 - tolerance) (NaN when none meets it), and gain_pct = 100 * (candidate / baseline - 1).
    The tolerance (default 1%) is the simulated speeds' own noise: without it, two operating
    points of equal speed (a flat cost table gives many) would meet or miss an SLA set at one
    of them by chance. None: one SLA at each per-user speed the baseline itself reaches (its
    operating points). One row per SLA.
    """
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance is a relative slack in [0, 1); got {tolerance}")
    for column in ("scheduler", "R", "throughput", "per_user"):
        if column not in df:
            raise ValueError(f"df must come from sweep (column {column!r} missing)")
    present = set(df["scheduler"])
    for name in (baseline, candidate):
        if name not in present:
            raise ValueError(f"scheduler {name!r} not in df; it holds {sorted(present)}")
    if per_user_slas is None:
        per_user_slas = sorted(df.loc[df["scheduler"] == baseline, "per_user"].unique())
    rows = []
    for sla in per_user_slas:
        meeting = df[df["per_user"] >= sla * (1.0 - tolerance)]
        best = meeting.groupby("scheduler")["throughput"].max()
        row = {"per_user_sla": float(sla)}
        row.update({name: float(best.get(name, np.nan)) for name in dict.fromkeys(df["scheduler"])})
        row["gain_pct"] = 100.0 * (row[candidate] / row[baseline] - 1.0)
        rows.append(row)
    return pd.DataFrame(rows)


def replayed_sweep(records: Rounds, schedulers: Sequence[str | Scheduler], curve: StepCurve | Mapping[int, StepCurve],
                   concurrencies: Sequence[int], steps: int, replays: int,
                   domain_mix: Mapping[str, float] | None = None, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`sweep` repeated over `replays` independent replays of `steps` steps each;
    replay i uses sweep seed `seed * replays + i`. Returns (aggregate, runs): runs holds every
    replay's sweep rows with a `replay` column; aggregate one row per (scheduler, R) with the
    tokens and seconds summed over replays, throughput = tokens / seconds, per_user =
    throughput / R, budget (mean batch tokens per request, 1 + l_r) and its standard error
    across replays budget_se (NaN for one replay), and drafted (mean l_r)."""
    replays = positive_int(replays, "replays")
    runs = pd.concat([sweep(records, schedulers, curve, concurrencies, steps, domain_mix, seed=seed * replays + i)
                      .assign(replay=i) for i in range(replays)])
    grouped = runs.groupby(["scheduler", "R"])
    agg = grouped[["tokens", "seconds"]].sum()
    agg["throughput"] = agg["tokens"] / agg["seconds"]
    agg["per_user"] = agg["throughput"] / agg.index.get_level_values("R")
    agg["budget"] = grouped["batch_per_request"].mean()
    agg["budget_se"] = grouped["batch_per_request"].std(ddof=1) / math.sqrt(replays)
    agg["drafted"] = grouped["mean_budget"].mean()
    return agg.reset_index(), runs



def per_replay(runs: pd.DataFrame, R: int) -> pd.DataFrame:
    """Each replay's throughput at concurrency R, one column a scheduler: what the paired intervals
    over replays read (`runs` as `replayed_sweep` returns it)."""
    missing = {"R", "replay", "scheduler", "throughput"} - set(runs.columns)
    if missing:
        raise ValueError(f"runs lacks the columns {sorted(missing)}; pass replayed_sweep's second frame")
    if R not in set(runs["R"]):
        raise ValueError(f"no run at R = {R}; the runs have R in {sorted(set(runs['R']))}")
    return runs[runs["R"] == R].pivot(index="replay", columns="scheduler", values="throughput")


def versus_best_baseline(aggregate: pd.DataFrame, runs: pd.DataFrame, baselines: Sequence[str],
                         candidate: str = "dspark", min_margin: float = 0.01) -> pd.DataFrame:
    """The candidate against the best of `baselines` at every R, within noise.
    `aggregate`, `runs`: from `replayed_sweep`. Noise: two standard errors of the paired
    per-replay throughput difference (0 for one replay). "at least the best, within noise":
    candidate >= best - max(noise, min_margin * best). One row per R."""
    replays = runs["replay"].nunique()
    rows = []
    for R, at in aggregate.groupby("R"):
        at = at.set_index("scheduler")["throughput"]
        best = at[list(baselines)].idxmax()
        per = runs[runs["R"] == R].pivot(index="replay", columns="scheduler", values="throughput")
        noise = 2 * (per[candidate] - per[best]).std(ddof=1) / math.sqrt(replays) if replays > 1 else 0.0
        within = at[candidate] >= at[best] - max(noise, min_margin * at[best])
        rows.append({"R": R, "best baseline": best, candidate: at[candidate], "best": at[best],
                     "gain %": 100 * (at[candidate] / at[best] - 1), "noise %": 100 * noise / at[best],
                     "at least the best, within noise": bool(within)})
    return pd.DataFrame(rows).set_index("R")


def lead_with_noise(aggregate: pd.DataFrame, runs: pd.DataFrame, other: str, candidate: str = "dspark") -> pd.DataFrame:
    """The candidate's lead over `other` at every R, in % of `other`'s throughput, with its noise:
    two standard errors of the paired per-replay difference (NaN for one replay), and whether the
    lead lies inside it, a tie. `aggregate`, `runs`: from `replayed_sweep`."""
    replays = runs["replay"].nunique()
    rows = []
    for R, at in aggregate.groupby("R"):
        at = at.set_index("scheduler")["throughput"]
        per = runs[runs["R"] == R].pivot(index="replay", columns="scheduler", values="throughput")
        noise = 2 * (per[candidate] - per[other]).std(ddof=1) / math.sqrt(replays) if replays > 1 else float("nan")
        lead = 100 * (at[candidate] / at[other] - 1)
        rows.append({"R": R, "lead %": lead, "noise %": 100 * noise / at[other],
                     "tie": bool(abs(lead) <= 100 * noise / at[other])})
    return pd.DataFrame(rows).set_index("R")


def ordering_agreement(table: pd.DataFrame, column: str, reference: str, tie: float) -> pd.DataFrame:
    """Does `column` rank the schedulers the way `reference` does? For every R
    and every pair of schedulers (in the table's order) that `reference` separates by more
    than the relative gap `tie`, one row: the pair, both relative gaps in % and whether their
    signs agree. `table`: one row per (R, scheduler) with both columns."""
    rows = []
    for R, group in table.groupby("R"):
        at = group.set_index("scheduler")
        for x, y in itertools.combinations(dict.fromkeys(group["scheduler"]), 2):
            predicted = at.loc[x, reference] / at.loc[y, reference] - 1
            if abs(predicted) > tie:
                measured = at.loc[x, column] / at.loc[y, column] - 1
                rows.append({"R": R, "pair": f"{x} vs {y}", "predicted %": 100 * predicted, "real %": 100 * measured,
                             "same order": bool(np.sign(predicted) == np.sign(measured))})
    return pd.DataFrame(rows, columns=["R", "pair", "predicted %", "real %", "same order"])


def sample_block_records(confidences: Any, domains: str | Sequence[str], rng: np.random.Generator) -> Rounds:
    """SYNTHETIC full blocks whose acceptances follow their confidences c[N, gamma] exactly
    (perfect calibration): token k survives with probability c_k given that tokens < k did
    (for tests and exercises, not a measurement)."""
    c = checks.confidences(confidences)
    survived = rng.random(c.shape) < c
    return Rounds.of(np.full(c.shape[0], c.shape[1]), np.cumprod(survived, axis=1).sum(axis=1), logit(c),
                     domain=domains)
