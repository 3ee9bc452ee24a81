"""Two builds' measured numbers side by side, each difference read against the drafters' seed spread:
Table 1's tau (chapter 04, every drafter and domain, seed mean), chapter 03's tau, Figures 3 and 4
(chapter 04's lean drafters, seed means, against their seed range where the build kept each seed's tau), chapter 05's calibration (ECE, Brier, AUROC of every
calibrator; the raw and STS ECE's seed mean over every drafter seed) and the schedulers' choices (chapter 06's
Appendix A acceptances, chapter 06b's gain over MTP-1).

    python ci/compare_results.py BUILD_A/_build/results BUILD_B/_build/results

A number is "identical" when both builds wrote the same value (to 1e-9), "inside" when the
difference is no larger than the spread of build A's per-seed values of that number (max - min
over the drafters' seeds; Table 1's, chapter 03's and the lean drafters' tau and chapter 05's seed ECEs), and "differs" otherwise. Numbers
that hang on a clock (chapter 06b's cost tables are timed on this machine) are marked "timed":
they are shown, never expected equal. Exits 0; it reports, it does not judge.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_verdicts import two_builds  # noqa: E402

DOMAINS = ("math", "code", "chat")


def _read(path: Path) -> dict:
    raw = json.loads(path.read_text())
    return raw.get("results", raw) if isinstance(raw, dict) else {}


# Where a chapter's result keys went when its studies were split out of it (issue 64): the chapter's
# file is read together with its studies' files, so an old build (one file) and a new one (several)
# compare key by key. Each study writes its own keys under the names the chapter used.
MOVED = {
    "toy_world": ("study_regime", "study_vocabulary"),
    "speculative": ("study_wall_clock",),
    "parallel_drafting": ("study_where_parallel_wins", "study_suffix_decay_yardsticks", "study_draft_cost",
                          "study_multimodal_collision"),
    "table1_toy": ("study_depth_and_block_size", "study_race", "study_figure2_curves", "study_seed_robustness"),
    "confidence": ("study_calibrators", "study_head_alone", "study_engine_files"),
    "serving": ("study_load_sweeps", "study_batched_steps", "study_calibration_in_serving", "study_interpolation_misses"),
}


def results(folder: Path, name: str) -> dict:
    """The `results` part of `folder`/`name`.json, with the keys of the studies split out of that
    chapter (`MOVED`) added where the chapter's file lacks them ({} when no file has any)."""
    found = {}
    for part in (name, *MOVED.get(name, ())):
        path = folder / f"{part}.json"
        if path.is_file():
            for key, value in _read(path).items():
                found.setdefault(key, value)
    return found


def seed_means(label: str, per_seed_a: dict, per_seed_b: dict) -> Iterator[tuple]:
    """Rows "label run domain (seed mean)" of {run: {domain: [each seed's value]}}, with A's seed
    range (max - min) as the spread."""
    for run in sorted(per_seed_a.keys() | per_seed_b.keys()):
        for domain in DOMAINS:
            sa, sb = per_seed_a.get(run, {}).get(domain) or [], per_seed_b.get(run, {}).get(domain) or []
            yield (f"{label} {run} {domain} (seed mean)", statistics.mean(sa) if sa else None,
                   statistics.mean(sb) if sb else None, (max(sa) - min(sa)) if len(sa) > 1 else None, "")


def rows(a: Path, b: Path) -> Iterator[tuple[str, float | None, float | None, float | None, str]]:
    """(what, A, B, A's seed spread or None, kind) for every number compared; kind "timed" or ""."""
    for chapter, name in (("04", "table1_toy"), ("03", "parallel_drafting")):
        yield from seed_means(f"{chapter} tau", results(a, name).get("tau_per_seed", {}),
                              results(b, name).get("tau_per_seed", {}))
    table1_a, table1_b = results(a, "table1_toy"), results(b, "table1_toy")
    if "ablation_tau_per_seed" in table1_a and "ablation_tau_per_seed" in table1_b:  # kind@gamma x layers
        yield from seed_means("04 Figures 3-4 tau", table1_a.get("ablation_tau_per_seed", {}),
                              table1_b.get("ablation_tau_per_seed", {}))
    else:  # a build from before the lean drafters' seeds were kept: the seed means, no spread
        for key, label in (("depth_tau", "Figure 3"), ("gamma_sweep_tau", "Figure 4")):
            for run in sorted(table1_a.get(key, {}).keys() | table1_b.get(key, {}).keys()):
                for domain in DOMAINS:
                    yield (f"04 {label} tau {run} {domain} (seed mean)", table1_a.get(key, {}).get(run, {}).get(domain),
                           table1_b.get(key, {}).get(run, {}).get(domain), None, "")
    for gamma in sorted(table1_a.get("gamma_sweep_macro_gain_pct", {}).keys() | table1_b.get("gamma_sweep_macro_gain_pct", {}).keys()):
        yield (f"04 Figure 4 macro gain at gamma {gamma} (%)", table1_a.get("gamma_sweep_macro_gain_pct", {}).get(gamma),
               table1_b.get("gamma_sweep_macro_gain_pct", {}).get(gamma), None, "")
    seeds_a, seeds_b = results(a, "confidence").get("by_seed", {}), results(b, "confidence").get("by_seed", {})
    for calibrator in ("raw", "STS"):  # chapter 05 on every drafter seed: the seed mean, against A's seed range
        metric = f"ECE of a_k, {calibrator}"
        sa, sb = [row[metric] for row in seeds_a.values()], [row[metric] for row in seeds_b.values()]
        yield (f"05 {metric} (seed mean)", statistics.mean(sa) if sa else None, statistics.mean(sb) if sb else None,
               (max(sa) - min(sa)) if len(sa) > 1 else None, "")
    calib_a, calib_b = results(a, "confidence").get("calibration", {}), results(b, "confidence").get("calibration", {})
    for calibrator in sorted(calib_a.keys() | calib_b.keys()):
        for metric in sorted(calib_a.get(calibrator, {}).keys() | calib_b.get(calibrator, {}).keys()):
            yield (f"05 {calibrator}: {metric}", calib_a.get(calibrator, {}).get(metric),
                   calib_b.get(calibrator, {}).get(metric), None, "")
    appendix_a, appendix_b = results(a, "scheduler").get("appendix_a", {}), results(b, "scheduler").get("appendix_a", {})
    for scheduler in ("causal", "retrospective", "asynchronous"):
        yield (f"06 Appendix A acceptance, {scheduler}", appendix_a.get(scheduler), appendix_b.get(scheduler), None, "")
    serving_a, serving_b = results(a, "serving"), results(b, "serving")
    for key in ("gain_over_mtp1", "gain_over_mtp1_sla2", "gain_over_mtp1_synthetic", "gain_over_mtp1_synthetic_sla2"):
        yield f"06b {key} (%)", serving_a.get(key), serving_b.get(key), None, "timed"


def verdict(a: float | None, b: float | None, spread: float | None, kind: str) -> str:
    if a is None or b is None:
        return "missing"
    if kind:
        return kind
    if abs(a - b) <= 1e-9:
        return "identical"
    if spread is not None and abs(a - b) <= spread:
        return "inside"
    return "differs"


def main(argv: list[str] | None = None) -> int:
    a_folder, b_folder = two_builds(argv, __doc__, "results (make book writes _build/results)")
    counts: dict[str, int] = {}
    print(f"{'number':58} {'A':>9} {'B':>9} {'B - A':>9} {'A spread':>9}  verdict")
    for what, a, b, spread, kind in rows(a_folder, b_folder):
        said = verdict(a, b, spread, kind)
        counts[said] = counts.get(said, 0) + 1
        cells = [f"{x:9.4f}" if x is not None else f"{'-':>9}" for x in (a, b)]
        delta = f"{b - a:+9.4f}" if a is not None and b is not None else f"{'-':>9}"
        print(f"{what[:58]:58} {cells[0]} {cells[1]} {delta} {(f'{spread:9.3f}' if spread is not None else '-'):>9}  {said}")
    print("; ".join(f"{n} {said}" for said, n in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
