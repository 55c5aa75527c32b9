"""verl's internals (and MLflow's), read and changed in this one module.

rollscope follows verl by reading what verl does not publish: the ContextVars of its tracer, its
config singleton, the arguments of the coroutine its worker runs per sample, its loop registry,
its rollout config's fields, its trainers' private steps, and MLflow's trace manager. verl
releases often; a renamed local would make tracing go quietly dark. So every such read is here,
each named in ``CONTRACTS`` with a check that fails naming the verl version and the internal that
moved (``tests/test_verl_compat.py`` runs them all), and an untested verl is said once
(``check_version``). The import contracts keep verl's and MLflow's private modules out of every
other module (``pyproject.toml``); the CPU platform (``rollscope.cpu``) keeps its own
registrations with verl.

Nothing here imports verl at module import: each function imports what it reads when called.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

log = logging.getLogger("rollscope")

TESTED_VERL = ("0.9.1",)  # the verl versions CONTRACTS were checked against
ROLLOUT_TRACE = "verl.utils.rollout_trace"
# The coroutines verl's workers run: one per sample (AgentLoopWorker), one per prompt's n sessions
# (the TransferQueue worker, AgentLoopWorkerTQ), and the arguments of theirs rollscope reads.
RUN_FRAME, PROMPT_FRAME = "_run_agent_loop", "_run_prompt"
RUN_ARGUMENTS = ("trajectory", "agent_name", "kwargs")
# The trainers' private steps rollscope's training join wraps (``rollscope.trainer.verl_hook``):
# v0's RayPPOTrainer and v1's PPOTrainer, in these modules.
V0_TRAINER, V1_TRAINER = "verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base"
TRACKING = "verl.utils.tracking"  # its ``Tracking`` starts the trainer's W&B run
V0_UPDATE_ACTOR = "_update_actor"  # RayPPOTrainer's
V0_OLD_LOG_PROB = "_compute_old_log_prob"  # RayPPOTrainer's: returns (DataProto holding "entropys", mfu)
V1_COMPUTE_ADVANTAGE = "_compute_advantage"  # PPOTrainer's
V1_MULTI_TRAJECTORY_ADVANTAGES = "compute_advantage_for_multi_trajectories"  # v1's module's function


@functools.cache
def check_version() -> str | None:
    """verl's version here; said once when it is not one ``CONTRACTS`` were checked against."""
    try:
        import verl
    except ImportError:
        return None
    version = getattr(verl, "__version__", "unknown")
    if version not in TESTED_VERL:
        log.warning(
            "rollscope was checked against verl %s; this is verl %s: if tracing goes quiet, run "
            "tests/test_verl_compat.py, which names the internal that moved",
            ", ".join(TESTED_VERL),
            version,
        )
    return version


# ---- verl's tracer: its ContextVars and config singleton ----
def trace_context() -> tuple[bool, dict[str, Any] | None]:
    """(verl allows tracing here, the attributes of the trajectory verl opened or None). Looked up
    in ``sys.modules``, not imported: if verl's tracing module was never imported, verl cannot
    have opened a trajectory, and importing it would cost seconds."""
    mod = sys.modules.get(ROLLOUT_TRACE)
    if mod is None:
        return True, None
    if not mod._trace_enabled.get():
        return False, None
    cfg = mod.RolloutTraceConfig._instance
    if cfg is None or not cfg._initialized:
        return True, None
    return True, mod._trace_attributes.get()


def trace_switch() -> ContextVar[bool]:
    """verl's per-task switch for its decorators (False: they record nothing)."""
    from verl.utils.rollout_trace import _trace_enabled

    return _trace_enabled


def take_over_tracing(backend: str) -> str | None:
    """Rename verl's trace backend to ``backend`` (its ``rollout_trace_attr`` then opens nothing in
    Weave or MLflow, its decorators record nothing) and switch off its own sample choice; returns
    the backend it had (None when verl's tracer was never imported)."""
    mod = sys.modules.get(ROLLOUT_TRACE)
    if mod is None:
        return None
    config = mod.RolloutTraceConfig.get_instance()
    previous, config.backend = config.backend, backend
    config.max_samples_per_step_per_worker = None
    return previous


def verl_trace_wrapper(fn: Any) -> Any:
    """The function verl's ``@rollout_trace_op`` wrapped, when ``fn`` is such a wrapper; else None."""
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename.endswith("rollout_trace.py") and hasattr(fn, "__wrapped__"):
        return fn.__wrapped__
    return None


# ---- verl's worker: the arguments of the coroutine behind a task ----
def task_arguments(task: asyncio.Task, frames: tuple[str, ...]) -> dict[str, Any] | None:
    """The local variables of the coroutine behind ``task`` when it is one of ``frames`` (verl's
    per-sample coroutines; under Ray, the method Ray's tracing wrapper holds, its arguments bound
    to its signature); None for any other task."""
    frame = getattr(task.get_coro(), "cr_frame", None)
    if frame is None:
        return None
    local = frame.f_locals
    if frame.f_code.co_name in frames:
        return local
    if "_kwargs" not in local:  # (checked first: outside verl this runs once per rollout)
        return None
    # Ray wraps an actor's methods (``_resume_span`` in ``ray.util.tracing``): the coroutine is the
    # wrapper's, holding the method and its arguments.
    method = local.get("method")
    if getattr(method, "__name__", None) not in frames or not isinstance(local.get("_kwargs"), dict):
        return None
    try:
        return _signature(method).bind(local.get("self"), *local.get("_args", ()), **local["_kwargs"]).arguments
    except TypeError:
        return None


@functools.lru_cache(maxsize=8)
def _signature(method: Any) -> inspect.Signature:
    return inspect.signature(method)


# ---- verl's registry and config fields ----
def agent_loop_registry() -> dict[str, dict[str, Any]]:
    """verl's registry of agent loops by name (``@register``): name -> its Hydra entry."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    return _agent_loop_registry


def plain_config(node: Any) -> dict[str, Any]:
    """A node of verl's config (OmegaConf), or any mapping, as a plain dict; None as {}."""
    if node is None:
        return {}
    if type(node) is dict:
        return node
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(node):
            return dict(OmegaConf.to_container(node, resolve=True))
    except ImportError:
        pass
    return dict(node)


@functools.cache
def multi_turn_keys() -> frozenset[str]:
    """The fields of verl's ``MultiTurnConfig``, read from its source: importing verl takes seconds,
    and a config is checked before anything heavy is loaded."""
    spec = importlib.util.find_spec("verl")  # a top-level package: found, not imported
    source = Path(spec.submodule_search_locations[0]) / "workers" / "config" / "rollout.py" if spec else None
    try:
        tree = ast.parse(source.read_text()) if source else None
    except (OSError, SyntaxError):
        tree = None
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.ClassDef) and node.name == "MultiTurnConfig":
            return frozenset(
                n.target.id
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and not n.target.id.startswith("_")
            )
    from verl.workers.config.rollout import MultiTurnConfig  # its layout changed: ask it

    return frozenset(f.name for f in dataclasses.fields(MultiTurnConfig))


# ---- MLflow ----
def discard_open_mlflow_trace() -> None:
    """Drop the MLflow trace of the span active here, unexported (verl's own, opened before
    rollscope took over its tracing)."""
    import mlflow
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    span = mlflow.get_current_active_span()
    if span is not None:  # (the trace manager keys traces by OpenTelemetry's trace id)
        InMemoryTraceManager.get_instance().pop_trace(span._span.get_span_context().trace_id)


# ---- the contracts: one check per internal ----
def _rollout_trace() -> None:
    mod = importlib.import_module(ROLLOUT_TRACE)
    for name in ("_trace_enabled", "_trace_attributes"):
        assert isinstance(getattr(mod, name, None), ContextVar), f"{ROLLOUT_TRACE}.{name} is not a ContextVar"
    config = mod.RolloutTraceConfig
    for name in ("_instance", "_initialized", "backend", "max_samples_per_step_per_worker", "get_instance"):
        assert hasattr(config, name), f"RolloutTraceConfig.{name} is gone"


def _rollout_trace_op() -> None:
    from verl.utils.rollout_trace import rollout_trace_op

    async def method(self: Any) -> None: ...

    assert verl_trace_wrapper(rollout_trace_op(method)) is method, "rollout_trace_op's wrapper is not recognised"


def _worker_frames() -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    run = getattr(AgentLoopWorker, RUN_FRAME, None)
    assert inspect.iscoroutinefunction(run), f"AgentLoopWorker.{RUN_FRAME} is not a coroutine function"
    params = inspect.signature(run).parameters
    missing = [p for p in RUN_ARGUMENTS if p not in params]
    assert not missing, f"AgentLoopWorker.{RUN_FRAME} has no {', '.join(missing)} (has {', '.join(params)})"
    assert params["kwargs"].kind is inspect.Parameter.VAR_KEYWORD, f"AgentLoopWorker.{RUN_FRAME}'s kwargs"


def _tq_worker_frames() -> None:
    try:
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    except ImportError:  # the TransferQueue worker's own dependencies are not installed
        return
    run = getattr(AgentLoopWorkerTQ, PROMPT_FRAME, None)
    assert inspect.iscoroutinefunction(run), f"AgentLoopWorkerTQ.{PROMPT_FRAME} is not a coroutine function"
    assert "trajectory" in inspect.signature(run).parameters, f"AgentLoopWorkerTQ.{PROMPT_FRAME} has no trajectory"


def _registry() -> None:
    registry = agent_loop_registry()
    assert isinstance(registry, dict), "_agent_loop_registry is not a dict"
    assert all("_target_" in entry for entry in registry.values()), "a registry entry has no _target_"


def _multi_turn() -> None:
    from verl.workers.config.rollout import MultiTurnConfig

    assert multi_turn_keys() == {f.name for f in dataclasses.fields(MultiTurnConfig) if not f.name.startswith("_")}


def _trainer_steps() -> None:
    v0, v1 = importlib.import_module(V0_TRAINER), importlib.import_module(V1_TRAINER)
    assert list(inspect.signature(getattr(v0.RayPPOTrainer, V0_UPDATE_ACTOR)).parameters) == ["self", "batch"], (
        f"RayPPOTrainer.{V0_UPDATE_ACTOR}(self, batch) changed"
    )
    old_log_prob = getattr(v0.RayPPOTrainer, V0_OLD_LOG_PROB)
    assert list(inspect.signature(old_log_prob).parameters) == ["self", "batch"] and '"entropys"' in inspect.getsource(
        old_log_prob
    ), f"RayPPOTrainer.{V0_OLD_LOG_PROB}(self, batch) no longer returns the entropies"
    assert list(inspect.signature(getattr(v1.PPOTrainer, V1_COMPUTE_ADVANTAGE)).parameters)[:3] == [
        "self",
        "batch",
        "metrics",
    ], f"PPOTrainer.{V1_COMPUTE_ADVANTAGE}(self, batch, metrics) changed"
    found = getattr(v1, V1_MULTI_TRAJECTORY_ADVANTAGES, None)
    assert callable(found), f"{V1_TRAINER}.{V1_MULTI_TRAJECTORY_ADVANTAGES} is gone"


def _tracking() -> None:
    """``Tracking`` keeps its loggers by name in ``self.logger``, W&B's as the ``wandb`` module."""
    tracking = importlib.import_module(TRACKING)
    source = inspect.getsource(tracking.Tracking.__init__)
    assert 'self.logger["wandb"] = wandb' in source, "Tracking no longer keeps wandb as self.logger['wandb']"


def _mlflow_trace_manager() -> None:
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    assert callable(getattr(InMemoryTraceManager.get_instance(), "pop_trace", None)), "InMemoryTraceManager.pop_trace"


# internal -> its check (each raises AssertionError or ImportError when the internal moved)
CONTRACTS: dict[str, Callable[[], None]] = {
    "verl's tracer: its ContextVars and config singleton": _rollout_trace,
    "verl's rollout_trace_op wrapper, recognised": _rollout_trace_op,
    f"the arguments of AgentLoopWorker.{RUN_FRAME}": _worker_frames,
    f"the arguments of AgentLoopWorkerTQ.{PROMPT_FRAME}": _tq_worker_frames,
    "verl's agent loop registry": _registry,
    "MultiTurnConfig's fields, read from its source": _multi_turn,
    "the trainers' private steps the training join wraps": _trainer_steps,
    "MLflow's in-memory trace manager": _mlflow_trace_manager,
    "verl's Tracking: the W&B run it starts": _tracking,
}
