"""The package's shape in numbers, for issue notes and reviews: lines of the method and of each
harness room, the longest module and function of the method and of the harness, where the
method's `raise` statements sit (in `checks.py`, in a module's own checks section at its door,
the lines after its `# --- checks` marker, or inline elsewhere), private names the chapters show,
functions over 40 lines in the method, and modules over 500 lines; the book room's lines (`harness/book`, and the
per-chapter page modules among them); and per chapter the distinct names of the method and of the harness its
code cells use, and its code cells the rendered book shows (those not tagged `hide-input`, `remove-input` or
`remove-cell`).

    python ci/code_metrics.py [--root PATH] [--json]

It reads the source with `ast` and imports nothing, so it runs on any checkout (for a before /
after comparison, point --root at a `git worktree` of the older commit).
"""
from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

LONG_FUNCTION = 40
LONG_MODULE = 500
SHOWN = re.compile(r"getsource\(\s*([\w.]+)\s*\)")


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method in a module."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child.end_lineno - child.lineno + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")

    visit(tree, "")
    return found


def raises(tree: ast.AST) -> int:
    return sum(isinstance(node, ast.Raise) for node in ast.walk(tree))


def raise_lines(tree: ast.AST) -> list[int]:
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Raise)]


def checks_marker(text: str) -> int | None:
    """The line of a module's `# --- checks` section marker (1-based), or None."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# --- checks"):
            return number
    return None


def shown_private_names(chapters: Path) -> list[str]:
    """Dotted names a chapter passes to `inspect.getsource` with a private part (`_name`)."""
    names = []
    for notebook in sorted(chapters.glob("*.ipynb")):
        cells = json.loads(notebook.read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] == "code":
                for name in SHOWN.findall("".join(cell["source"])):
                    if any(part.startswith("_") for part in name.split(".")):
                        names.append(f"{notebook.stem}: {name}")
    return names


HIDDEN_TAGS = {"hide-input", "remove-input", "remove-cell"}


def _module_path(package: Path, dotted: str) -> Path | None:
    """The file of `dotted` (a dspark_lite module or sub-package), or None when it names no module."""
    base = package.parent.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def names_used(sources: list[str], package: Path) -> dict[str, set[str]]:
    """{"method": names, "harness": names}: the package's names a notebook's code cells (`sources`,
    in order) use. A module imported from the package counts each attribute read from it in any cell
    (`results.say`), a function or class imported from it counts itself; the layer is the harness
    when the dotted path has `.harness`. Lines of IPython magics (`%`, `!`) are skipped."""
    trees = []
    for source in sources:
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            trees.append(ast.parse(code))
        except SyntaxError:
            continue
    modules: dict[str, str] = {}  # local name -> dotted module
    found: dict[str, set[str]] = {"method": set(), "harness": set()}
    layer = lambda dotted: "harness" if ".harness" in dotted else "method"
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package.name):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if _module_path(package, dotted):
                    modules[alias.asname or alias.name] = dotted
                else:
                    found[layer(node.module)].add(dotted.removeprefix(package.name + "."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package.name) and alias.asname:
                    modules[alias.asname] = alias.name
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            dotted = modules[node.value.id]
            found[layer(dotted)].add(f"{dotted.removeprefix(package.name + '.')}.{node.attr}")
    return found


def chapter_metrics(root: Path) -> dict[str, dict[str, int]]:
    """Per chapter notebook: distinct method and harness names its code uses, its code cells, and
    the code cells the rendered book shows."""
    package, out = root / "dspark_lite", {}
    for notebook in sorted((root / "chapters").glob("*.ipynb")):
        cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
        used = names_used(["".join(cell["source"]) for cell in cells], package)
        visible = [c for c in cells if not HIDDEN_TAGS & set(c.get("metadata", {}).get("tags", []))]
        out[notebook.stem] = {"method names": len(used["method"]), "harness names": len(used["harness"]),
                              "code cells": len(cells), "visible code cells": len(visible)}
    return out


def room_of(path: Path, package: Path) -> str:
    """'method' for the package's top level, else the harness room (its sub-package, or 'harness'
    for a module directly in the harness folder)."""
    parts = path.relative_to(package).parts
    if len(parts) == 1:
        return "method"
    return "harness/" + parts[1] if len(parts) > 2 else "harness"


def metrics(root: Path) -> dict:
    package = root / "dspark_lite"
    rooms: dict[str, int] = {}
    method_raises, long_functions, long_modules = 0, [], []
    where = {"checks.py": 0, "a module's checks section": 0, "inline": 0}
    longest: dict[str, dict[str, tuple[str, int]]] = {"method": {}, "harness": {}}
    for path in sorted(package.rglob("*.py")):
        lines, room = line_count(path), room_of(path, package)
        rooms[room] = rooms.get(room, 0) + lines
        name = str(path.relative_to(root))
        if lines > LONG_MODULE:
            long_modules.append(f"{name} ({lines})")
        text = path.read_text()
        tree = ast.parse(text)
        layer = "method" if room == "method" else "harness"
        if lines > longest[layer].get("module", ("", 0))[1]:
            longest[layer]["module"] = (name, lines)
        for fn, n in functions(tree):
            if n > longest[layer].get("function", ("", 0))[1]:
                longest[layer]["function"] = (f"{name}: {fn}", n)
        if room != "method":
            continue
        marker = checks_marker(text)
        for line in raise_lines(tree):
            where["checks.py" if path.name == "checks.py" else
                  "a module's checks section" if marker is not None and line > marker else "inline"] += 1
        if path.name != "checks.py":
            method_raises += raises(tree)
        long_functions += [f"{path.stem}.{fn} ({n})" for fn, n in functions(tree) if n > LONG_FUNCTION]
    totals = {"method": rooms.get("method", 0), "harness": sum(v for k, v in rooms.items() if k != "method")}
    pages = sorted((package / "harness" / "book" / "pages").glob("ch*.py"))
    book = {"harness/book": rooms.get("harness/book", 0), "of it, per-chapter page modules": len(pages),
            "their lines": sum(line_count(p) for p in pages)}
    return {"lines": rooms, "lines by layer": totals, "book room": book, "chapters": chapter_metrics(root),
            "longest module": {layer: f"{v['module'][0]} ({v['module'][1]})" for layer, v in longest.items()},
            "longest function": {layer: f"{v['function'][0]} ({v['function'][1]})" for layer, v in longest.items()},
            "method raises by place": where,
            "method raises outside checks.py": method_raises,
            "private names shown by chapters": shown_private_names(root / "chapters"),
            f"method functions over {LONG_FUNCTION} lines": long_functions,
            f"modules over {LONG_MODULE} lines": long_modules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args()
    found = metrics(args.root)
    if args.json:
        print(json.dumps(found, indent=1))
        return
    for key, value in found.items():
        if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            print(f"{key}:" + "".join(f"\n  {k}: " + ", ".join(f"{n} {v}" for n, v in row.items())
                                      for k, row in value.items()))
        elif isinstance(value, dict):
            print(f"{key}: " + ", ".join(f"{k} {v}" for k, v in value.items()))
        elif isinstance(value, list):
            print(f"{key}: {len(value)}" + "".join(f"\n  {item}" for item in value))
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
