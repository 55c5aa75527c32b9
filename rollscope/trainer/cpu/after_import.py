"""A fix applied to a third-party module right after it is first executed, in the processes that
import it (and only there: nothing is imported to apply it). The CPU plugin's fixes to vLLM and
SGLang go through here."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

_FIXES: dict[str, Callable[[ModuleType], None]] = {}


class _AfterImport:
    """A meta path finder that runs the module's fix after the module's real loader."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _FIXES or self._finding:
            return None
        self._finding = True  # (find the real spec below without finding ourselves)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return spec
        execute, fix = spec.loader.exec_module, _FIXES[name]

        def exec_module(module: ModuleType) -> None:
            execute(module)
            fix(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def after_import(name: str, fix: Callable[[ModuleType], None]) -> None:
    """Run ``fix(module)`` on module ``name`` now if it is loaded, else once it is (at most once)."""
    if name in sys.modules:
        fix(sys.modules[name])
        return
    _FIXES[name] = fix
    if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
