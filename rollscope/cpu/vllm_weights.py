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

from types import ModuleType
from typing import Any

from rollscope._import_hooks import after_import

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


def install() -> None:
    """Apply it where vLLM's linear module is loaded, now or later (once per process)."""
    after_import(LINEAR, keep_weights)
