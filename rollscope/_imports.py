"""A function named on a command line or in a config (``module:function``, or ``path/to/file.py:function``),
imported with one clear error when it cannot be: the reward of ``rollscope run`` and ``rollscope rescore``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def import_function(spec: str, what: str = "function") -> Callable[..., Any]:
    """The callable ``spec`` names; ValueError naming ``spec`` and why when there is none."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep:  # verl's dotted form: package.module.function
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"{what} {spec!r}: give it as module:function or path/to/file.py:function")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            if not path.is_file():
                raise FileNotFoundError(f"no file {path}")
            loaded = importlib.util.spec_from_file_location(f"rollscope_user_{path.stem}", path)
            module = importlib.util.module_from_spec(loaded)
            sys.modules[loaded.name] = module  # a worker process unpickling its results finds it
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except (ImportError, AttributeError, OSError, SyntaxError) as exc:
        raise ValueError(f"{what} {spec!r}: cannot import it ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise ValueError(f"{what} {spec!r}: not a function")
    return fn
