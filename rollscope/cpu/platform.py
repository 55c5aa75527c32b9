"""The ``cpu`` platform for verl: what verl asks of an accelerator, answered by the CPU (``install``).

verl reaches the device through ``get_torch_device()`` (the platform's ``device_module``) and the
platform object. Without a registered ``cpu`` platform verl falls back to NVIDIA's, and
``trainer.device=cpu`` is turned back into ``cuda``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch
import verl.utils.distributed as verl_distributed
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"
_FAKE_MEMORY = 1 << 34  # what mem_get_info reports: verl sizes nothing by it on CPU

# verl calls these on its device module; torch.cpu has none of them.
_DEVICE_MODULE_STAND_INS = {
    "empty_cache": lambda *a, **k: None,
    "ipc_collect": lambda *a, **k: None,
    "mem_get_info": lambda *a, **k: (_FAKE_MEMORY, _FAKE_MEMORY),
    "memory_allocated": lambda *a, **k: 0,
    "memory_reserved": lambda *a, **k: 0,
    "max_memory_allocated": lambda *a, **k: 0,
    "max_memory_reserved": lambda *a, **k: 0,
    "reset_peak_memory_stats": lambda *a, **k: None,
    "set_per_process_memory_fraction": lambda *a, **k: None,
    "manual_seed": torch.manual_seed,
    "manual_seed_all": torch.manual_seed,
    "get_rng_state": lambda *a, **k: torch.get_rng_state(),
    "set_rng_state": lambda state, *a, **k: torch.set_rng_state(state),
    "get_device_name": lambda *a, **k: "CPU",
}


class CPUPlatform(PlatformBase):
    """One "device", the CPU; collectives over gloo. Ray schedules verl's workers on a "GPU"
    resource: the launcher declares one (``+ray_kwargs.ray_init.num_gpus=1``)."""

    device_name = property(lambda self: "cpu")
    vendor_name = property(lambda self: "cpu")
    device_module = property(lambda self: torch.cpu)

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"  # verl does tensor.to(get_device_id()): an int would mean cuda:N

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: int | None = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> ModuleType | None:
        return None


_verl_init_process_group = verl_distributed.initialize_global_process_group_ray


def _init_process_group_gloo(timeout_second: Any = None, backend: Any = None) -> Any:
    return _verl_init_process_group(timeout_second=timeout_second, backend=backend or "gloo")


def install() -> None:
    """Register the platform and make verl's device calls work on CPU (in verl's processes only:
    the plugin calls this; once per process)."""
    for name, fn in _DEVICE_MODULE_STAND_INS.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)
    if PlatformRegistry.get(PLATFORM_NAME) is None:
        PlatformRegistry.register(platform=PLATFORM_NAME)(CPUPlatform)
    # torch refuses the "cpu:gloo,cpu:gloo" verl builds from the device and backend names
    verl_distributed.initialize_global_process_group_ray = _init_process_group_gloo
    # FSDP2's CPUOffloadPolicy(pin_memory=True) (the reference policy's) pins memory, which needs
    # an accelerator; on CPU the tensor already is where it would be copied to
    if not torch.cuda.is_available():
        torch.Tensor.pin_memory = lambda self, *a, **k: self
