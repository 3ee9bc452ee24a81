"""Measured results and their provenance (chapter 00 and every chapter after it).

`make book` writes each chapter's results to ``$DSPARK_RESULTS`` (default
``<repo>/_build/results``, git-ignored). ``data/results/`` holds only committed
measurements that cannot be regenerated on the build machine, such as GPU runs.

The harness's base: every room may import it (results folders, provenance, writing and reading
results files, paths as a page prints them).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

pass
import datetime as _dt
import platform

from .. import __version__


def describe_path(path: str | Path) -> str:
    """A path as a page or a log may print it: inside the repository relative to it (the book
    build's results folder is _build/results), elsewhere under $DSPARK_RESULTS as
    "$DSPARK_RESULTS/<name>", in the Hugging Face cache as
    "the hub cache (<repo folder>)", in a temporary folder as "a temporary folder (<name>)", under
    the home folder as "~/...". Never the build machine's temporary or cache paths."""
    path = Path(path).expanduser().absolute()

    def under(root: str | Path | None) -> Path | None:
        if not root:
            return None
        root = Path(root).expanduser().absolute()
        try:
            return path.relative_to(root)
        except ValueError:
            try:
                return path.resolve().relative_to(root.resolve())
            except (ValueError, OSError):
                return None

    if (inside := under(REPO)) is not None:  # the book build's results folder too: _build/results
        return inside.as_posix() or "."
    if (inside := under(os.environ.get("DSPARK_RESULTS"))) is not None:
        return f"$DSPARK_RESULTS/{inside.as_posix()}".rstrip("/.")
    from huggingface_hub import constants

    if (inside := under(constants.HF_HUB_CACHE)) is not None:
        return f"the hub cache ({inside.parts[0] if inside.parts else 'its root'})"
    if under(tempfile.gettempdir()) is not None or under("/tmp") is not None:
        return f"a temporary folder ({path.name})"
    if (inside := under(Path.home())) is not None:
        return f"~/{inside.as_posix()}"
    return str(path)

ENV_VAR = "DSPARK_RESULTS"
REPO = Path(__file__).resolve().parents[2]


def results_dir() -> Path:
    """Where regenerated results go: $DSPARK_RESULTS, else <repo>/_build/results."""
    return Path(os.environ.get(ENV_VAR, REPO / "_build" / "results")).expanduser()


def committed_results_dir() -> Path:
    """data/results/: committed measurements that this machine cannot regenerate (GPU runs)."""
    return REPO / "data" / "results"


def cpu_name() -> str:
    """This machine's CPU model name (for provenance and cost tables)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(profile: str, device: str = "cpu") -> dict[str, Any]:
    """Machine, date, profile and versions: attached to every saved result."""
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "profile": profile,
        "device": device,
        "cpu": cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "dspark_lite": __version__,
    }


def write_json(data: dict[str, Any], path: str | Path) -> Path:
    """`data` as indented JSON at `path` (its folder made if missing); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def write_result(path: str | Path, payload: dict[str, Any], profile: str, device: str = "cpu") -> Path:
    """A results file: {"provenance": provenance(profile, device), "results": payload} at `path`."""
    return write_json({"provenance": provenance(profile, device), "results": payload}, path)


def save_result(name: str, payload: dict[str, Any], profile: str, device: str = "cpu") -> Path:
    """Write results_dir()/<name>.json with the payload and its provenance."""
    if not name.replace("_", "").isalnum():
        raise ValueError(f"result name {name!r} must be letters, digits and underscores")
    return write_result(results_dir() / f"{name}.json", payload, profile, device)


def load_results(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """All result files in a folder (default results_dir()), keyed by name."""
    folder = Path(folder) if folder is not None else results_dir()
    if not folder.exists():
        return {}
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


# The headline numbers of the book: (chapter, result file, key path, label, paper's figure).
# The results page shows each one measured, or "not yet measured".
HEADLINES: tuple[tuple[str, str, str, str, str], ...] = (
    ("01", "toy_world", "train_minutes", "corpus + tokenizer + target training (min)", "-"),
    ("01", "toy_world", "entropy.math", "target entropy on math replies (nats)", "-"),
    ("01", "toy_world", "entropy.code", "target entropy on code replies (nats)", "-"),
    ("01", "toy_world", "entropy.chat", "target entropy on chat replies (nats)", "-"),
    ("01", "toy_world", "ar_tokens_per_s", "target-only decoding, tokens/s", "-"),
    ("01", "toy_world", "latency_ratio_8_over_1", "forward latency, 8 query tokens / 1", "well under 8"),
    ("02", "speculative", "tau.classic", "tau, classic draft model", "-"),
    ("03", "parallel_drafting", "tau.dflash.math", "tau, DFlash, math (calibrated)", "4.80 (Qwen3-4B)"),
    ("03", "parallel_drafting", "tau.dflash.code", "tau, DFlash, code (calibrated)", "4.44 (Qwen3-4B)"),
    ("03", "parallel_drafting", "tau.dflash.chat", "tau, DFlash, chat (calibrated)", "2.95 (Qwen3-4B)"),
    ("03", "parallel_drafting", "tau.eagle.math", "tau, EAGLE-style, math", "4.56 (Qwen3-4B Eagle3)"),
    ("03", "parallel_drafting", "tau.eagle.code", "tau, EAGLE-style, code", "3.87 (Qwen3-4B Eagle3)"),
    ("03", "parallel_drafting", "tau.eagle.chat", "tau, EAGLE-style, chat", "2.40 (Qwen3-4B Eagle3)"),
    ("s03b", "study_suffix_decay_yardsticks", "chat_decay_points_dflash", "DFlash chat acceptance, position 1 minus 7 (points)", "9 (0.72 -> 0.63)"),
    ("s03c", "study_draft_cost", "draft_latency_ratio_16_over_4.dflash", "DFlash draft latency, gamma 16 / 4", "-"),
    ("s03c", "study_draft_cost", "draft_latency_ratio_16_over_4.eagle", "EAGLE-style draft latency, gamma 16 / 4", "-"),
    ("04", "table1_toy", "tau.dspark_markov.math", "tau, DSpark-Markov, math", "5.57 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_markov.code", "tau, DSpark-Markov, code", "5.12 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_markov.chat", "tau, DSpark-Markov, chat", "3.49 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_rnn.chat", "tau, DSpark-RNN, chat", "-"),
    ("04", "table1_toy", "macro_gain_over_dflash", "DSpark gain over DFlash, macro average (%)", "+16.3"),
    ("s04a", "study_depth_and_block_size", "gamma_sweep_macro_gain_pct.8", "DSpark gain over DFlash at gamma 8, lean recipe (%)", "+16 at gamma 7"),
    ("s04a", "study_depth_and_block_size", "gamma_sweep_macro_gain_pct.16", "DSpark gain over DFlash at gamma 16, lean recipe (%)", "+26 at gamma 15"),
    ("s04b", "study_race", "head_overhead_pct_at_gamma", "Markov head's round-latency overhead at gamma 7 (%)", "0.2-1.3"),
    ("04", "table1_toy", "macro_gain_over_eagle", "DSpark gain over the EAGLE-style drafter, macro average (%)", "+30.9 (over Eagle3)"),
    ("s04b", "study_race", "e2e_speedup_mean", "DSpark end-to-end speed-up over the target alone, T = 1", "-"),
    ("s04b", "study_race", "e2e_speedup_dflash_mean", "DFlash end-to-end speed-up over the target alone, T = 1", "-"),
    ("s04b", "study_race", "e2e_speedup_eagle_mean", "EAGLE-style end-to-end speed-up over the target alone, T = 1", "-"),
    ("05", "confidence", "auroc_raw_min", "confidence head: lowest per-position AUROC (raw)", "0.81-0.91"),
    ("05", "confidence", "sts_ece_drop_pct", "STS: drop of the mean ECE of a_k on the test split (%)", "-"),
    ("05", "confidence", "tau_change_with_head_pct", "tau change from adding the confidence head (%)", "-"),
    ("05", "confidence", "acceptance_rise_points.chat", "chat acceptance rate, threshold 0 -> 0.9 (points)", "+50.0 (45.7% -> 95.7%)"),
    ("06", "scheduler", "appendix_a.retrospective", "Appendix A: P(A) under the retrospective search", "0.85"),
    ("06", "scheduler", "appendix_a.causal", "Appendix A: P(A) under Algorithm 1 (lossless: 0.70)", "0.70"),
    ("06", "scheduler", "scheduler_median_us", "Algorithm 1 per call at R = 256, gamma = 7 (us, median)", "-"),
    ("s06ba", "study_load_sweeps", "gain_over_mtp1", "throughput gain over MTP-1", "+51% (V4 Flash)"),
    ("s06ba", "study_load_sweeps", "gain_over_mtp1_sla2", "throughput gain over MTP-1 at the second (higher-load) SLA point (%)", "+52% (V4 Pro)"),
    ("s06ba", "study_load_sweeps", "gain_over_mtp1_synthetic", "throughput gain over MTP-1, synthetic GPU-like cost table (%)", "+51% (V4 Flash)"),
    ("s06ba", "study_load_sweeps", "min_gain_over_best_baseline_pct", "DSpark vs the best baseline at its worst R, measured CPU table (%)", "-"),
    ("s06ba", "study_load_sweeps", "budget_at_min_R", "DSpark verification budget at the lowest load (tokens/request)", "about 4-6 at moderate load"),
    ("s06ba", "study_load_sweeps", "budget_at_max_R", "DSpark verification budget at the highest load (tokens/request)", "shrinks with load (MTP-1: 2)"),
    ("s06bb", "study_batched_steps", "real_step_ordering_agrees", "real batched steps rank the schedulers as the simulator predicted", "-"),
)


def lookup(payload: dict[str, Any], path: str) -> Any:
    """payload["a"]["b"] for path "a.b", or None when any key is missing."""
    for key in path.split("."):
        if not isinstance(payload, dict) or key not in payload:
            return None
        payload = payload[key]
    return payload
