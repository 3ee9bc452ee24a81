"""The package's layers and rooms, checked on its source with `ast`.

The method (the modules in dspark_lite/) never imports the harness (dspark_lite/harness/). The
harness is in rooms by concern, and a room imports only the rooms below it:

    base (harness/*.py: results files)  <-  toy, serving  <-  gpu  <-  book

No module imports another's private name, in the package or in the tests; no harness module is
part of an import circle (counting imports inside functions too); no module of the method is over
400 lines (dspark_lite/*.py) and none of the harness over 500 (dspark_lite/harness/), without
exceptions: a module past its limit is split by job."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspark_lite"
HARNESS = PACKAGE / "harness"
# room -> the rooms its modules may import ("base" is the harness's own top level)
MAY_IMPORT = {"base": {"base"}, "toy": {"base", "toy"}, "serving": {"base", "serving"},
              "gpu": {"base", "toy", "serving", "gpu"}, "book": {"base", "toy", "serving", "gpu", "book"}}
METHOD_LONGEST, HARNESS_LONGEST = 400, 500  # the most lines a module of the method, of the harness may have


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


def harness_modules() -> list[Path]:
    return sorted(HARNESS.rglob("*.py"))


def room_of(path: Path) -> str:
    parts = path.relative_to(HARNESS).parts
    return parts[0] if len(parts) > 1 else "base"


def harness_targets(module: str, name: str) -> list[str]:
    """The harness modules an import (module, name) reaches: `from ..toy import corpus` reaches
    dspark_lite.harness.toy.corpus, `from ..toy.corpus import DOMAINS` the module itself."""
    if not module.startswith("dspark_lite.harness"):
        return []
    as_module = f"{module}.{name}"
    dotted = lambda p: ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    known = {dotted(p) for p in harness_modules()}
    return [as_module] if as_module in known else [module]


def room_of_module(module: str) -> str:
    parts = module.split(".")[2:]  # after dspark_lite.harness
    return parts[0] if len(parts) > 1 else "base"


def test_the_layers_are_where_the_folders_say():
    assert {p.stem for p in method_modules()} >= {"speculative", "record", "dspark", "training_data", "loss", "training",
                                                  "calibration", "scheduler", "kvcache", "checks"}
    assert {p.name for p in HARNESS.iterdir() if p.is_dir() and not p.name.startswith("__")} == set(MAY_IMPORT) - {"base"}
    assert {p.stem for p in (HARNESS / "toy").glob("*.py")} >= {"corpus", "world", "zoo", "target"}
    assert {p.stem for p in (HARNESS / "serving").glob("*.py")} >= {"costs", "simulator", "batching"}
    assert (HARNESS / "gpu" / "__main__.py").is_file()  # python -m dspark_lite.harness.gpu


@pytest.mark.parametrize("path", method_modules(), ids=lambda p: p.name)
def test_the_method_imports_nothing_from_the_harness(path):
    crossing = [(module, name, line) for module, name, line in imports(path)
                if module.startswith("dspark_lite.harness") or (module == "dspark_lite" and name == "harness")]
    assert not crossing, f"{path.name} imports the harness: {crossing}"


def room_crossings(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Harness modules `path` imports from a room it may not import."""
    allowed = MAY_IMPORT[room_of(path)]
    return [(target, line) for module, name, line in imports(path, root)
            for target in harness_targets(module, name) if room_of_module(target) not in allowed]


@pytest.mark.parametrize("path", harness_modules(), ids=lambda p: str(p.relative_to(HARNESS)))
def test_each_room_imports_only_the_rooms_below_it(path):
    crossing = room_crossings(path)
    assert not crossing, f"{path.relative_to(HARNESS)} ({room_of(path)}) imports {crossing}"


def test_the_checks_find_planted_imports(tmp_path):
    planted = tmp_path / "dspark_lite" / "harness" / "planted.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("from .toy.world import ToyWorld\nfrom .. import harness\nfrom ..costs import _sync\n")
    found = [(m, n) for m, n, _ in imports(planted, tmp_path)]
    assert found == [("dspark_lite.harness.toy.world", "ToyWorld"), ("dspark_lite", "harness"), ("dspark_lite.costs", "_sync")]
    assert room_of_module("dspark_lite.harness.toy.world") == "toy" and room_of_module("dspark_lite.harness.result_files") == "base"
    assert not MAY_IMPORT["serving"] >= {"toy"} and not MAY_IMPORT["toy"] >= {"book"}  # the direction is one way


def import_graph() -> dict[str, set[str]]:
    dotted = lambda p: ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    return {dotted(p): {t for module, name, _ in imports(p) for t in harness_targets(module, name)}
            for p in harness_modules()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every module that can reach itself, with one path back (depth-first)."""
    found = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    found.append(path + [start])
                    stack = []
                    break
                if nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return found


def test_no_harness_module_is_part_of_an_import_circle():
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"], ["b", "a", "b"]]  # the check finds one
    assert not circles(import_graph())


def line_limit(path: Path, package: Path = PACKAGE) -> int:
    """The most lines `path` may have: METHOD_LONGEST directly in the package (the method),
    HARNESS_LONGEST anywhere below it (the harness)."""
    return METHOD_LONGEST if path.parent == package else HARNESS_LONGEST


def over_limit(path: Path, package: Path = PACKAGE) -> bool:
    return len(path.read_text().splitlines()) > line_limit(path, package)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_is_over_its_line_limit(path):
    lines, limit = len(path.read_text().splitlines()), line_limit(path)
    assert not over_limit(path), f"{path.relative_to(ROOT)}: {lines} lines, over {limit}: split it by job"


def test_the_line_limit_finds_a_long_module(tmp_path):
    package = tmp_path / "dspark_lite"
    (package / "harness" / "toy").mkdir(parents=True)
    method, harness = package / "long.py", package / "harness" / "toy" / "long.py"
    method.write_text("x = 1\n" * 401)
    harness.write_text("x = 1\n" * 401)
    assert over_limit(method, package) and not over_limit(harness, package)
    method.write_text("x = 1\n" * 400)
    harness.write_text("x = 1\n" * 501)
    assert not over_limit(method, package) and over_limit(harness, package)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_private_name_of_the_package(path):
    private = [(module, name, line) for module, name, line in imports(path)
               if module.startswith("dspark_lite") and name.startswith("_") and not name.startswith("__")]
    assert not private, f"{path.relative_to(ROOT)} imports private names: {private}"
