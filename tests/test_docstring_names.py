"""Every backticked dotted name in dspark_lite's docstrings (`module.attr`, `pkg.module.attr`,
`Class.attr`, `self.attr`, `param.attr`, `module.py`) names something that exists.

A name is read, in this order, from: `self` (the class of the method), a parameter of the function
(through its annotation), the class whose docstring it is in, the module that writes it, each package above that module, the harness
and each of its rooms, and any top-level class or function of dspark_lite. Attributes are followed
through modules, class attributes, annotated fields (to their annotated type) and the attributes
a class sets on `self`. Left out, each by a rule: other libraries by their first component, the
names the docstrings quote from other projects' sources, file names by their extension, and
state_dict keys (`lm_head.weight`). Nothing else is skipped."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import textwrap
from functools import cache
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dspark_lite"
BACKTICKED = re.compile(r"`([^`\s]+)`")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
# Other libraries and the standard library, by the first component of the name.
FOREIGN = {
    "torch", "nn", "F", "np", "numpy", "pd", "pandas", "transformers", "tokenizers", "datasets",
    "huggingface_hub", "safetensors", "accelerate", "plt", "matplotlib", "alt", "altair", "ipywidgets",
    "IPython", "papermill", "yaml", "tqdm", "scipy", "sklearn", "math", "os", "sys", "time", "json",
    "re", "statistics", "itertools", "functools", "collections", "concurrent", "dataclasses", "typing",
    "pathlib", "logging", "contextlib", "inspect", "random", "subprocess", "multiprocessing",
    "resource", "importlib", "deepspec", "sphinx", "myst_nb", "jupyter_book", "pytest",
}
# Names quoted from other projects' sources: DeepSpec (eagle.py), SGLang and TensorRT-LLM (engines.py).
OTHER_PROJECTS = {
    "Qwen3Eagle3Evaluator", "DSparkDecodingConfig", "dspark_sps_table", "dspark_sts_table", "dspark_sts",
    "dspark_sps_profiler", "dspark_planner",
}
# File names (`config.json`, cgroup's `cpu.max`); a `.py` file of dspark_lite is a module and is resolved.
FILE_SUFFIXES = {"json", "safetensors", "bin", "pt", "txt", "md", "yml", "yaml", "toml", "ipynb", "html",
                 "css", "js", "csv", "sh", "cfg", "lock", "png", "svg", "gz", "zip", "tar"}
CGROUP_FILES = {"cpu"}
STATE_DICT_LEAVES = {"weight", "bias"}
HARNESS_ROOMS = sorted(p.name for p in (PACKAGE / "harness").iterdir() if (p / "__init__.py").exists())
MISSING = object()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def docstring_names(path: Path) -> list[tuple[int, str, str | None, dict[str, str]]]:
    """(line, name, enclosing class, the function's annotated parameters) of every backticked
    dotted name in the module's docstrings."""
    found = []

    def visit(node: ast.AST, klass: str | None) -> None:
        klass = node.name if isinstance(node, ast.ClassDef) else klass  # a class's own docstring is inside it
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            params = {}
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                params = {a.arg: ast.unparse(a.annotation) for a in arguments if a.annotation is not None}
            doc = ast.get_docstring(node, clean=False) or ""
            for match in BACKTICKED.finditer(doc):
                if DOTTED.fullmatch(match.group(1)):
                    line = node.body[0].lineno + doc[:match.start()].count("\n")
                    found.append((line, match.group(1), klass, params))
        for child in ast.iter_child_nodes(node):
            visit(child, klass)

    visit(ast.parse(path.read_text()), None)
    return found


@cache
def top_level_names() -> dict[str, list[str]]:
    """Every top-level class and function of dspark_lite -> the modules that define it."""
    index: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                index.setdefault(node.name, []).append(module_name(path))
    return index


def import_or_none(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def self_attributes(klass: type) -> set[str]:
    """The attributes a class (or one it inherits from) sets on `self` in its methods."""
    names = set()
    for owner in klass.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(owner)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" \
                    and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return names


def annotation_names(node: ast.AST) -> list[str]:
    """The dotted names an annotation is made of: `X` and `pkg.X` as they are, both sides of
    `X | Y`, the argument of `Optional[X]`, the text of a string annotation; not containers."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return annotation_names(ast.parse(node.value, mode="eval").body)
    if isinstance(node, ast.BinOp):
        return annotation_names(node.left) + annotation_names(node.right)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "typing.Optional"):
        return annotation_names(node.slice)
    dotted = ast.unparse(node)
    return [dotted] if isinstance(node, (ast.Name, ast.Attribute)) and re.fullmatch(r"[\w.]+", dotted) else []


def annotated_types(annotation: str, module: ModuleType) -> list[object]:
    """What an annotation string names (`X`, `X | None`, `pkg.X`), looked up in `module` or,
    failing that, among dspark_lite's top-level names."""
    found = []
    for dotted in annotation_names(ast.parse(annotation, mode="eval").body):
        parts = dotted.split(".")
        found += [obj for obj in (follow([module], parts), *by_top_level_name(parts)) if obj is not MISSING]
    return found


def by_top_level_name(parts: list[str]) -> list[object]:
    return [follow([import_or_none(module)], parts) for module in top_level_names().get(parts[0], [])]


def step(obj: object, attr: str) -> list[object]:
    """What `obj.attr` may be: a submodule, an attribute, an annotated field's types, or an
    attribute set on `self` (its value unknown)."""
    if isinstance(obj, ModuleType):
        value = getattr(obj, attr, MISSING)
        return [value] if value is not MISSING else [m for m in [import_or_none(f"{obj.__name__}.{attr}")] if m]
    if isinstance(obj, type):
        for owner in obj.__mro__:
            if attr in inspect.get_annotations(owner):
                annotation = inspect.get_annotations(owner)[attr]
                if isinstance(annotation, str):
                    return annotated_types(annotation, sys.modules[owner.__module__]) or [None]
                return [annotation]
        value = getattr(obj, attr, MISSING)
        if isinstance(value, property) and value.fget is not None:  # to the type it returns
            returns = inspect.get_annotations(value.fget).get("return")
            if isinstance(returns, str):
                return annotated_types(returns, sys.modules[obj.__module__]) or [None]
        if value is not MISSING:
            return [value]
        return [None] if attr in self_attributes(obj) else []
    return [getattr(obj, attr)] if obj is not None and hasattr(obj, attr) else []


def follow(starts: list[object], parts: list[str]) -> object:
    """The first object reached from any of `starts` through attributes `parts`; MISSING if none.
    A None on the way (a value the test cannot see) resolves only as the last step."""
    frontier = [s for s in starts if s is not None and s is not MISSING]
    for i, attr in enumerate(parts):
        frontier = [nxt for obj in frontier for nxt in step(obj, attr)]
        if i < len(parts) - 1:
            frontier = [obj for obj in frontier if obj is not None]
    return frontier[0] if frontier else MISSING


def resolves(name: str, module: str, klass: str | None = None, params: dict[str, str] | None = None) -> bool:
    """Whether `name`, written in a docstring of `module` (inside class `klass`, in a function
    with annotated parameters `params`), names something, by the order of the module doc."""
    parts, mod = name.split("."), importlib.import_module(module)
    owner = getattr(mod, klass, None) if klass else None
    if parts[0] == "self":
        return follow([owner], parts[1:]) is not MISSING
    if params and parts[0] in params and follow(annotated_types(params[parts[0]], mod), parts[1:]) is not MISSING:
        return True
    if follow([owner], parts) is not MISSING:  # a class's docstrings name its own fields bare
        return True
    packages = [".".join(module.split(".")[:i]) for i in range(module.count(".") + 1, 0, -1)]
    packages += ["dspark_lite.harness"] + [f"dspark_lite.harness.{room}" for room in HARNESS_ROOMS]
    if follow([mod], parts) is not MISSING:
        return True
    for package in dict.fromkeys(packages):
        for split in range(len(parts), 0, -1):  # the longest module prefix, then attributes
            prefix = import_or_none(f"{package}.{'.'.join(parts[:split])}")
            if prefix is not None:
                if follow([prefix], parts[split:]) is not MISSING:
                    return True
                break
    if parts[0] == "dspark_lite" and follow([importlib.import_module("dspark_lite")], parts[1:]) is not MISSING:
        return True
    return any(obj is not MISSING for obj in by_top_level_name(parts))


def unresolved(path: Path) -> list[str]:
    module, missing = module_name(path), []
    for line, name, klass, params in docstring_names(path):
        first, suffix = name.split(".")[0], name.rsplit(".", 1)[1]
        if first in FOREIGN | OTHER_PROJECTS | CGROUP_FILES or suffix in FILE_SUFFIXES | STATE_DICT_LEAVES:
            continue
        target = name.rsplit(".", 1)[0] if suffix == "py" else name
        if not resolves(target, module, klass, params):
            missing.append(f"{path.relative_to(ROOT)}:{line}: `{name}`")
    return missing


def test_the_resolver_finds_what_exists_and_only_that():
    here = "dspark_lite.harness.serving.batching"
    assert resolves("dspark_lite.eagle.EagleDrafter", here)
    assert resolves("simulator.curve_at", here)  # a sibling module
    assert resolves("speculative.verify_block", here)  # the method
    assert resolves("toy.replies", here) and resolves("harness.toy.replies.sample_replies", here)  # a room
    assert resolves("Rounds.proposed", "dspark_lite.record")  # a dataclass field
    assert resolves("Rollout.rounds.emitted", "dspark_lite.speculative")  # through a field's annotation
    assert resolves("SequentialTemperatureScaling.temperatures_", here)  # set on self, found by class name
    assert resolves("self.width", "dspark_lite.record", klass="Rounds")
    assert resolves("cfg.anchors_per_sequence", "dspark_lite.training", params={"cfg": "DrafterTrainConfig"})
    for name in ("drafters.EagleDrafter", "serving.simulate", "serving.curve_at", "harness.replies",
                 "eagle.NoSuchDrafter", "Rounds.no_such_column", "drafters"):
        assert not resolves(name, here), name
    assert not resolves("self.no_such", "dspark_lite.record", klass="Rounds")
    assert not resolves("cfg.no_such", "dspark_lite.training", params={"cfg": "DrafterTrainConfig"})


def test_every_dotted_name_in_a_docstring_names_something_that_exists():
    assert Path(importlib.import_module("dspark_lite").__file__).parent == PACKAGE
    missing = [entry for path in sorted(PACKAGE.rglob("*.py")) if path.name != "__main__.py"
               for entry in unresolved(path)]
    assert not missing, "docstring names that resolve to nothing:\n" + "\n".join(missing)
