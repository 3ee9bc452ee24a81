"""One module a chapter (`ch01`, `ch02`, ...): the chapter's bookkeeping behind names that say what
they show (the sentences a run's numbers go into, the verdict box's rows, figure plumbing), so the
notebook's visible code is the method and its measurement. Each sentence comes out of the cell
that measured it as Markdown output (`results.say`).
"""
from __future__ import annotations

import json
from pathlib import Path

from ...result_files import REPO
from ..results import say

BUILD_TIMES = REPO / "data" / "build" / "cold_build_times.json"


def run_time_note(chapter: str, times: Path = BUILD_TIMES) -> None:
    """Say how long `chapter` (a notebook stem, "04_markov_head") took in the latest cold build
    (full profile, empty cache) and on a GPU where one has run it, from the committed build
    times: the "before you run" note's measured half."""
    if not Path(times).exists():  # the package installed outside a clone: the timings stay in the repository
        say("**Run time.** The cold-build timings are in the book's repository (`data/build/`), not in the installed "
            "package; the rendered book shows them.")
        return
    record = json.loads(Path(times).read_text())
    if chapter not in record["minutes"]:
        raise ValueError(f"no cold-build time for {chapter!r}; known: {', '.join(sorted(record['minutes']))}")
    gpu = record.get("gpu_minutes", {}).get(chapter)
    say(f"**Run time.** In the latest cold build ({record['build']}; {record['machine']}) this chapter took "
        f"{record['minutes'][chapter]:g} minutes at the full profile with an empty cache; with the cache warm it "
        "loads what it trained instead. "
        + (f"On a GPU it took {gpu:g} minutes." if gpu is not None else "No GPU has run it yet."))
