"""The book's results on the page (chapter 00 and every chapter after it): what a run measured, said
as the cell's Markdown output (`say`), values as words (`plain`), titled tables, the verdict box,
the results page's headline rows and GPU rows (chapter 07's runs), and the Colab launch cell. The files themselves are `result_files`'.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..result_files import HEADLINES, REPO, committed_results_dir, lookup
from .verdicts import word_list


def plain(value: Any, digits: int = 3) -> str:
    """A value as words for a printed sentence, not a Python repr: a mapping as
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


def say(*paragraphs: str) -> None:
    """What this run measured, said in words as the cell's Markdown output (CommonMark plus LaTeX),
    so the sentence sits beside its evidence in JupyterLab, Colab and the rendered book alike.
    Each argument is one paragraph; empty ones are left out."""
    from IPython.display import Markdown, display

    text = "\n\n".join(p.strip() for p in paragraphs if p and p.strip())
    if not text:
        raise ValueError("say() needs at least one non-empty paragraph")
    display(Markdown(text))


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
    """A table as the book shows it, with its title, in the book's table style: the
    Styler of `df` with `title` as its caption, floats shown with `digits` decimals (as
    `df.round(digits)` showed them; integers and text unchanged), or as Python prints them when
    `digits` is None; a missing value as "NaN". Index and column labels stay as the DataFrame
    showed them; `df` is not modified."""
    styler = df.style.set_caption(title).set_table_attributes('class="dataframe"')  # the page's table style
    styler = styler.format_index(_float_text, axis=0).format_index(_float_text, axis=1)
    if digits is None:
        return styler.format(_float_text, na_rep="NaN")
    return styler.format(precision=digits, na_rep="NaN")


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
    """Which of GPU_RUN_KINDS a GPU result is, from its environment. A file
    without `comparable_to_paper` (written before it existed) counts as comparable when real."""
    env = record.get("results", {}).get("environment", {})
    mode = env.get("mode")
    if mode == "real":
        comparable = env.get("comparable_to_paper", env.get("prompt_source", "deepspec") != "fixture")
        return GPU_RUN_KINDS[0] if comparable else GPU_RUN_KINDS[1]
    return GPU_RUN_KINDS[2] if mode == "random-weights" else GPU_RUN_KINDS[3]


def gpu_protocol(record: dict[str, Any]) -> str | None:
    """Under which protocol a GPU result's tau stands beside the paper's:
    "table1" only for a run of DeepSpec's full protocol (its prompt counts per benchmark, 2048 new
    tokens, T = 1, gamma 7, real weights, DeepSpec's files), "subset" for real weights on DeepSpec's
    prompts at other sizes, None for any other run. Files written before the "subset" key existed
    kept every comparable run under "table1": their environment decides."""
    from ..gpu.evalsets import DEEPSPEC_COUNTS

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
    a benchmark, 256 new tokens)", or "not compared"."""
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
    """Every GPU result in `folder` (default data/results/) as (file stem, record), best
    first: real runs on DeepSpec's prompts (those of the full protocol before subsets), then real
    runs on the fixture, then random weights; the newest first within a kind. A later
    random-weights run never hides a real one, nor a later subset a full Table 1 run."""
    folder = Path(folder) if folder is not None else committed_results_dir()
    found = [(p.stem, json.loads(p.read_text())) for p in sorted(folder.glob(GPU_RESULT_GLOB))] if folder.exists() else []
    newest_first = sorted(found, key=lambda item: (item[1].get("provenance", {}).get("date", ""), item[0]), reverse=True)
    return sorted(newest_first, key=lambda item: (GPU_RUN_KINDS.index(gpu_run_kind(item[1])),
                                                  gpu_protocol(item[1]) == "subset"))


def best_gpu_result(folder: Path | None = None) -> tuple[str, dict[str, Any]] | None:
    """The GPU result the results page leads with (`gpu_results`' first), or None."""
    found = gpu_results(folder)
    return found[0] if found else None


def gpu_status(folder: Path | None = None, has_gpu: bool = False) -> str:
    """A sentence on what the book has measured on Qwen3-4B: the committed GPU run it sets
    beside Table 1 (`best_gpu_result` of `folder`, default data/results/), or that there is none
    yet, why, and what this build's GPU page ran (`has_gpu`: whether this build had a GPU)."""
    folder = Path(folder) if folder is not None else committed_results_dir()
    best = best_gpu_result(folder)
    kind = None if best is None else gpu_run_kind(best[1])
    if kind == GPU_RUN_KINDS[0]:
        env = best[1].get("results", {}).get("environment", {})
        date = best[1].get("provenance", {}).get("date", "an unrecorded date")
        return (f"Chapter 07 sets a committed GPU run of Qwen3-4B with the released checkpoints on DeepSpec's "
                f"evaluation prompts (`data/results/{best[0]}.json`, {env.get('gpu') or 'GPU not recorded'}, {date}) "
                f"beside the paper's Table 1, compared as: {gpu_protocol_label(best[1])}. Every other number in the "
                "book is measured on the toy world, on the build machine's CPU (or GPU, where it had one).")
    if not folder.exists():
        held = "the folder `data/results/` does not exist yet"
    elif best is None:
        held = "`data/results/` holds no such run"
    else:
        held = f"`data/results/` holds only runs of another kind, the best being {kind}"
    this_build = ("This build had a GPU: chapter 07 as rendered here measured this machine's run, which is not "
                  "committed to `data/results/`." if has_gpu else
                  "This build ran without a GPU, so chapter 07 as rendered here runs the same code path with tiny "
                  "random models, whose numbers mean nothing.")
    return ("**No number in this book has been measured on Qwen3-4B yet.** No GPU run of chapter 07 with "
            f"Qwen3-4B and the released checkpoints has been committed ({held}). Qwen3-4B's numbers "
            "(Table 1's accepted lengths, Figure 2, the confidence head's calibration, the wall-clock "
            "speed-up) will appear in chapter 07 when such a run is committed. Everything else in the book "
            f"is measured on the toy world, on a CPU. {this_build}")


def gpu_table1_rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (drafter, benchmark) of a GPU result: our tau, and the paper's with the
    relative difference in % only for a run of real weights on DeepSpec's prompts (None otherwise),
    with the kind of run, what the comparison is ("Table 1", or "subset (...)" with its sizes: see
    `gpu_protocol_label`), the GPU and the prompt count. Reads files written before and
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
    by `colab_cell_source`."""
    import yaml

    repo = (yaml.safe_load(Path(config_file).read_text()) or {}).get("repository") or {}
    url, branch = str(repo.get("url") or "").rstrip("/"), str(repo.get("branch") or "main")
    if not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{config_file}: repository.url must be https://github.com/<owner>/<name>, got {url!r}")
    return url, branch


def colab_launch_url(notebook: str, config_file: Path = CONFIG_FILE) -> str:
    """The Colab launch button's address for `notebook` (e.g. "chapters/07_qwen3_4b_gpu.ipynb"), as
    sphinx-book-theme forms it: <colab_url>/github/<owner>/<name>/blob/<branch>/<path>."""
    import yaml

    url, branch = repository_setting(config_file)
    colab = ((yaml.safe_load(Path(config_file).read_text()) or {}).get("launch_buttons") or {}).get("colab_url")
    if not colab:
        raise ValueError(f"{config_file}: launch_buttons.colab_url is not set")
    return f"{colab.rstrip('/')}/github/{url.removeprefix('https://github.com/')}/blob/{branch}/{notebook}"


def published_cache_url(url: str) -> str:
    """Where the book workflow publishes the trained-artifact cache of the repository `url`
    (https://github.com/<owner>/<name>): its GitHub Pages site's ``cache/`` folder,
    https://<owner>.github.io/<name>/cache, beside the HTML."""
    found = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+)", url.rstrip("/"))
    if not found:
        raise ValueError(f"expected a repository address https://github.com/<owner>/<name>, got {url!r}")
    return f"https://{found.group(1).lower()}.github.io/{found.group(2)}/cache"


def colab_cell_source(url: str, branch: str, root: str = COLAB_ROOT, cache_url: str | None = None) -> str:
    """The first cell of every chapter: on Colab only, clone the repository `url` (branch `branch`)
    into `root`, install it editable, and work inside the clone (so `data/` is there and results land
    in the clone's `data/results/`); when the clone fails, stop with an error that says so and the
    two ways forward. It then opts in to the published trained-artifact cache (`cache_url`, by
    default `published_cache_url(url)`) unless $DSPARK_CACHE_URL is already set (empty: train
    everything here). Plain Python (no `!` magics), so a test runs it. Nothing runs outside Colab."""
    folder = f"{root.rstrip('/')}/{url.rstrip('/').rsplit('/', 1)[1].removesuffix('.git')}"
    cache_url = published_cache_url(url) if cache_url is None else cache_url
    return (
        "# Colab only: clone the book's repository (`repository.url` in _config.yml, which the launch buttons use too),\n"
        "# install it editable and work inside the clone, so data/ is there and results land in its data/results/.\n"
        "import os\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import importlib.util, subprocess\n"
        f'    REPOSITORY, BRANCH, CLONE = "{url}", "{branch}", "{folder}"\n'
        "    if not os.path.isdir(CLONE):\n"
        '        git = subprocess.run(["git", "clone", "--quiet", "--depth", "1", "--branch", BRANCH, REPOSITORY, CLONE],\n'
        '                             capture_output=True, text=True, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})\n'
        "        if git.returncode != 0:\n"
        "            raise RuntimeError(\n"
        '                f"The book\'s repository {REPOSITORY} (branch {BRANCH}) cannot be cloned here; git said: "\n'
        '                f"{git.stderr.strip() or git.returncode}\\nTwo ways forward:\\n"\n'
        '                f"1. Put a copy of the book at {CLONE} (clone it from where you can reach it, or upload and "\n'
        '                "unzip it), or set CLONE above to where it is, then run this cell again.\\n"\n'
        '                "2. pip install dspark_lite from a copy you have (pip install <folder or wheel>), then skip "\n'
        '                "this cell and run the ones below it.")\n'
        '    if importlib.util.find_spec("dspark_lite") is None:\n'
        '        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "-e", CLONE], check=True)\n'
        "    sys.path.insert(0, CLONE)  # the editable install is seen by new kernels only\n"
        '    os.chdir(os.path.join(CLONE, "chapters"))\n'
        "    # Trained models: fetched from the book's published cache when it has them for this code (each file\n"
        "    # checked by sha256), trained here otherwise. Set DSPARK_CACHE_URL to \"\" before this cell to train all here.\n"
        f'    CACHE_URL = os.environ.setdefault("DSPARK_CACHE_URL", "{cache_url}")\n'
        '    print(f"Trained models: fetched from {CACHE_URL} when published there, else trained here." if CACHE_URL\n'
        '          else "Trained models: all trained here (DSPARK_CACHE_URL is empty).")'
    )


def clone_url_of_cell(source: str) -> str:
    """The repository URL a chapter's Colab cell clones (to check the notebooks' first cells)."""
    found = re.search(r'REPOSITORY, BRANCH, CLONE = "([^"]+)"', source)
    if not found:
        raise ValueError("the cell does not set REPOSITORY, BRANCH, CLONE; expected colab_cell_source's form")
    return found.group(1)
