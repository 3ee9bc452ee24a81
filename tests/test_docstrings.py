"""The package reads in the order its docstring gives, and chapter references sit only in module
docstrings, each naming a chapter that exists and that mentions the module (checked with `ast`)."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspark_lite"
CHAPTER_REF = re.compile(r"[Cc]hapters? ((?:\d\d[a-z]?(?:-| and |, | to )?)+)|[Cc]hapter-(\d\d[a-z]?)")
MODULES = [p for p in sorted(PACKAGE.rglob("*.py")) if not p.name.startswith("__")]


def chapter_texts() -> dict[str, str]:
    """Chapter number ('02', '06b', '91') -> all its text (a notebook's cells, or a page), its studies'
    included: a study (`s04a_...`, `s06ba_...`) belongs to the chapter its number names."""
    texts, studies = {}, []
    for path in sorted((ROOT / "chapters").glob("*")):
        number = path.stem.split("_")[0]
        if path.suffix == ".ipynb":
            text = "".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])
        elif path.suffix == ".md":
            text = path.read_text()
        else:
            continue
        if number.startswith("s"):
            studies.append((number[1:], text))
        else:
            texts[number] = text
    for number, text in studies:
        chapter = next((c for c in (number[:3], number[:2]) if c in texts), None)
        assert chapter is not None, f"study s{number} names no chapter that exists"
        texts[chapter] += text
    return texts


def chapters_named(text: str) -> set[str]:
    found = set()
    for match in CHAPTER_REF.finditer(text):
        found |= set(re.findall(r"\d\d[a-z]?", match.group(0)))
    return found


def test_the_reference_finder_reads_ranges_and_lists():
    assert chapters_named("chapters 05-06 and chapter 06b; a chapter-07 run") == {"05", "06", "06b", "07"}


def test_the_package_docstring_lists_every_method_module():
    listed = re.findall(r"^  (\w+)\s", ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())), flags=re.M)
    method = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert sorted(listed) == sorted(method), "the reading order in dspark_lite/__init__.py and the modules differ"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_docstring_names_chapters_that_exist_and_use_it(path):
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    named = chapters_named(doc)
    assert named, f"{path.relative_to(ROOT)}: its docstring names no chapter"
    texts = chapter_texts()
    assert named <= set(texts), f"{path.relative_to(ROOT)} names chapters that do not exist: {sorted(named - set(texts))}"
    assert any(re.search(rf"\b{path.stem}\b", texts[n]) for n in named), \
        f"{path.relative_to(ROOT)}: none of chapters {sorted(named)} mentions `{path.stem}`"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_and_classes_leave_chapter_references_to_the_module_docstring(path):
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node) or ""
            if chapters_named(doc):
                found.append(f"{node.name} (line {node.lineno})")
    assert not found, f"{path.relative_to(ROOT)}: chapter references outside the module docstring: {found}"
