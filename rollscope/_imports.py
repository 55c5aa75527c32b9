"""An object named on a command line or in a config (``module:name``, ``path/to/file.py:name`` or
verl's dotted ``package.module.name``), imported with one clear error when it cannot be: the reward
of ``rollscope run`` and ``rollscope rescore``, a tool's function or class, a trace backend's class."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any


def load_object(spec: str, error: type[Exception] = ValueError) -> Any:
    """The object ``spec`` names (``module:a.b`` walks attributes). ``error`` says why there is
    none, without naming ``spec`` (the caller does). A module that is there but imports a package
    that is not raises that ``ModuleNotFoundError`` as it is: it names what to install."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise error("give it as module:name or path/to/file.py:name")
    try:
        obj: Any = _module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and not (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise
        raise error(f"cannot import module {module_name!r} ({exc})") from None
    except (ImportError, OSError, SyntaxError) as exc:
        raise error(f"cannot import module {module_name!r} ({type(exc).__name__}: {exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise error(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _module(name: str) -> ModuleType:
    if not name.endswith(".py"):
        return importlib.import_module(name)
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    loaded = importlib.util.spec_from_file_location(f"rollscope_user_{path.stem}", path)
    module = importlib.util.module_from_spec(loaded)
    sys.modules[loaded.name] = module  # a worker process unpickling its results finds it
    loaded.loader.exec_module(module)
    return module


def import_function(spec: str, what: str = "function") -> Callable[..., Any]:
    """The callable ``spec`` names; ValueError naming ``spec`` and why when there is none."""
    try:
        fn = load_object(spec)
    except ModuleNotFoundError as exc:  # (a package the module imports)
        raise ValueError(f"{what} {spec!r}: cannot import it (ModuleNotFoundError: {exc})") from None
    except ValueError as exc:
        raise ValueError(f"{what} {spec!r}: cannot import it ({exc})") from None
    if not callable(fn):
        raise ValueError(f"{what} {spec!r}: not a function")
    return fn
