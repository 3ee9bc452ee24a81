"""Running the book elsewhere (chapters 00 and 07): every chapter's Colab cell clones the repository
the launch buttons name (and says what to do, and stops, when it cannot), and chapter 07's headless
entry point runs without any notebook library."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest

from ci import colab_cells

REPO = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((REPO / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", CHAPTERS, ids=[nb.stem for nb in CHAPTERS])
def test_colab_cell_clones_the_repository_of_the_launch_buttons(notebook: Path) -> None:
    """Issue 19, item 2: the first cell is colab_cell_source of _config.yml's repository setting, so
    the repository it clones is the one in the Colab launch button's address."""
    url, branch = colab_cells.repository_setting()
    nb = nbformat.read(notebook, as_version=4)
    assert colab_cells.is_title(nb.cells[0]), "a chapter's first cell is its title"
    cell = nb.cells[1]
    assert cell.cell_type == "code" and cell.source == colab_cells.colab_cell_source(url, branch), \
        "the cell after the title is not colab_cell_source's: rewrite every chapter's with `python ci/colab_cells.py --write`"
    assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, "the Colab cell is folded"
    launch = colab_cells.colab_launch_url(f"chapters/{notebook.name}")
    owner_name = url.removeprefix("https://github.com/")
    assert launch == f"https://colab.research.google.com/github/{owner_name}/blob/{branch}/chapters/{notebook.name}"
    assert colab_cells.clone_url_of_cell(cell.source) == url
    assert cell.source.count('"google.colab" in sys.modules') == 1
    body = cell.source.split('if "google.colab" in sys.modules:\n', 1)[1]
    assert all(line.startswith("    ") for line in body.splitlines()), "everything but imports runs on Colab only"


def test_repository_setting_rejects_a_placeholder(tmp_path: Path) -> None:
    config = tmp_path / "_config.yml"
    config.write_text("repository:\n  url: <your fork>\n")
    with pytest.raises(ValueError, match="https://github.com/<owner>/<name>"):
        colab_cells.repository_setting(config)
    config.write_text("repository:\n  url: https://github.com/someone/fork/\n  branch: dev\n"
                      "launch_buttons:\n  colab_url: https://colab.research.google.com\n")
    assert colab_cells.repository_setting(config) == ("https://github.com/someone/fork", "dev")
    assert colab_cells.colab_launch_url("chapters/x.ipynb", config).endswith("/github/someone/fork/blob/dev/chapters/x.ipynb")
    source = colab_cells.colab_cell_source(*colab_cells.repository_setting(config))
    assert '= "https://github.com/someone/fork", "dev", "/content/fork"' in source


def colab_cell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, colab: bool = True) -> list[list[str]]:
    """Run a Colab cell for `url` (cloned into tmp_path/content) as Colab would, with google.colab
    faked and dspark_lite not installed yet: git runs for real, pip is recorded, not run. Returns
    the commands the cell ran."""
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSPARK_CACHE_URL", raising=False)
    ran, real_run, real_find = [], subprocess.run, importlib.util.find_spec

    def run(command: list[str], *args: object, **kwargs: object) -> subprocess.CompletedProcess:
        ran.append(list(command))
        if command[1:4] == ["-m", "pip", "install"]:
            return subprocess.CompletedProcess(command, 0)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "dspark_lite" else real_find(name, *a, **k))
    source = colab_cells.colab_cell_source(url, "main", root=str(tmp_path / "content"), cache_url="http://127.0.0.1:9/cache")
    exec(compile(source, "colab-cell", "exec"), {"__name__": "__main__"})
    return ran


def test_the_colab_cell_stops_with_the_ways_forward_when_the_clone_fails(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53: the repository is not reachable (here a file:// address with nothing there): the
    cell raises, naming the repository, git's reason and the two ways forward, and stops there
    (no install, no change of folder)."""
    missing = (tmp_path / "missing.git").as_uri()
    with pytest.raises(RuntimeError) as raised:
        colab_cell(monkeypatch, tmp_path, missing)
    message = str(raised.value)
    assert f"The book's repository {missing} (branch main) cannot be cloned here" in message
    assert "does not exist" in message or "not found" in message or "fatal" in message  # git's own reason
    assert f"1. Put a copy of the book at {tmp_path / 'content' / 'missing'}" in message
    assert "2. pip install dspark_lite from a copy you have" in message
    assert Path.cwd() == tmp_path and not (tmp_path / "content" / "missing").exists()
    assert "DSPARK_CACHE_URL" not in os.environ


def test_the_colab_cell_clones_installs_and_opts_in_to_the_published_cache(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture) -> None:
    """A reachable repository (a bare repository made here, served as file://): the cell clones
    it, installs it editable, works in its chapters/ and sets $DSPARK_CACHE_URL, saying so."""
    work = tmp_path / "work"
    (work / "chapters").mkdir(parents=True)
    (work / "chapters" / "00_preface.ipynb").write_text("{}")
    for command in (["init", "-q", "-b", "main"], ["add", "."],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the book"]):
        subprocess.run(["git", *command], cwd=work, check=True, capture_output=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "book.git")], check=True, capture_output=True)
    ran = colab_cell(monkeypatch, tmp_path, (tmp_path / "book.git").as_uri())
    clone = tmp_path / "content" / "book"
    assert ran[0][:2] == ["git", "clone"] and ran[1] == [sys.executable, "-m", "pip", "install", "--quiet", "-e", str(clone)]
    assert (clone / "chapters" / "00_preface.ipynb").exists() and Path.cwd() == clone / "chapters"
    assert sys.path[0] == str(clone) and os.environ["DSPARK_CACHE_URL"] == "http://127.0.0.1:9/cache"
    assert "Trained models: fetched from http://127.0.0.1:9/cache when published there" in capsys.readouterr().out
    monkeypatch.setenv("DSPARK_CACHE_URL", "")  # run again: no second clone, and an empty address is kept
    monkeypatch.chdir(tmp_path)
    source = colab_cells.colab_cell_source((tmp_path / "book.git").as_uri(), "main", root=str(tmp_path / "content"),
                                       cache_url="http://127.0.0.1:9/cache")
    exec(compile(source, "colab-cell", "exec"), {"__name__": "__main__"})
    assert [c[:2] for c in ran[2:]] == [[sys.executable, "-m"]] and os.environ["DSPARK_CACHE_URL"] == ""
    assert "all trained here" in capsys.readouterr().out


def test_outside_colab_the_cell_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert colab_cell(monkeypatch, tmp_path, (tmp_path / "missing.git").as_uri(), colab=False) == []
    assert Path.cwd() == tmp_path and "DSPARK_CACHE_URL" not in os.environ


def test_the_published_cache_address_is_the_repository_pages_site() -> None:
    assert colab_cells.published_cache_url("https://github.com/DSpark-Book/dspark-book/") == \
        "https://dspark-book.github.io/dspark-book/cache"
    with pytest.raises(ValueError, match="github.com/<owner>/<name>"):
        colab_cells.published_cache_url("https://gitlab.com/a/b")
    source = colab_cells.colab_cell_source("https://github.com/someone/fork", "dev")
    assert '"DSPARK_CACHE_URL", "https://someone.github.io/fork/cache"' in source
    assert len(source.splitlines()) <= 30  # no code cell of the book runs past 30 lines


def test_colab_cells_moves_the_colab_cell_after_the_title_and_rewrites_only_it(tmp_path: Path) -> None:
    from ci import colab_cells

    source = colab_cells.colab_cell_source(*colab_cells.repository_setting())
    old = {"cells": [{"cell_type": "code", "id": "ab12cd34", "metadata": {"tags": ["remove-cell"]}, "outputs": [],
                      "execution_count": None, "source": ['import sys\n', 'if "google.colab" in sys.modules:\n', '    pass']},
                     {"cell_type": "markdown", "id": "ef56ab78", "metadata": {}, "source": ["# Title"]},
                     {"cell_type": "markdown", "id": "0a0b0c0d", "metadata": {}, "source": ["text"]}],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "01_x.ipynb").write_text(json.dumps(old, indent=1) + "\n")
    assert colab_cells.main(["--chapters", str(tmp_path)]) == 1
    assert colab_cells.main(["--chapters", str(tmp_path), "--write"]) == 0
    new = json.loads((tmp_path / "01_x.ipynb").read_text())
    assert new["cells"][0] == old["cells"][1] and new["cells"][2] == old["cells"][2]  # the title first, the rest as it was
    colab = new["cells"][1]
    assert "".join(colab["source"]) == source and colab["id"] == "ab12cd34"
    assert colab["metadata"] == {"tags": ["remove-cell"], "jupyter": {"source_hidden": True}}  # folded
    assert colab_cells.main(["--chapters", str(tmp_path)]) == 0
    new["cells"][1]["source"] = ["print('not a Colab cell')"]
    (tmp_path / "01_x.ipynb").write_text(json.dumps(new))
    with pytest.raises(SystemExit, match="not a Colab cell"):
        colab_cells.main(["--chapters", str(tmp_path)])
    new["cells"] = new["cells"][1:]  # no title first
    (tmp_path / "01_x.ipynb").write_text(json.dumps(new))
    with pytest.raises(SystemExit, match="title"):
        colab_cells.main(["--chapters", str(tmp_path)])


# Modules a GPU machine without Jupyter lacks: importing any of them on the headless path fails.
NOTEBOOK_ONLY = ("matplotlib", "seaborn", "ipywidgets", "IPython", "papermill", "nbformat", "altair")
BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is blocked: the headless path must not import it")
sys.meta_path.insert(0, Block())
import runpy
sys.argv = ["python -m dspark_lite.harness.gpu"] + {argv!r}
runpy.run_module("dspark_lite.harness.gpu", run_name="__main__", alter_sys=True)
"""


def _headless(argv: list[str], tmp_path: Path, timeout: int,
              blocked: tuple[str, ...] = NOTEBOOK_ONLY) -> subprocess.CompletedProcess:
    env = {**os.environ, "DSPARK_RESULTS": str(tmp_path / "results"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    code = BLOCKER.format(blocked=blocked, argv=argv)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=tmp_path)


def test_headless_help_without_notebook_modules(tmp_path: Path) -> None:
    done = _headless(["--help"], tmp_path, 120)
    assert done.returncode == 0, done.stderr[-3000:]
    for flag in ("--mode", "random-weights", "--out", "--new-tokens", "--eval-folder", "--allow-fixture", "torchrun"):
        assert flag in done.stdout, flag


def test_headless_path_does_not_import_datasets(tmp_path: Path) -> None:
    done = _headless(["--help"], tmp_path, 120, NOTEBOOK_ONLY + ("datasets",))
    assert done.returncode == 0, done.stderr[-3000:]


def test_headless_smoke_run_writes_the_whole_measurement(tmp_path: Path) -> None:
    """`python -m dspark_lite.harness.gpu --mode smoke` with the notebook modules blocked: one results file
    with tau, Figure 2, STS, engine overheads per round, the race, SPS(B), peak memory; no simulator
    throughputs, which random weights' acceptance would make meaningless (issue 54)."""
    out = tmp_path / "smoke.json"
    done = _headless(["--mode", "smoke", "--out", str(out), "--prompts", "1", "--new-tokens", "24"], tmp_path, 600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    record = json.loads(out.read_text())
    found = record["results"]
    env = found["environment"]
    assert env["mode"] == "smoke" and env["prompt_source"] == "fixture" and env["comparable_to_paper"] is False
    assert env["new_tokens"] == 24 and "table1" not in found and "paper_table1" not in found
    assert set(found["tau_not_table1"]) == {"eagle3", "dflash", "dspark"} and len(found["tau_not_table1"]["dspark"]) == 9
    for key in ("conditional_acceptance", "ece_sts", "engine_overheads", "wall_clock_tokens_per_s", "step_curves",
                "peak_memory_gib", "headless"):
        assert key in found, key
    assert "simulator_throughput" not in found and "sla_gain_over_mtp1" not in found
    assert found["engine_overheads"]["dspark"]["verify ms/round"] > 0
    assert found["engine_overheads"]["eagle3"]["verify ms/round"] > 0  # issue 31, item 6: the Eagle3 row measured
    assert found["peak_memory_gib"] is None  # a CPU run


def test_torchrun_shards_pool_to_the_single_process_run(tmp_path: Path) -> None:
    """`torchrun --nproc_per_node 2 -m dspark_lite.harness.gpu` (gloo on the CPU): each rank measures its
    shard and writes its part, rank 0 merges; every prompt is seeded with seed + its index, so the
    pooled tau and acceptance curves equal a single process's exactly."""
    env = {**os.environ, "DSPARK_RESULTS": str(tmp_path / "results"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    args = ["-m", "dspark_lite.harness.gpu", "--mode", "smoke", "--prompts", "2", "--new-tokens", "24", "--no-race", "--no-profile"]
    torchrun = Path(sys.executable).with_name("torchrun")
    runs = {"two": [str(torchrun), "--nproc_per_node", "2", *args, "--out", str(tmp_path / "two.json")],
            "one": [sys.executable, *args, "--out", str(tmp_path / "one.json")]}
    for name, command in runs.items():
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
        assert done.returncode == 0, (name, done.stdout[-2000:] + done.stderr[-4000:])
    one, two = (json.loads((tmp_path / f"{n}.json").read_text())["results"] for n in ("one", "two"))
    assert sorted(p.name for p in (tmp_path / "two_parts").iterdir()) == ["rank0.json", "rank1.json"]
    assert two["headless"]["world_size"] == 2 and one["headless"]["world_size"] == 1
    assert two["tau_not_table1"] == one["tau_not_table1"]
    assert two["conditional_acceptance"] == one["conditional_acceptance"]
    assert two["environment"]["prompt_counts"] == one["environment"]["prompt_counts"] == dict.fromkeys(
        two["tau_not_table1"]["dspark"], 2)


def test_every_chapter_builds_its_world_on_its_device() -> None:
    """Issue 31, item 1: a chapter hands DEVICE to `load_toy_world` (the target trains there) and draws
    its samples from a generator on that device, instead of moving the models after training. The
    chapters set up through `notebook.start` (in a cell, or through a page module's `setup` while one is
    left), so the calls are read in the notebooks and in the book room's modules alike."""
    import re

    book = Path(__file__).resolve().parents[1] / "dspark_lite" / "harness" / "book"
    pages = sorted(book.glob("pages/*.py")) + [book / "notebook.py"]
    sources = {p.name: p.read_text() for p in pages}
    for notebook in CHAPTERS:
        sources[notebook.name] = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells
                                           if c.cell_type == "code")
    calls = 0
    for name, source in sources.items():
        for call in re.findall(r"load_toy_world\([^)]*\)", source):
            calls += 1
            assert "device=device" in call, f"{name}: {call}"
        if name.startswith("07"):
            continue  # chapter 07 draws through gpu.py, whose generators are on the world's device
        for call in re.findall(r"seed_everything\([^)]*\)", source):
            assert call in ("seed_everything(SEED, device)", "seed_everything(seed, device)"), f"{name}: {call}"
    assert calls >= 1
    setups = {p.stem for p in pages if re.search(r"^def setup\((?:(?!^def ).)*?\bstart\(profile_name, device_name, seed",
                                                 sources[p.name], re.S | re.M)}
    for notebook in CHAPTERS:
        number = notebook.stem.split("_")[0]
        if "01" <= number <= "06b":
            source = sources[notebook.name]
            assert re.search(r"\bstart\(PROFILE, DEVICE, SEED", source) or (
                f"ch{number}" in setups and f"ch{number}.setup(PROFILE, DEVICE, SEED)" in source), notebook.name


def test_a_cpu_generator_draws_what_the_book_was_built_with() -> None:
    """Issue 31, item 2: generators now live on the model's device; on the CPU they draw exactly the
    stream of the plain torch.Generator the book used before, so CPU results do not change."""
    import torch

    from dspark_lite.runtime import device_generator, seed_everything

    probs = torch.softmax(torch.randn(64, 50, generator=torch.Generator().manual_seed(1)), -1)
    for make in (lambda: device_generator(7, "cpu"), lambda: seed_everything(7, torch.device("cpu"))):
        assert torch.equal(torch.multinomial(probs, 3, generator=make()),
                           torch.multinomial(probs, 3, generator=torch.Generator().manual_seed(7)))
