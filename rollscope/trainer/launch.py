"""Running verl's own ``main_ppo`` on CPU: the environment, the overrides, the checks, the process.

Everything here is verl's public interface — environment variables verl reads and Hydra
overrides of its ``ppo_trainer`` config — plus the plugin ``rollscope.trainer.cpu`` that verl
imports itself. ``make demo-train`` and the trainer tests start runs through ``run_main_ppo``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rollscope.trainer.cpu import ROLLOUT_NAME, UnsupportedOnCPU

PLUGIN = "rollscope.trainer.cpu.plugin"

# What makes verl's trainer run on a CPU (see docs/verl.md, "verl without a GPU").
CPU_OVERRIDES = (
    f"actor_rollout_ref.rollout.name={ROLLOUT_NAME}",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.actor.strategy=fsdp2",  # FSDP1 refuses CPU parameters with sync_module_states
    "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.model.use_remove_padding=False",  # needs flash-attn
    "+actor_rollout_ref.model.override_config.attn_implementation=eager",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
    "actor_rollout_ref.rollout.dtype=float32",  # as the actor computes (verl's default: bfloat16)
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "trainer.device=cpu",
    "trainer.nnodes=1",
    "trainer.n_gpus_per_node=1",
    "+ray_kwargs.ray_init.num_gpus=1",  # verl's workers ask Ray for a "GPU": one stands for the CPU
    # Ray's CPUs are slots, not cores: verl's v1 trainer holds one each for its task runner, the
    # TransferQueue controller and storage units, the agent-loop and reward workers
    "ray_kwargs.ray_init.num_cpus=16",
)

# Settings a CPU run cannot honour: key -> (the only value it takes, why).
_FIXED = {
    "trainer.n_gpus_per_node": ("1", "one CPU process trains (gloo, world size 1)"),
    "trainer.nnodes": ("1", "the CPU trainer runs on one machine"),
    "actor_rollout_ref.rollout.name": (ROLLOUT_NAME, "vLLM and SGLang need a GPU; hf_cpu is the CPU rollout"),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("1", "the CPU rollout is one process"),
    "actor_rollout_ref.rollout.data_parallel_size": ("1", "the CPU rollout is one process"),
    "actor_rollout_ref.actor.strategy": ("fsdp2", "FSDP1 refuses CPU parameters; megatron needs CUDA"),
    "actor_rollout_ref.model.use_remove_padding": ("False", "remove-padding needs flash-attn (CUDA)"),
    "actor_rollout_ref.model.use_fused_kernels": ("False", "the fused kernels are CUDA kernels"),
    "actor_rollout_ref.rollout.enable_chunked_prefill": (None, "a vLLM option"),
    "actor_rollout_ref.rollout.gpu_memory_utilization": (None, "a vLLM/SGLang option"),
}


def check_overrides(overrides: Iterable[str]) -> None:
    """Refuse, in one line naming the key, a setting the CPU trainer cannot honour (before Ray
    starts, not a minute into the run). ``None`` in ``_FIXED``: any value is refused."""
    for item in overrides:
        key, sep, value = _split(item)
        if not sep or key not in _FIXED:
            continue
        allowed, why = _FIXED[key]
        if allowed is None or value.strip().lower() != allowed.lower():
            keep = "remove it" if allowed is None else f"it must be {allowed}"
            raise UnsupportedOnCPU(f"{key}={value} is not possible in verl on CPU: {why}; {keep}")


def cpu_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment verl's processes need on CPU: the plugin loaded everywhere, the ``cpu``
    platform, no torch.compile, and no network reports."""
    env = dict(os.environ if base is None else base)
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m and m != PLUGIN]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join([PLUGIN, *modules])
    env["VERL_PLATFORM"] = "cpu"
    env["VERL_ENGINE_DEVICE"] = "cuda"  # verl registers its FSDP engine only for cuda/npu; it then runs on "cpu"
    env["TORCH_COMPILE_DISABLE"] = "1"
    env.setdefault("WANDB_ERROR_REPORTING", "false")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("RAY_DEDUP_LOGS", "0")
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def merge_overrides(*lists: Iterable[str]) -> list[str]:
    """Hydra overrides with one entry per key, the last given winning (Hydra itself refuses a key
    given twice): a caller's setting replaces a default."""
    merged: dict[str, str] = {}
    for item in (i for overrides in lists for i in overrides):
        key = _split(item)[0]
        merged.pop(key, None)  # (re-inserted: the key takes the place of its last setting)
        merged[key] = item
    return list(merged.values())


def _split(item: str) -> tuple[str, str, str]:
    """A Hydra override as (key, "=", value), its ``+``/``~`` prefix dropped."""
    return item.lstrip("+~").partition("=")


def main_ppo_command(overrides: Iterable[str]) -> list[str]:
    """``python -m verl.trainer.main_ppo`` with the CPU overrides, then the caller's (which win)."""
    overrides = list(overrides)
    check_overrides(overrides)
    return [sys.executable, "-m", "verl.trainer.main_ppo", *merge_overrides(CPU_OVERRIDES, overrides)]


class TrainerFailed(RuntimeError):
    """verl's trainer exited non-zero; the message ends with the last lines of its log."""


def run_main_ppo(overrides: Iterable[str], *, log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, on_line: Callable[[str], None] | None = None,
                 timeout: float | None = None) -> Path:  # fmt: skip
    """Run verl's trainer to the end, its output into ``log_path`` (each line also to ``on_line``:
    progress). Raises ``TrainerFailed`` with the log's tail when verl fails or outlives ``timeout``
    seconds (then it is killed)."""
    command = main_ppo_command(overrides)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=cpu_environment(env), cwd=cwd, errors="replace")  # fmt: skip
        watchdog = threading.Timer(timeout, proc.kill) if timeout is not None else None
        if watchdog is not None:
            watchdog.start()
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            code = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            if watchdog is not None:
                watchdog.cancel()
    if code != 0:
        tail = "".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-40:])
        why = f"was killed after {timeout:.0f} s" if code == -9 and timeout is not None else f"exited with {code}"
        raise TrainerFailed(f"verl's main_ppo {why} (log: {log_path}):\n{tail}")
    return log_path
