"""The serving simulator: real rollout records replayed under each scheduler (chapter 06b).

`simulate` / `sweep` / `replayed_sweep` replay per-block records (confidences c[N, gamma],
accepted counts, domains) for R concurrent requests under a scheduler, advancing a clock by
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

from .runtime import progress
from .costs import _check_positive_int, curve_at
from .scheduler import (
    Scheduler, StepCurve, asynchronous_schedule, fixed_length, mtp1, schedule, static_threshold,
)


@dataclass(frozen=True)
class BlockRecords:
    """Real per-block rollout records (chapter 06b): for N full blocks of gamma drafted tokens,
    the confidences c[N, gamma] in (0, 1], how many drafted tokens of the FULL block survived
    verification n_accepted[N] in 0..gamma, and each block's domain label[N]. Arrays are
    stored read-only; a single string for `domains` labels every block."""

    confidences: np.ndarray
    n_accepted: np.ndarray
    domains: np.ndarray

    def __post_init__(self) -> None:
        c = _checked_record_confidences(self.confidences)
        n = _checked_accepted(self.n_accepted, c.shape)
        d = _checked_domains(self.domains, c.shape[0])
        for name, array in (("confidences", c), ("n_accepted", n), ("domains", d)):
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def gamma(self) -> int:
        """Drafted tokens per block."""
        return int(self.confidences.shape[1])

    def __len__(self) -> int:
        return int(self.confidences.shape[0])

    @property
    def domain_names(self) -> list[str]:
        """Sorted distinct domains."""
        return sorted(set(self.domains.tolist()))

    def counts(self) -> dict[str, int]:
        """Blocks per domain."""
        names, counts = np.unique(self.domains, return_counts=True)
        return {str(k): int(v) for k, v in zip(names, counts)}

    @classmethod
    def from_rounds(cls, rounds_by_domain: Mapping[str, Sequence[Any]], gamma: int) -> BlockRecords:
        """Collect `speculative.RoundRecord`s (domain -> rounds) into records, keeping the
        rounds that proposed a full block of `gamma` tokens with confidences (chapter 06b)."""
        rows, accepted, domains = [], [], []
        for domain, rounds in rounds_by_domain.items():
            for record in rounds:
                if record.proposed == gamma and record.confidences is not None:
                    rows.append(np.asarray(record.confidences, dtype=np.float64).reshape(gamma))
                    accepted.append(record.accepted)
                    domains.append(domain)
        if not rows:
            raise ValueError(f"no round proposed a full block of gamma = {gamma} tokens with confidences")
        return cls(np.stack(rows), np.array(accepted), np.array(domains))


def _checked_record_confidences(confidences: Any) -> np.ndarray:
    try:
        c = np.array(confidences, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"confidences must be numbers shaped (N, gamma): {error}") from None
    if c.ndim != 2 or c.shape[0] == 0 or c.shape[1] == 0:
        raise ValueError(f"confidences must be shaped (N blocks >= 1, gamma >= 1); got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"confidences must be finite; found {int((~np.isfinite(c)).sum())} NaN/inf values")
    if c.min() <= 0.0 or c.max() > 1.0:
        bad = c[(c <= 0.0) | (c > 1.0)][0]
        raise ValueError(f"confidences must lie in (0, 1]; got {bad}")
    return c


def _checked_accepted(n_accepted: Any, shape: tuple[int, int]) -> np.ndarray:
    n = np.array(n_accepted)
    if n.shape != (shape[0],):
        raise ValueError(f"n_accepted must have one entry per block, shape ({shape[0]},); got shape {n.shape}")
    if n.dtype.kind not in "iuf" or not np.array_equal(n, np.round(n)):
        raise ValueError(f"n_accepted must be integers; got dtype {n.dtype}")
    n = n.astype(np.int64)
    if n.min() < 0 or n.max() > shape[1]:
        raise ValueError(f"n_accepted must lie in 0..gamma = 0..{shape[1]}; got values in {n.min()}..{n.max()}")
    return n


def _checked_domains(domains: Any, size: int) -> np.ndarray:
    d = np.full(size, domains, dtype=object) if isinstance(domains, str) else np.array(domains, dtype=object)
    if d.shape != (size,):
        raise ValueError(f"domains must have one label per block, shape ({size},); got shape {d.shape}")
    if not all(isinstance(x, str) and x for x in d):
        raise ValueError("domains must be non-empty strings")
    return d.astype(str)


@dataclass(frozen=True)
class SimResult:
    """One simulated serving run (chapter 06b). throughput: tokens/s over all requests;
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


SIM_SCHEDULERS = ("dspark", "fixed", "mtp1", "threshold", "threshold-cumulative", "async")


def _stateless(fn: Scheduler) -> Choose:
    return lambda current, stale, curve: fn(current, curve)


Choose = Callable[[np.ndarray, np.ndarray, StepCurve], np.ndarray]  # (current, stale, curve) -> lengths


def resolve_scheduler(scheduler: str | Scheduler) -> tuple[str, Choose]:
    """A scheduler name or callable -> (name, choose(current, stale, curve) -> lengths)
    (chapter 06b). Names: "dspark" (Algorithm 1), "fixed" (the whole block), "mtp1",
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
    fixed = {"dspark": schedule, "fixed": fixed_length(), "mtp1": mtp1}
    if base in fixed and not argument:
        return scheduler, _stateless(fixed[base])
    if scheduler == "async":
        return scheduler, lambda current, stale, curve: asynchronous_schedule(stale, current, curve)
    raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {', '.join(SIM_SCHEDULERS)} "
                     f"(threshold:<t> sets a threshold) or a callable (confidences, curve) -> lengths")


def _domain_pools(records: BlockRecords, domain_mix: Mapping[str, float] | None) -> tuple[list[str], np.ndarray]:
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


def _request_pools(records: BlockRecords, names: list[str], weights: np.ndarray, requests: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each request's domain drawn from the mix: (all record indices grouped by domain,
    each request's pool offset, each request's pool size)."""
    pools = [np.flatnonzero(records.domains == name) for name in names]
    order = np.concatenate(pools)
    starts = np.cumsum([0] + [p.size for p in pools[:-1]])
    chosen = rng.choice(len(names), size=requests, p=weights)
    return order, starts[chosen], np.array([p.size for p in pools])[chosen]


def _checked_lengths(lengths: Any, requests: int, gamma: int, name: str) -> np.ndarray:
    l = np.asarray(lengths)
    if l.shape != (requests,) or l.dtype.kind not in "iu" or l.min() < 0 or l.max() > gamma:
        raise ValueError(f"scheduler {name!r} must return {requests} integers in [0, {gamma}]; got {l!r}")
    return l.astype(np.int64)


def _check_sim_args(records: BlockRecords, curve: StepCurve, concurrency: Any, steps: Any,
                    gamma: int | None) -> tuple[int, int, int]:
    if not isinstance(records, BlockRecords):
        raise ValueError(f"records must be BlockRecords; got {type(records).__name__}")
    if not isinstance(curve, StepCurve):
        raise ValueError(f"curve must be a StepCurve; got {type(curve).__name__}")
    requests = _check_positive_int(concurrency, "concurrency R (active requests)")
    steps = _check_positive_int(steps, "steps")
    gamma = records.gamma if gamma is None else _check_positive_int(gamma, "gamma")
    if gamma > records.gamma:
        raise ValueError(f"gamma = {gamma} exceeds the records' block of {records.gamma} drafted tokens")
    if not curve.min_batch <= requests <= curve.max_batch:
        raise ValueError(f"R = {requests} requests need batches of at least {requests} tokens, but the step "
                         f"curve covers [{curve.min_batch}, {curve.max_batch}]")
    return requests, steps, gamma


def simulate(records: BlockRecords, scheduler: str | Scheduler, curve: StepCurve, concurrency: int, steps: int,
             domain_mix: Mapping[str, float] | None = None, rng: np.random.Generator | None = None,
             gamma: int | None = None, warmup_steps: int = 2) -> SimResult:
    """Simulate R = `concurrency` requests served for `steps` steps (chapter 06b).

    Each request gets a domain drawn from `domain_mix` (None: the records' own mix). Each
    step every request draws one block record of its domain (i.i.d., with `rng`); the
    scheduler picks lengths l_r from the confidences (first `gamma` columns); request r
    gains min(l_r, n_accepted_r) + 1 tokens; the clock advances by 1 / SPS(B) with
    B = sum_r (1 + l_r). The first `warmup_steps` steps run but are not counted; "async"
    needs confidences from two steps earlier, and uses the current ones until they exist
    (only in warm-up with the default 2). Random draws do not depend on the scheduler, so
    schedulers given equal seeds see the same blocks (common random numbers).
    """
    requests, steps, gamma = _check_sim_args(records, curve, concurrency, steps, gamma)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, (int, np.integer)) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0; got {warmup_steps!r}")
    name, choose = resolve_scheduler(scheduler)
    names, weights = _domain_pools(records, domain_mix)
    rng = np.random.default_rng() if rng is None else rng
    order, offsets, sizes = _request_pools(records, names, weights, requests, rng)
    confidences, accepted = records.confidences[:, :gamma], np.minimum(records.n_accepted, gamma)
    history: deque[np.ndarray] = deque(maxlen=2)
    totals = np.zeros(5)  # tokens, seconds, budget, batch tokens, expected tokens
    for step in range(warmup_steps + steps):
        drawn = order[offsets + rng.integers(0, sizes)]
        current = confidences[drawn]
        stale = history[0] if len(history) == 2 else current
        history.append(current)
        lengths = _checked_lengths(choose(current, stale, curve), requests, gamma, name)
        batch = requests + int(lengths.sum())
        if batch > curve.max_batch:
            raise ValueError(f"scheduler {name!r} built a batch of B = {batch} tokens (R = {requests}), beyond "
                             f"the step curve's largest profiled size {curve.max_batch}; profile larger batches")
        if step >= warmup_steps:
            totals += _step_totals(current, accepted[drawn], lengths, batch, curve)
    return _result(name, requests, steps, gamma, totals)


def _step_totals(current: np.ndarray, accepted: np.ndarray, lengths: np.ndarray, batch: int,
                 curve: StepCurve) -> np.ndarray:
    survival = np.concatenate([np.zeros((current.shape[0], 1)), np.cumsum(np.cumprod(current, axis=1), axis=1)], 1)
    expected = current.shape[0] + survival[np.arange(current.shape[0]), lengths].sum()
    tokens = np.minimum(lengths, accepted).sum() + current.shape[0]
    return np.array([tokens, 1.0 / curve.sps(batch), lengths.sum(), batch, expected])


def _result(name: str, requests: int, steps: int, gamma: int, totals: np.ndarray) -> SimResult:
    tokens, seconds, budget, batch, expected = totals
    throughput = tokens / seconds
    return SimResult(name, requests, steps, gamma, float(throughput), float(throughput / requests),
                     float(budget / (steps * requests)), float(batch / (steps * requests)),
                     float(tokens / (steps * requests)), float(expected / seconds), float(seconds), int(tokens))


def sweep(records: BlockRecords, schedulers: Sequence[str | Scheduler], curve: StepCurve | Mapping[int, StepCurve],
          concurrencies: Sequence[int], steps: int, domain_mix: Mapping[str, float] | None = None,
          seed: int = 0, gamma: int | None = None) -> pd.DataFrame:
    """`simulate` over every (scheduler, R): one DataFrame row each, the SimResult fields
    (chapter 06b). Cell (scheduler, R) uses rng = default_rng([seed, R]), so all schedulers
    at one R replay the same blocks. `curve`: one step curve for every R, or one per R
    (`costs.profile_step_curves`; `costs.curve_at` picks it)."""
    if not schedulers or not concurrencies:
        raise ValueError("schedulers and concurrencies must be non-empty")
    grid = list(itertools.product(schedulers, concurrencies))
    rows = [simulate(records, s, curve_at(curve, R), R, steps, domain_mix, np.random.default_rng([seed, int(R)]),
                     gamma).as_row()
            for s, R in progress(grid, desc="serving sweep", leave=False)]
    return pd.DataFrame(rows)


def sla_gain(df: pd.DataFrame, baseline: str = "mtp1", per_user_slas: Sequence[float] | None = None,
             candidate: str = "dspark", tolerance: float = 0.01) -> pd.DataFrame:
    """Best throughput under per-user speed SLAs (chapter 06b; paper section 5).

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


def replayed_sweep(records: BlockRecords, schedulers: Sequence[str | Scheduler], curve: StepCurve | Mapping[int, StepCurve],
                   concurrencies: Sequence[int], steps: int, replays: int,
                   domain_mix: Mapping[str, float] | None = None, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`sweep` repeated over `replays` independent replays of `steps` steps each (chapter 06b);
    replay i uses sweep seed `seed * replays + i`. Returns (aggregate, runs): runs holds every
    replay's sweep rows with a `replay` column; aggregate one row per (scheduler, R) with the
    tokens and seconds summed over replays, throughput = tokens / seconds, per_user =
    throughput / R, budget (mean batch tokens per request, 1 + l_r) and its standard error
    across replays budget_se (NaN for one replay), and drafted (mean l_r)."""
    replays = _check_positive_int(replays, "replays")
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


def versus_best_baseline(aggregate: pd.DataFrame, runs: pd.DataFrame, baselines: Sequence[str],
                         candidate: str = "dspark", min_margin: float = 0.01) -> pd.DataFrame:
    """The candidate against the best of `baselines` at every R, within noise (chapter 06b).
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


def ordering_agreement(table: pd.DataFrame, column: str, reference: str, tie: float) -> pd.DataFrame:
    """Does `column` rank the schedulers the way `reference` does (chapter 06b)? For every R
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


def sample_block_records(confidences: Any, domains: Any, rng: np.random.Generator) -> BlockRecords:
    """SYNTHETIC records whose acceptances follow their confidences exactly (perfect
    calibration): token k survives with probability c_k given that tokens < k did
    (chapter 06b; for tests and exercises, not a measurement)."""
    c = _checked_record_confidences(confidences)
    survived = rng.random(c.shape) < c
    return BlockRecords(c, np.cumprod(survived, axis=1).sum(axis=1), domains)
