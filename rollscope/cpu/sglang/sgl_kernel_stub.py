"""``sgl_kernel`` for a CPU without AMX (installed as that package by ``make sglang``: see
``rollscope.cpu.sglang``): any function of it or of a submodule raises ``NotImplementedError``.

SGLang imports names from ``sgl_kernel`` at module level on every platform, and calls them only on
CUDA, ROCm, or a CPU with AMX. ``sgl_kernel.scalar_type`` is refused (an ``ImportError``): SGLang
falls back to its own stand-in there, and only quantized models use it.
"""

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, NoReturn

__version__ = "0.0.0+rollscope.cpu.stub"
_REFUSED = {"sgl_kernel.scalar_type"}


def _missing(name: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"{name}: SGLang's kernel is not on this CPU (rollscope's sgl_kernel stand-in: "
            "SGLang's CPU kernels need AMX)"
        )

    kernel.__name__ = kernel.__qualname__ = name.rsplit(".", 1)[-1]
    return kernel


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _missing(f"sgl_kernel.{name}")


class _Submodule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _missing(f"{self.__name__}.{name}")


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith("sgl_kernel.") or fullname in _REFUSED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Submodule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


__path__: list[str] = []  # (a package: ``import sgl_kernel.x`` asks the finder below)
if not any(isinstance(f, _Submodules) for f in sys.meta_path):
    sys.meta_path.append(_Submodules())
