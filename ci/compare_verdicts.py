"""The verdicts of two builds side by side: every chapter's box "What this run shows", read from
two folders of executed notebooks (`make book` writes them to _build/executed).

    python ci/compare_verdicts.py BUILD_A/_build/executed BUILD_B/_build/executed

Prints, per chapter and claim, both builds' verdicts, and for each claim whose verdict differs
what each build measured (the box's "this run" column), so a difference can be read against its
interval. Exits 0 either way; it reports, it does not judge.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from pathlib import Path

ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")


def boxes(executed: Path) -> dict[str, list[tuple[str, str, str]]]:
    """{chapter: [(claim, this run, verdict)]} from each notebook's "What this run shows" table."""
    found = {}
    for path in sorted(executed.rglob("*.ipynb")):  # _build/executed or its chapters/ folder
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                page = "".join(out.get("data", {}).get("text/html", ""))
                if "What this run shows" not in page:
                    continue
                rows = []
                for row in ROW.findall(page):
                    cells = [html.unescape(TAG.sub("", c)).strip() for c in CELL.findall(row)]
                    if len(cells) == 4:
                        claim, _, measured, verdict = cells
                        rows.append((claim, measured, verdict))
                found[path.stem] = rows
    return found


def two_builds(argv: list[str] | None, doc: str, what: str) -> tuple[Path, Path]:
    """The two folders of a build-against-build comparison from the command line; each must exist
    (`what` says what it holds)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help=f"{what} of the first build")
    parser.add_argument("b", type=Path, help=f"{what} of the second build")
    args = parser.parse_args(argv)
    for folder in (args.a, args.b):
        if not folder.is_dir():
            parser.error(f"{folder} is not a folder of {what}")
    return args.a, args.b


def main(argv: list[str] | None = None) -> int:
    first, second = two_builds(argv, __doc__, "executed notebooks")
    a, b = boxes(first), boxes(second)
    same = differ = 0
    for chapter in sorted(set(a) | set(b)):
        print(f"## {chapter}")
        rows_b = {claim: (measured, verdict) for claim, measured, verdict in b.get(chapter, [])}
        for claim, measured, verdict in a.get(chapter, []):
            other = rows_b.pop(claim, None)
            if other is None:
                print(f"- {claim}: {verdict} | (not in the second build)")
                continue
            if other[1] == verdict:
                same += 1
                print(f"- {claim}: {verdict} in both")
            else:
                differ += 1
                print(f"- {claim}: {verdict} | {other[1]}\n    first:  {measured}\n    second: {other[0]}")
        for claim, (measured, verdict) in rows_b.items():
            print(f"- {claim}: (not in the first build) | {verdict}")
    print(f"\n{same} verdicts the same, {differ} different")
    return 0


if __name__ == "__main__":
    sys.exit(main())
