"""Monkeypatching inside a harness room whose modules import one another's functions by name:
the replacement has to land in every module that holds the name, or a caller keeps the original."""
from __future__ import annotations

from types import ModuleType
from typing import Any, Sequence

from dspark_lite.harness.gpu import headless, loading, measure, memory, preflight

gpu_room = (loading, measure, memory, preflight, headless)


def patch_room(monkeypatch, modules: Sequence[ModuleType], name: str, value: Any) -> None:
    """Set `name` to `value` in each of `modules` that holds it (at least one must)."""
    holders = [module for module in modules if hasattr(module, name)]
    assert holders, f"no module of {[m.__name__ for m in modules]} holds {name!r}"
    for module in holders:
        monkeypatch.setattr(module, name, value)
