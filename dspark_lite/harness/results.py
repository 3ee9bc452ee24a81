"""Measured results and their provenance (chapter 00 and every chapter after it).

`make book` writes each chapter's results to ``$DSPARK_RESULTS`` (default
``<repo>/_build/results``, git-ignored). ``data/results/`` holds only committed
measurements that cannot be regenerated on the build machine, such as GPU runs.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from .. import __version__
from .verdicts import word_list

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


def plain(value: Any, digits: int = 3) -> str:
    """A value as words for a printed sentence, not a Python repr (chapters 03-07): a mapping as
    "math 0.03, code 0.27 and chat 0.37", a list as "math, code and chat" ("none" when empty), a
    truth value as "yes" / "no", a float rounded to `digits` decimals."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.{digits}g}" if abs(value) >= 10 ** digits else f"{round(float(value), digits):g}"
    if isinstance(value, np.integer):
        return str(int(value))
    if isinstance(value, Mapping):
        nested = (Mapping, list, tuple, np.ndarray)
        parts = [f"{k} {'(' + plain(v, digits) + ')' if isinstance(v, nested) else plain(v, digits)}"
                 for k, v in value.items()]
    elif isinstance(value, (list, tuple, np.ndarray)):
        parts = [plain(v, digits) for v in value]
    else:
        return str(value)
    return word_list(parts) if parts else "none"


def glue(name: str, value: Any, fmt: str = "") -> None:
    """Put a measured number or a run-chosen phrase into the chapter's prose (nothing is shown in
    the cell: a glue call may end a cell).

    The prose cites it as {glue:md}`name`: myst-nb fills it in from the executed notebook, so a
    sentence states what *this* run measured (`ci/check_prose.py` refuses measured numbers typed
    into the text). `value` is formatted with `fmt` ("" = str). Words work too: glue a verdict
    chosen by the result ("beats" / "does not beat") so the sentence reads true either way.
    Without myst-nb (on Colab) nothing is glued.
    """
    text = format(value, fmt) if fmt else str(value)
    try:
        from IPython.display import Markdown
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, Markdown(text), display=False)


def run_shows(rows: list[tuple[str, str, str, bool | None]]) -> "Any":
    """The box that ends a chapter: what the paper claims, what this run measured, and whether it
    reproduced (True, False, or None for a claim this machine cannot test), as a table."""
    import pandas as pd

    verdict = {True: "reproduced", False: "not reproduced", None: "not testable here"}
    for row in rows:
        if len(row) != 4 or row[3] not in verdict:
            raise ValueError(f"each row is (claim, paper, this run, True/False/None), got {row!r}")
    frame = pd.DataFrame([(claim, paper, measured, verdict[ok]) for claim, paper, measured, ok in rows],
                         columns=["claim", "paper", "this run", "verdict"])
    return frame.style.hide(axis="index").set_caption("What this run shows")


def _float_text(value: Any) -> Any:
    """A float as Python prints it, to 6 significant digits (0.3, 5.0, 1e-07); anything else as is."""
    if isinstance(value, (float, np.floating)):
        return str(float(f"{float(value):.6g}"))
    return value


def titled(df: "Any", title: str, digits: int | None = None) -> "Any":
    """A table as the book shows it, with its title (chapter 00 sets the book's table style): the
    Styler of `df` with `title` as its caption, floats shown with `digits` decimals (as
    `df.round(digits)` showed them; integers and text unchanged), or as Python prints them when
    `digits` is None; a missing value as "NaN". Index and column labels stay as the DataFrame
    showed them; `df` is not modified."""
    styler = df.style.set_caption(title).set_table_attributes('class="dataframe"')  # the page's table style
    styler = styler.format_index(_float_text, axis=0).format_index(_float_text, axis=1)
    if digits is None:
        return styler.format(_float_text, na_rep="NaN")
    return styler.format(precision=digits, na_rep="NaN")


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
    ("03", "parallel_drafting", "chat_decay_points_dflash", "DFlash chat acceptance, position 1 minus 7 (points)", "9 (0.72 -> 0.63)"),
    ("03", "parallel_drafting", "draft_latency_ratio_16_over_4.dflash", "DFlash draft latency, gamma 16 / 4", "-"),
    ("03", "parallel_drafting", "draft_latency_ratio_16_over_4.eagle", "EAGLE-style draft latency, gamma 16 / 4", "-"),
    ("04", "table1_toy", "tau.dspark_markov.math", "tau, DSpark-Markov, math", "5.57 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_markov.code", "tau, DSpark-Markov, code", "5.12 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_markov.chat", "tau, DSpark-Markov, chat", "3.49 (Qwen3-4B)"),
    ("04", "table1_toy", "tau.dspark_rnn.chat", "tau, DSpark-RNN, chat", "-"),
    ("04", "table1_toy", "macro_gain_over_dflash", "DSpark gain over DFlash, macro average (%)", "+16.3"),
    ("04", "table1_toy", "gamma_sweep_macro_gain_pct.4", "DSpark gain over DFlash at gamma 4, lean recipe (%)", "-"),
    ("04", "table1_toy", "gamma_sweep_macro_gain_pct.16", "DSpark gain over DFlash at gamma 16, lean recipe (%)", "+26 at gamma 15"),
    ("04", "table1_toy", "head_overhead_pct_at_gamma", "Markov head's round-latency overhead at gamma 7 (%)", "0.2-1.3"),
    ("04", "table1_toy", "macro_gain_over_eagle", "DSpark gain over the EAGLE-style drafter, macro average (%)", "+30.9 (over Eagle3)"),
    ("04", "table1_toy", "e2e_speedup_mean", "DSpark end-to-end speed-up over the target alone, T = 1", "-"),
    ("04", "table1_toy", "e2e_speedup_dflash_mean", "DFlash end-to-end speed-up over the target alone, T = 1", "-"),
    ("04", "table1_toy", "e2e_speedup_eagle_mean", "EAGLE-style end-to-end speed-up over the target alone, T = 1", "-"),
    ("05", "confidence", "auroc_raw_min", "confidence head: lowest per-position AUROC (raw)", "0.81-0.91"),
    ("05", "confidence", "sts_ece_drop_pct", "STS: drop of the mean ECE of a_k on the test split (%)", "-"),
    ("05", "confidence", "tau_change_with_head_pct", "tau change from adding the confidence head (%)", "-"),
    ("05", "confidence", "acceptance_rise_points.chat", "chat acceptance rate, threshold 0 -> 0.9 (points)", "+50.0 (45.7% -> 95.7%)"),
    ("06", "scheduler", "appendix_a.retrospective", "Appendix A: P(A) under the retrospective search", "0.85"),
    ("06", "scheduler", "appendix_a.causal", "Appendix A: P(A) under Algorithm 1 (lossless: 0.70)", "0.70"),
    ("06", "scheduler", "scheduler_median_us", "Algorithm 1 per call at R = 256, gamma = 7 (us, median)", "-"),
    ("06b", "serving", "gain_over_mtp1", "throughput gain over MTP-1", "+51% (V4 Flash)"),
    ("06b", "serving", "gain_over_mtp1_sla2", "throughput gain over MTP-1 at the second (higher-load) SLA point (%)", "+52% (V4 Pro)"),
    ("06b", "serving", "gain_over_mtp1_synthetic", "throughput gain over MTP-1, synthetic GPU-like cost table (%)", "+51% (V4 Flash)"),
    ("06b", "serving", "min_gain_over_best_baseline_pct", "DSpark vs the best baseline at its worst R, measured CPU table (%)", "-"),
    ("06b", "serving", "budget_at_min_R", "DSpark verification budget at the lowest load (tokens/request)", "about 4-6 at moderate load"),
    ("06b", "serving", "budget_at_max_R", "DSpark verification budget at the highest load (tokens/request)", "shrinks with load (MTP-1: 2)"),
    ("06b", "serving", "real_step_ordering_agrees", "real batched steps rank the schedulers as the simulator predicted", "-"),
)


def lookup(payload: dict[str, Any], path: str) -> Any:
    """payload["a"]["b"] for path "a.b", or None when any key is missing."""
    for key in path.split("."):
        if not isinstance(payload, dict) or key not in payload:
            return None
        payload = payload[key]
    return payload


def headline_rows(found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per headline number: its measured value and provenance, or 'not yet measured'."""
    rows = []
    for chapter, name, path, label, paper in HEADLINES:
        record = found.get(name)
        value = lookup(record["results"], path) if record else None
        prov = record["provenance"] if record and value is not None else {}
        rows.append({
            "chapter": chapter, "measurement": label,
            "ours": "not yet measured" if value is None else (f"{value:.3g}" if isinstance(value, float) else value),
            "paper": paper, "profile": prov.get("profile", ""), "machine": prov.get("cpu", ""),
            "date": prov.get("date", ""),
        })
    return rows


# Chapter 07's GPU runs: data/results/qwen3_4b_<gpu>.json (real weights, DeepSpec's full protocol),
# ..._subset.json (real weights on DeepSpec's prompts at smaller sizes), ..._fixture.json (real
# weights on the book's fixture prompts) and ..._random_weights.json.
GPU_RESULT_GLOB = "qwen3_4b_*.json"
# What a chapter-07 run is, best first: the results page shows the best kind there is.
GPU_RUN_KINDS: tuple[str, ...] = ("real weights, DeepSpec's prompts", "real weights, fixture prompts (not Table 1)",
                                  "random weights (costs and overheads only)", "tiny random models (code path only)")


def gpu_run_kind(record: dict[str, Any]) -> str:
    """Which of GPU_RUN_KINDS a chapter-07 result is, from its environment (chapter 07). A file
    without `comparable_to_paper` (written before it existed) counts as comparable when real."""
    env = record.get("results", {}).get("environment", {})
    mode = env.get("mode")
    if mode == "real":
        comparable = env.get("comparable_to_paper", env.get("prompt_source", "deepspec") != "fixture")
        return GPU_RUN_KINDS[0] if comparable else GPU_RUN_KINDS[1]
    return GPU_RUN_KINDS[2] if mode == "random-weights" else GPU_RUN_KINDS[3]


def gpu_protocol(record: dict[str, Any]) -> str | None:
    """Under which protocol a chapter-07 result's tau stands beside the paper's (chapter 07):
    "table1" only for a run of DeepSpec's full protocol (its prompt counts per benchmark, 2048 new
    tokens, T = 1, gamma 7, real weights, DeepSpec's files), "subset" for real weights on DeepSpec's
    prompts at other sizes, None for any other run. Files written before the "subset" key existed
    kept every comparable run under "table1": their environment decides."""
    from .evalsets import DEEPSPEC_COUNTS

    results = record.get("results", {})
    if gpu_run_kind(record) != GPU_RUN_KINDS[0]:
        return None
    if "subset" in results:
        return "subset"
    env = results.get("environment", {})
    if env.get("protocol") in ("table1", "subset"):
        return env["protocol"]
    full = (env.get("prompt_counts") == DEEPSPEC_COUNTS and env.get("new_tokens") == 2048
            and env.get("prompt_source", "deepspec") == "deepspec" and env.get("temperature", 1.0) == 1.0
            and env.get("gamma", 7) == 7)
    return "table1" if full else "subset"


def gpu_protocol_label(record: dict[str, Any]) -> str:
    """How the results page names a run's comparison with the paper: "Table 1", "subset (20 prompts
    a benchmark, 256 new tokens)", or "not compared" (chapter 07)."""
    protocol = gpu_protocol(record)
    if protocol is None:
        return "not compared"
    if protocol == "table1":
        return "Table 1"
    env = record.get("results", {}).get("environment", {})
    sizes = sorted({int(v) for v in (env.get("prompt_counts") or {}).values()})
    prompts = "-".join(map(str, sizes[::max(1, len(sizes) - 1)])) or "?"
    return f"subset ({prompts} prompts a benchmark, {env.get('new_tokens', '?')} new tokens)"


def gpu_results(folder: Path | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every chapter-07 result in `folder` (default data/results/) as (file stem, record), best
    first: real runs on DeepSpec's prompts (those of the full protocol before subsets), then real
    runs on the fixture, then random weights; the newest first within a kind (chapter 07). A later
    random-weights run never hides a real one, nor a later subset a full Table 1 run."""
    folder = Path(folder) if folder is not None else committed_results_dir()
    found = [(p.stem, json.loads(p.read_text())) for p in sorted(folder.glob(GPU_RESULT_GLOB))] if folder.exists() else []
    newest_first = sorted(found, key=lambda item: (item[1].get("provenance", {}).get("date", ""), item[0]), reverse=True)
    return sorted(newest_first, key=lambda item: (GPU_RUN_KINDS.index(gpu_run_kind(item[1])),
                                                  gpu_protocol(item[1]) == "subset"))


def best_gpu_result(folder: Path | None = None) -> tuple[str, dict[str, Any]] | None:
    """The chapter-07 result the results page leads with (`gpu_results`' first), or None."""
    found = gpu_results(folder)
    return found[0] if found else None


def gpu_table1_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (drafter, benchmark) of a chapter-07 result: our tau, and the paper's with the
    relative difference in % only for a run of real weights on DeepSpec's prompts (None otherwise),
    with the kind of run, what the comparison is ("Table 1", or "subset (...)" with its sizes: see
    `gpu_protocol_label`), the GPU and the prompt count (chapter 07). Reads files written before and
    after the "subset" key."""
    results = record.get("results", {})
    env = results.get("environment", {})
    kind = gpu_run_kind(record)
    comparable = kind == GPU_RUN_KINDS[0]
    if "subset" in results:
        taus = results["subset"].get("tau", {})
    else:
        taus = results.get("table1") if comparable else results.get("tau_not_table1", results.get("table1", {}))
    compared_as = gpu_protocol_label(record)
    rows = []
    for drafter, by_bench in (taus or {}).items():
        paper = results.get("paper_table1", {}).get(drafter, {}) if comparable else {}
        for bench, tau in by_bench.items():
            ref = paper.get(bench)
            rows.append({"drafter": drafter, "benchmark": bench, "tau (ours)": tau, "tau (paper)": ref,
                         "difference %": None if tau is None or not ref else 100 * (tau / ref - 1),
                         "compared as": compared_as, "kind": kind, "gpu": env.get("gpu", ""), "new tokens": env.get("new_tokens"),
                         "prompts": env.get("prompt_counts", {}).get(bench)})
    return rows


# ========================================================================== Colab (every chapter's first cell)

CONFIG_FILE = REPO / "_config.yml"
COLAB_ROOT = "/content"


def repository_setting(config_file: Path = CONFIG_FILE) -> tuple[str, str]:
    """(url, branch) of `repository:` in _config.yml: the one setting that names the book's
    repository. The launch buttons are derived from it by Jupyter Book, every chapter's Colab cell
    by `colab_cell_source` (chapter 00)."""
    import yaml

    repo = (yaml.safe_load(Path(config_file).read_text()) or {}).get("repository") or {}
    url, branch = str(repo.get("url") or "").rstrip("/"), str(repo.get("branch") or "main")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{config_file}: repository.url must be https://github.com/<owner>/<name>, got {url!r}")
    return url, branch


def colab_launch_url(notebook: str, config_file: Path = CONFIG_FILE) -> str:
    """The Colab launch button's address for `notebook` (e.g. "chapters/07_qwen3_4b_gpu.ipynb"), as
    sphinx-book-theme forms it: <colab_url>/github/<owner>/<name>/blob/<branch>/<path> (chapter 00)."""
    import yaml

    url, branch = repository_setting(config_file)
    colab = ((yaml.safe_load(Path(config_file).read_text()) or {}).get("launch_buttons") or {}).get("colab_url")
    if not colab:
        raise ValueError(f"{config_file}: launch_buttons.colab_url is not set")
    return f"{colab.rstrip('/')}/github/{url.removeprefix('https://github.com/')}/blob/{branch}/{notebook}"


def colab_cell_source(url: str, branch: str) -> str:
    """The first cell of every chapter (chapter 00): on Colab only, clone the repository, install it
    editable, and work inside the clone (so `data/` is there and results land in the clone's
    `data/results/`). Nothing runs outside Colab."""
    folder = f"{COLAB_ROOT}/{url.rsplit('/', 1)[1]}"
    return (
        "# Colab only: clone the book's repository (`repository.url` in _config.yml, which the launch buttons use too),\n"
        "# install it editable and work inside the clone, so data/ is there and results land in its data/results/.\n"
        "import os\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        f'    REPOSITORY, BRANCH, CLONE = "{url}", "{branch}", "{folder}"\n'
        "    if not os.path.isdir(CLONE):\n"
        "        !git clone --quiet --depth 1 --branch {BRANCH} {REPOSITORY} {CLONE}\n"
        "        !pip install --quiet -e {CLONE}\n"
        "    sys.path.insert(0, CLONE)  # the editable install is seen by new kernels only\n"
        '    os.chdir(os.path.join(CLONE, "chapters"))'
    )


def clone_url_of_cell(source: str) -> str:
    """The repository URL a chapter's Colab cell clones (chapter 00's check of the first cells)."""
    found = re.search(r'REPOSITORY, BRANCH, CLONE = "([^"]+)"', source)
    if not found:
        raise ValueError("the cell does not set REPOSITORY, BRANCH, CLONE; expected colab_cell_source's form")
    return found.group(1)
