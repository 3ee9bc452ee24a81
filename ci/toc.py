"""Read the book's `_toc.yml`: the notebooks in reading order."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def _files(entry: Any) -> list[str]:
    """Every `file:` below one toc entry (root, parts, chapters, sections), in order."""
    out: list[str] = []
    if isinstance(entry, dict):
        if "file" in entry:
            out.append(str(entry["file"]))
        for key in ("parts", "chapters", "sections"):
            for child in entry.get(key) or []:
                out.extend(_files(child))
    return out


def toc_files(root: Path = REPO) -> list[str]:
    """Toc entries in reading order as written (e.g. ``chapters/01_toy_world``), root first."""
    toc_path = root / "_toc.yml"
    toc = yaml.safe_load(toc_path.read_text())
    if not isinstance(toc, dict) or "root" not in toc:
        raise ValueError(f"{toc_path}: expected a jb-book toc with a `root:` entry")
    return [str(toc["root"])] + _files({k: v for k, v in toc.items() if k != "root"})


def _is_page(root: Path, entry: str) -> bool:
    """A toc entry is a Markdown page (no code, nothing to execute) when its `.md` file exists."""
    return entry.endswith(".md") or (root / f"{entry}.md").is_file()


def toc_notebooks(root: Path = REPO) -> list[Path]:
    """The toc's notebooks in reading order, as paths relative to `root` with `.ipynb` added."""
    out = []
    for f in toc_files(root):
        if _is_page(root, f):
            continue
        p = Path(f)
        out.append(p if p.suffix == ".ipynb" else p.with_name(p.name + ".ipynb"))
    return out


def toc_markdown(root: Path = REPO) -> list[Path]:
    """The toc's Markdown pages (appendices such as the glossary), as paths with `.md` added."""
    return [Path(f) if f.endswith(".md") else Path(f"{f}.md") for f in toc_files(root) if _is_page(root, f)]


def cells(notebook: Path, cell_type: str) -> Iterator[tuple[int, dict, str]]:
    """(index, cell, source text) of every cell of `cell_type` in a notebook, read as raw JSON."""
    for i, cell in enumerate(json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]):
        if cell.get("cell_type") == cell_type:
            source = cell.get("source", "")
            yield i, cell, source if isinstance(source, str) else "".join(source)


MAIN_PART = "The main path"  # the toc part a reader finishes in an afternoon (the page budget's part)


def toc_parts(root: Path = REPO) -> dict[str, list[str]]:
    """{part caption: its entries in order}; the root page belongs to the main path."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    parts = {MAIN_PART: [str(toc["root"])]}
    for part in toc.get("parts") or []:
        parts.setdefault(str(part.get("caption", "")), []).extend(_files({"chapters": part.get("chapters")}))
    return parts
