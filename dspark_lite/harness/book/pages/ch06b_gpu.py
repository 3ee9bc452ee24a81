"""Chapter 06b's scheduler comparison on a GPU's cost table: when `ci/gpu_check.py` has measured
Qwen3-4B's SPS(B) on a GPU and the file is committed (`costs.load_gpu_cost_table`), the chapter's
calibrated records are replayed on that table at every concurrency it covers."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd
from IPython.display import display

from ....record import Rounds
from ...serving import costs, simulator
from ..results import say, titled
from ..verdicts import yes_no


def gpu_table_sweep(records: Rounds, schedulers: Sequence[str], baselines: Sequence[str], names: Mapping[str, str],
                    concurrencies: Sequence[int], steps: int, replays: int, mix: Mapping[str, float] | None = None,
                    seed: int = 0, folder: str | Path | None = None) -> pd.DataFrame | None:
    """Every scheduler at every R of `concurrencies` that the committed GPU table covers, on that table
    (`simulator.replayed_sweep` with the chapter's own sizes), its throughput table and whether DSpark is
    at least the best of `baselines` at each R, within noise; the aggregate, or None (said so) when no GPU
    table is committed or it covers none of the chapter's R."""
    table = costs.load_gpu_cost_table(folder)
    if table is None:
        say("No GPU has measured Qwen3-4B's cost table yet: `ci/gpu_check.py` writes it "
            "(`data/results/qwen3_4b_<gpu>_costs.json`), and once it is committed this cell replays the same "
            "records on it. Until then the comparison above, on this machine's tables, is the chapter's.")
        return None
    covered = [R for R in concurrencies if R in table]
    meta = next(iter(table.values())).meta
    if not covered:
        say(f"The committed GPU table ({meta.get('file')}) was measured at R = {sorted(table)}, none of this "
            f"run's concurrencies ({list(concurrencies)}), so it is not replayed here.")
        return None
    aggregate, runs = simulator.replayed_sweep(records, list(schedulers), table, covered, steps, replays, mix, seed=seed)
    throughput = aggregate.pivot(index="R", columns="scheduler", values="throughput")[list(schedulers)]
    display(titled(throughput.rename(columns=dict(names)), f"throughput (tokens/s) on the Qwen3-4B cost table measured "
                   f"on {meta.get('gpu')} ({meta.get('dtype')})", 0))
    versus = simulator.versus_best_baseline(aggregate, runs, list(baselines))
    every = bool(versus["at least the best, within noise"].all())
    say(f"On the cost table {meta.get('gpu')} measured at Qwen3-4B's shape ({meta.get('file')}), replayed at "
        f"R = {covered} with this chapter's calibrated records: DSpark at least the best baseline at every R, "
        f"within noise: {yes_no(every)}.")
    return aggregate
