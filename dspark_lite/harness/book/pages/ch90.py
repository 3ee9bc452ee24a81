"""Chapter 90's results page: the headline numbers of this build beside the paper's, the toy world's
entropy by domain, and the GPU runs committed under data/results/ (best kind first)."""
from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from .. import plots
from ..results import (GPU_RUN_KINDS, best_gpu_result, gpu_protocol_label, gpu_results, gpu_run_kind,
                       gpu_table1_rows, headline_rows, say, titled)


def headline_table(found: dict[str, dict[str, Any]]) -> "Any":
    """The headline numbers (every label whole, under the table's title), and a sentence on how many are measured."""
    table = pd.DataFrame(headline_rows(found))
    measured = table[table["ours"] != "not yet measured"]
    say(f"{len(measured)} of {len(table)} headline numbers are measured so far, from the result files of: "
        f"{', '.join(sorted(found)) or 'none yet'}.")
    return table.style.hide(axis="index").set_caption("Headline numbers: this build's measurements beside the paper's")


def entropy_figure(found: dict[str, dict[str, Any]]) -> None:
    """The target's mean next-token entropy per domain (the toy world's result file), or a note saying how to get it."""
    fig, ax = plt.subplots(figsize=(6, 3))
    world = found.get("toy_world")
    if world:
        ent = world["results"]["entropy"]
        ax.bar(list(ent), list(ent.values()), color=[plots.DOMAIN_COLORS[d] for d in ent])
        ax.set_ylabel("mean entropy (nats)")
        ax.set_title(f"Target entropy by domain ({world['provenance']['profile']} profile, "
                     f"{world['provenance']['date']})")
    else:
        ax.text(0.5, 0.5, "not yet measured: run chapter 01", ha="center", va="center")
        ax.axis("off")
    plt.show()


def _leading_run_tables(record: dict[str, Any], kind: str) -> None:
    rows = pd.DataFrame(gpu_table1_rows(record))
    if kind == GPU_RUN_KINDS[0]:  # Table 1 only under DeepSpec's full protocol; a smaller run is a subset, said so
        label = gpu_protocol_label(record)
        say(f"Compared with the paper as: {label}.")
        display(titled(rows.pivot(index="benchmark", columns="drafter", values=["tau (ours)", "tau (paper)", "difference %"]),
                       f"tau of the leading GPU run beside the paper's, compared as: {label}", 2))
    elif kind == GPU_RUN_KINDS[1]:
        say(f"This run is {kind}: its tau is not Table 1's and is not set beside the paper.")
        if len(rows):
            display(titled(rows.pivot(index="benchmark", columns="drafter", values="tau (ours)"),
                           "tau of the leading GPU run per benchmark and drafter (not Table 1)", 2))
    else:
        say(f"This run is {kind}: random weights, so its tau and acceptance mean nothing and are not shown.")


def gpu_runs() -> None:
    """The leading committed GPU run (its environment, tau where it means something, where a round's time
    goes, peak memory) and the list of every committed run; a sentence when there is none."""
    best = best_gpu_result()
    if best is None:
        say("Not yet measured on a GPU: no run of chapter 07 on a GPU is committed yet.")
        return
    name, record = best
    env, kind = record["results"].get("environment", {}), gpu_run_kind(record)
    say(f"The leading GPU run is `{name}`: {kind}, on {env.get('gpu')} ({env.get('dtype')}), torch {env.get('torch')}, "
        f"transformers {env.get('transformers')}, {env.get('new_tokens')} new tokens a prompt (DeepSpec: "
        f"{env.get('paper_new_tokens', 2048)}), seed {env.get('seed')}, {record['provenance'].get('date')}; peak GPU "
        f"memory {record['results'].get('peak_memory_gib')} GiB.")
    _leading_run_tables(record, kind)
    overheads = record["results"].get("engine_overheads")
    if overheads:
        display(titled(pd.DataFrame(overheads).T.rename_axis("engine time per round (ms) and share (%)"),
                       "where a round's time goes in the leading GPU run, per drafter", 2))
    display(titled(pd.DataFrame([{"file": n, "kind": gpu_run_kind(r), "compared as": gpu_protocol_label(r),
                                  "gpu": r["results"].get("environment", {}).get("gpu"),
                                  "date": r.get("provenance", {}).get("date")} for n, r in gpu_results()]),
                   "every committed GPU run, best kind first"))
