"""vLLM's CPU linear layers keep their weights, so that verl can sync new ones at every step.

On CPU, vLLM's ``UnquantizedLinearMethod.process_weights_after_loading`` packs each linear weight
for its GEMM kernel and puts an empty ``Parameter`` (with no ``weight_loader``) in its place
(``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``). verl's first weight sync then
fails inside vLLM's worker (``model.load_weights``: "'Parameter' object has no attribute
'weight_loader'") and verl's sender waits for an answer that never comes. Here the layer is packed
and its weight kept (``remove_weight=False``): ``load_weights`` copies into it, and the
``process_weights_after_loading`` verl runs after the last bucket packs it again. The cost is one
more copy of the linear weights.

``install`` (called by the CPU plugin in every verl process) applies it where vLLM's linear module
is imported — vLLM's worker, before it loads the model — and makes no other process import vLLM.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType
from typing import Any

LINEAR = "vllm.model_executor.layers.linear"
_KEEPS = "_rollscope_keeps_cpu_weights"


def keep_weights(linear: ModuleType) -> None:
    """Make ``linear.UnquantizedLinearMethod`` keep the weights it packs, on vLLM's CPU platform."""
    from vllm.platforms import current_platform

    method = linear.UnquantizedLinearMethod
    if not current_platform.is_cpu() or getattr(method, _KEEPS, False):
        return
    packs_and_drops = method.process_weights_after_loading

    def process_weights_after_loading(self: Any, layer: Any) -> None:
        if getattr(layer, "_cpu_skip_gemm_dispatch", False):  # vLLM's own fallback, no packing
            return packs_and_drops(self, layer)
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    method.process_weights_after_loading = process_weights_after_loading
    setattr(method, _KEEPS, True)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``keep_weights`` on vLLM's linear module right after it is first executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != LINEAR:
            return None
        sys.meta_path.remove(self)  # (find the real spec below without finding ourselves)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            keep_weights(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Apply it now if vLLM's linear module is loaded, else when it is (once per process)."""
    if LINEAR in sys.modules:
        keep_weights(sys.modules[LINEAR])
    elif not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
