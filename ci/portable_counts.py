"""How portable each chapter is, counted on its committed source (and, given one, a rendered book's
page shapes): what a reader opening the notebook in JupyterLab or Colab would trip over.

    python ci/portable_counts.py                       # this checkout
    python ci/portable_counts.py --rev ca3bb4f         # a commit's chapters (git show), for before/after
    python ci/portable_counts.py --shapes _build/screenshots/page_shape.json   # add the prose share

Per chapter of the toc: MyST roles in markdown cells (`{glue:md}`, `{term}`, `{paper}`, ...),
`results.glue(` calls in code cells, the longest code cell in lines (a notebook viewer shows every
code cell, whatever its tags; and the longest after the Colab cell, which every chapter shares), the
code cells over 30 lines, and the rendered page's prose share
(ci/browser_check.py's measure, when a page-shape file is given).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `ci` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ci.toc import REPO, toc_notebooks

ROLE = re.compile(r"\{[a-z][a-z-]*(?::[a-z-]+)?\}`")
GLUE_CALL = re.compile(r"\bglue\(")
LONG = 30


def counts(notebook: dict) -> dict[str, int]:
    """The counts of one notebook (its JSON)."""
    def text(cell: dict) -> str:
        source = cell.get("source", "")
        return source if isinstance(source, str) else "".join(source)

    markdown = [text(c) for c in notebook["cells"] if c["cell_type"] == "markdown"]
    code = [text(c) for c in notebook["cells"] if c["cell_type"] == "code"]
    lines = [len(c.splitlines()) for c in code]
    colab = 1 if code and "google.colab" in code[0] else 0  # the first cell: the Colab set-up, the same in every chapter
    return {"roles": sum(len(ROLE.findall(m)) for m in markdown),
            "glue_calls": sum(len(GLUE_CALL.findall(c)) for c in code),
            "longest_code_cell": max(lines, default=0),
            "longest_after_colab_cell": max(lines[colab:], default=0),
            f"code_cells_over_{LONG}": sum(n > LONG for n in lines)}


def read(rel: Path, rev: str | None) -> dict:
    if rev is None:
        return json.loads((REPO / rel).read_text())
    shown = subprocess.run(["git", "show", f"{rev}:{rel.as_posix()}"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"ci/portable_counts.py: {rel} is not in {rev}: {shown.stderr.strip()}")
    return json.loads(shown.stdout)


def table(rev: str | None = None, shapes: Path | None = None) -> list[dict]:
    """One row per toc chapter."""
    prose = {}
    if shapes is not None:
        for page, shape in json.loads(Path(shapes).read_text()).items():
            share = (shape.get("reading") or {}).get("prose_share")
            if share is not None:
                prose[Path(page).stem] = share
    rows = []
    for rel in toc_notebooks(REPO):
        row = {"chapter": rel.stem, **counts(read(rel, rev))}
        if shapes is not None:
            row["prose_share"] = prose.get(rel.stem)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", help="count a commit's chapters instead of the checkout's")
    ap.add_argument("--shapes", type=Path, help="page_shape.json of ci/browser_check.py, for the prose share")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    rows = table(args.rev, args.shapes)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join("" if row[k] is None else (f"{row[k]:.0%}" if k == "prose_share" else str(row[k]))
                                for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
