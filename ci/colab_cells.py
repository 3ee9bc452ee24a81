"""Every chapter's first cell is the Colab cell, `results.colab_cell_source(*results.repository_setting())`
(tests/test_running_elsewhere.py checks it). This script lists the chapters whose first cell differs
(exit status 1), or with --write rewrites those cells in place: only the first cell's source changes
(its id, tags and every other cell stay as they are; the file keeps the notebooks' JSON layout).

    python ci/colab_cells.py            # check
    python ci/colab_cells.py --write    # rewrite the first cells from _config.yml's repository setting
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dspark_lite.harness.book import results  # noqa: E402

MARKER = '"google.colab" in sys.modules'


def first_cell_fixes(chapters: Path, source: str) -> dict[Path, dict]:
    """{notebook: its JSON with the first cell's source set to `source`} for each notebook whose first
    cell differs. A notebook whose first cell is not a Colab cell (a code cell guarded by MARKER)
    is an error: this script never overwrites another cell."""
    fixes = {}
    for path in sorted(chapters.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        cell = nb["cells"][0] if nb.get("cells") else None
        if cell is None or cell["cell_type"] != "code" or MARKER not in "".join(cell["source"]):
            raise SystemExit(f"{path}: the first cell is not a Colab cell (a code cell guarded by {MARKER})")
        if "".join(cell["source"]) != source:
            cell["source"] = source.splitlines(keepends=True)
            fixes[path] = nb
    return fixes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the first cells that differ")
    parser.add_argument("--chapters", type=Path, default=ROOT / "chapters")
    args = parser.parse_args(argv)
    fixes = first_cell_fixes(args.chapters, results.colab_cell_source(*results.repository_setting()))
    for path, nb in fixes.items():
        if args.write:
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{'rewrote' if args.write else 'differs:'} {path.relative_to(args.chapters.parent)}")
    if not fixes:
        print("every chapter's first cell is the Colab cell")
    return 1 if fixes and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
