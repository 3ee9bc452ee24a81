"""The package's two layers, checked on its source with `ast` (issue: the method on one screen).

The method (the modules in dspark_lite/) never imports the harness (dspark_lite/harness/), and no
module imports another's private name, in the package or in the tests."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspark_lite"


def imports(path: Path, root: Path = ROOT) -> list[tuple[str, str, int]]:
    """(module imported from, name, line) for every import in `path`, relative imports resolved
    against its package (its folder below `root`)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, "*", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found += [(module, alias.name, node.lineno) for alias in node.names]
    return found


def method_modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def test_the_layers_are_where_the_folders_say():
    assert {p.stem for p in method_modules()} >= {"speculative", "record", "dflash", "eagle", "dspark", "training",
                                                  "calibration", "scheduler", "kvcache"}
    assert {p.stem for p in (PACKAGE / "harness").glob("*.py")} >= {"world", "costs", "serving", "zoo", "gpu"}


@pytest.mark.parametrize("path", method_modules(), ids=lambda p: p.name)
def test_the_method_imports_nothing_from_the_harness(path):
    crossing = [(module, name, line) for module, name, line in imports(path)
                if module.startswith("dspark_lite.harness") or (module == "dspark_lite" and name == "harness")]
    assert not crossing, f"{path.name} imports the harness: {crossing}"


def test_the_checks_find_planted_imports(tmp_path):
    planted = tmp_path / "dspark_lite" / "harness" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from ..harness.world import ToyWorld\nfrom .. import harness\nfrom ..costs import _sync\n")
    found = [(m, n) for m, n, _ in imports(planted, tmp_path)]
    assert found == [("dspark_lite.harness.world", "ToyWorld"), ("dspark_lite", "harness"), ("dspark_lite.costs", "_sync")]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_private_name_of_the_package(path):
    private = [(module, name, line) for module, name, line in imports(path)
               if module.startswith("dspark_lite") and name.startswith("_") and not name.startswith("__")]
    assert not private, f"{path.relative_to(ROOT)} imports private names: {private}"
