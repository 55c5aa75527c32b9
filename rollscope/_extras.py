"""What an extra brings, checked before it is needed: ``pip install rollscope`` holds the tracing
API, the local store and the viewer; each backend, verl's stack and the embedded model is an extra
(pyproject.toml), and whatever needs one fails at once with the line that installs it."""

from __future__ import annotations

import importlib.util
import sys


class MissingExtra(ImportError):
    """A feature's optional dependencies are not installed; the message says how to install them."""


def _missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (found, not imported)."""
    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ValueError:  # imported already, without a spec (a stand-in a test put in sys.modules)
            found = module in sys.modules
        except ImportError:  # a parent package missing
            found = False
        if not found:
            missing.append(module)
    return missing


VERL = ("verl", "torch")  # what verl's agent loops and trainer import


def require(extra: str, *modules: str, feature: str) -> None:
    """Raise ``MissingExtra`` naming ``extra`` when any of ``modules`` is missing."""
    missing = _missing(*modules)
    if missing:
        raise MissingExtra(
            f"{feature} needs {', '.join(missing)}, which is not installed: pip install 'rollscope[{extra}]'"
        )
