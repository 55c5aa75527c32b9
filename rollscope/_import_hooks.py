"""Code run on a third-party module as it is first executed, in the processes that import it and
only there: nothing is imported to apply it. verl's trainer joined to the traces
(``trainer.verl_hook``) and the CPU fixes to vLLM and SGLang (``cpu``) go through here.

Standard library only: the wheel ``make sglang`` installs ships this file into SGLang's venv as it
is (``_rollscope_import_hooks``), for the fixes that run at that interpreter's start-up.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Execute = Callable[[ModuleType], None]
_WRAPS: dict[str, Callable[[ModuleType, Execute], None]] = {}


class _Finder(importlib.abc.MetaPathFinder):
    """Hands a wrapped module's real loader to its wrap."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        wrap = _WRAPS.get(name)
        if wrap is None or self._finding:
            return None
        self._finding = True  # (find the real spec below without finding ourselves)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module
        spec.loader.exec_module = lambda module: wrap(module, execute)  # type: ignore[method-assign]
        return spec


def wrap_import(name: str, wrap: Callable[[ModuleType, Execute], None]) -> None:
    """From now on, importing module ``name`` runs ``wrap(module, execute)`` in place of executing
    it: ``wrap`` calls ``execute(module)`` (or, to leave the module empty, does not)."""
    _WRAPS[name] = wrap
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def after_import(name: str, fix: Callable[[ModuleType], None]) -> None:
    """Run ``fix(module)`` on module ``name`` now if it is loaded, else right after it is executed."""
    if name in sys.modules:
        fix(sys.modules[name])
        return

    def execute_then_fix(module: ModuleType, execute: Execute) -> None:
        execute(module)
        fix(module)

    wrap_import(name, execute_then_fix)
