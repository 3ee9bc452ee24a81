"""Every chapter's second cell, right after its title, is the Colab cell, `colab_cell_source(*repository_setting())`
(tests/test_running_elsewhere.py checks it), folded in JupyterLab and absent from the rendered book. This
script lists the chapters whose Colab cell differs (exit status 1), or with --write rewrites it in place: a
Colab cell that still comes first moves after the title, and only its source and folding change (its id,
and every other cell, stay as they are; the file keeps the notebooks' JSON layout).

    python ci/colab_cells.py            # check
    python ci/colab_cells.py --write    # rewrite the Colab cells from _config.yml's repository setting
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dspark_lite.harness.result_files import REPO  # noqa: E402

# ========================================================================== the cell

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


MARKER = '"google.colab" in sys.modules'


FOLDED = {"jupyter": {"source_hidden": True}, "tags": ["remove-cell"]}  # folded in JupyterLab, absent from the book


def is_title(cell: dict) -> bool:
    """A markdown cell that opens with the notebook's title (`# ...`)."""
    return cell.get("cell_type") == "markdown" and "".join(cell["source"]).lstrip().startswith("# ")


def colab_cell_of(nb: dict) -> dict:
    """The notebook's Colab cell: its second cell, after the title (ValueError otherwise)."""
    cells = nb.get("cells") or []
    if len(cells) < 2 or not is_title(cells[0]):
        raise ValueError("the first cell is not the notebook's title (a markdown cell opening with '# ')")
    cell = cells[1]
    if cell["cell_type"] != "code" or MARKER not in "".join(cell["source"]):
        raise ValueError(f"the cell after the title is not a Colab cell (a code cell guarded by {MARKER})")
    return cell


def first_cell_fixes(chapters: Path, source: str) -> dict[Path, dict]:
    """{notebook: its JSON with the Colab cell set to `source`, folded, right after the title} for each
    notebook where it differs. A notebook whose Colab cell still comes first (the old layout) gets it
    moved after its title. A notebook with no Colab cell in either place is an error: this script
    never overwrites another cell."""
    fixes = {}
    for path in sorted(chapters.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells, changed = nb.get("cells") or [], False
        if len(cells) >= 2 and cells[0]["cell_type"] == "code" and is_title(cells[1]):
            cells[0], cells[1] = cells[1], cells[0]
            changed = True
        try:
            cell = colab_cell_of(nb)
        except ValueError as error:
            raise SystemExit(f"{path}: {error}") from None
        if "".join(cell["source"]) != source:
            cell["source"] = source.splitlines(keepends=True)
            changed = True
        if any(cell["metadata"].get(key) != value for key, value in FOLDED.items()):
            cell["metadata"].update(FOLDED)
            changed = True
        if changed:
            fixes[path] = nb
    return fixes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the first cells that differ")
    parser.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    args = parser.parse_args(argv)
    fixes = first_cell_fixes(args.chapters, colab_cell_source(*repository_setting()))
    for path, nb in fixes.items():
        if args.write:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{'rewrote' if args.write else 'differs:'} {path.relative_to(args.chapters.parent)}")
    if not fixes:
        print("every chapter's Colab cell follows its title")
    return 1 if fixes and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
