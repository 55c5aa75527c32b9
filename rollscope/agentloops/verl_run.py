"""rollscope inside verl's own ``AgentLoopWorker``: starting from its config, taking over its tracing,
and reading what it knows about the trajectory being run.

verl's worker builds one agent loop per sample inside a coroutine of its own (``_verl.RUN_FRAME``:
``(sampling_params, trajectory, *, agent_name, trace, **row)``), each in its own asyncio task, all
of a batch's tasks created before any runs. The loop itself is handed neither the step nor the
batch, and verl's ``rollout_trace_attr`` shares them only when verl chose to trace the sample (its
unseeded per-worker choice). So the loop reads them where verl keeps them: the ``trajectory`` and
``agent_name`` arguments of that coroutine behind each task (``_verl.task_arguments``). That lets the loop's own wrapper
open the trajectory, choose the traced samples deterministically, and keep the trajectory open
until verl has scored it (``VerlTrajectory``), under verl's ``AgentLoopWorker`` and its
TransferQueue worker alike.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from rollscope import _verl
from rollscope.semconv import TRAJECTORY_KEY
from rollscope.tracing import Trajectory, init_from_verl_config, instrument, rollout_trace_attr, wandb_run

log = logging.getLogger("rollscope.agentloops")

TAKEN_OVER = "rollscope"  # verl's trace backend name once rollscope records for it
_started_from: list[Any] = []  # the trainer config tracing was started from in this process


class VerlRun:
    """What verl's worker passed to its per-sample coroutine for one sample."""

    __slots__ = ("agent_name", "rollout_n", "sample_index", "step", "validate")

    def __init__(self, trajectory: dict[str, Any], agent_name: Any, session_id: Any = None) -> None:
        self.step = trajectory.get("step")
        self.sample_index = trajectory.get("sample_index")
        # (verl's TransferQueue worker shares one trajectory dict among a prompt's sessions)
        self.rollout_n = trajectory.get("rollout_n") if session_id is None else session_id
        self.validate = bool(trajectory.get("validate", False))
        self.agent_name = agent_name if isinstance(agent_name, str) else None


def _run_of(task: asyncio.Task, frames: tuple[str, ...] = (_verl.RUN_FRAME,)) -> VerlRun | None:
    """The sample a task of verl's worker runs: the arguments of its per-sample coroutine (or, for
    the TransferQueue worker's batch, its per-prompt one)."""
    local = _verl.task_arguments(task, frames)
    if local is None:
        return None
    trajectory = local.get("trajectory")
    if not isinstance(trajectory, dict) or "sample_index" not in trajectory:
        return None
    kwargs = local.get("kwargs")
    session_id = kwargs.get("session_id") if isinstance(kwargs, dict) else None
    return VerlRun(trajectory, local.get("agent_name"), session_id)


def current_verl_run() -> VerlRun | None:
    """The sample verl's worker is running in this task (called from a loop's ``run``, so inside
    an event loop); None outside verl's worker."""
    task = asyncio.current_task()
    return _run_of(task) if task is not None else None


def batch_sample_indices(run: VerlRun) -> list[Any]:
    """The sample indices of every task of ``run``'s step that this worker is running now: the
    worker's share of the batch (all its tasks exist before the first one runs). A sample may be
    listed several times (one task per rollout)."""
    indices = []
    for task in asyncio.all_tasks():
        other = _run_of(task, (_verl.RUN_FRAME, _verl.PROMPT_FRAME))
        if other is not None and other.step == run.step and other.validate == run.validate:
            indices.append(other.sample_index)
    return indices


def plan_samples(run: VerlRun) -> None:
    """Choose this step's traced samples from the worker's batch, once per step (deterministic,
    whole GRPO groups: ``TraceSampler``)."""
    if not instrument.has_plan(run.step):
        instrument.plan_samples(run.step, batch_sample_indices(run))


class VerlTrajectory:
    """The trajectory of one sample verl's worker runs, with verl's attributes (traced when this
    step's plan picked the sample). It stays open after the loop's ``run`` returns: verl scores
    the output afterwards, in the same per-sample task (``_compute_score``, its reward
    loop), and the trajectory ends when that task does — with verl's reward and its components
    (``reward_extra_info``) on it, in every backend — without holding up the batch."""

    __slots__ = ("block", "output", "run")

    def __init__(self, run: VerlRun, name: str) -> None:
        self.run = run
        self.block = rollout_trace_attr(
            sample_index=run.sample_index,
            step=run.step,
            rollout_n=run.rollout_n,
            validate=run.validate,
            name=run.agent_name or name,
            opened_by="verl",
            **_wandb_run(),
        )
        self.output: Any = None

    def __enter__(self) -> Trajectory | None:
        plan_samples(self.run)
        return self.block.__enter__()

    def scored_later(self, output: Any) -> None:
        """The loop's output, which verl scores once ``run`` has returned it; it carries the
        trajectory's id into verl's batch (``TRAJECTORY_KEY``)."""
        self.output = output
        extra = getattr(output, "extra_fields", None)
        if self.block.trajectory is not None and type(extra) is dict:
            extra[TRAJECTORY_KEY] = self.block.trajectory.id

    def __exit__(self, *exc_info: Any) -> None:
        trajectory, task = self.block.trajectory, asyncio.current_task()
        if trajectory is not None and self.output is not None and exc_info[1] is None and task is not None:
            self.block.hold()
            task.add_done_callback(functools.partial(_close_scored, trajectory, self.output))
        self.block.__exit__(*exc_info)


def _wandb_run() -> dict[str, str]:
    """The trainer's W&B run, as the trajectory's attribute, where it has one (``wandb_run``)."""
    found = wandb_run.current()
    return {wandb_run.ATTRIBUTE: found} if found else {}


def _close_scored(trajectory: Trajectory, output: Any, task: asyncio.Task) -> None:
    """End a held trajectory once verl's per-sample task is done: verl's reward on it if
    verl scored the output, the task's error if it failed after ``run`` (postprocessing, reward)."""
    tracer = instrument.state.tracer
    if tracer is None:
        return
    error = (
        asyncio.CancelledError("verl's task was cancelled before verl scored it")
        if task.cancelled()
        else task.exception()
    )
    reward = getattr(output, "reward_score", None)
    extra = (getattr(output, "extra_fields", None) or {}).get("reward_extra_info") or {}
    if reward is not None and (reward != trajectory.reward or extra):
        try:
            trajectory.reward = float(reward)
            tracer.reward(trajectory.id, trajectory.reward, {"source": "verl_reward", **extra})
        except (TypeError, ValueError) as exc:  # an odd score must not fail the batch
            log.warning("verl's reward %r not recorded: %s", reward, exc)
    tracer.close_trajectory(trajectory, error)


def start_from_trainer_config(trainer_config: Any) -> None:
    """Start tracing once per process from the trainer config verl built the loop with, when
    ``actor_rollout_ref.rollout.trace.backend`` is set; then take over verl's own tracing."""
    if instrument.state.tracer is not None or (_started_from and _started_from[0] is trainer_config):
        return
    _started_from[:] = [trainer_config]
    try:
        tracer = init_from_verl_config(trainer_config)
    except Exception as exc:  # a tracing setup error must not fail training: say it once, loudly
        log.error("rollscope tracing not started from verl's trace config: %s", exc)
        return
    if tracer is not None:
        take_over_verl_tracing()


def take_over_verl_tracing() -> None:
    """rollscope records every trajectory of this process, so verl's own tracing steps aside:

    - its backend name becomes ``"rollscope"``: verl's ``rollout_trace_attr`` still shares the
      trajectory's attributes but opens nothing in Weave or MLflow (with ``mlflow`` it would open
      a second trace per trajectory), and its decorators record nothing;
    - its unseeded sample choice is switched off: rollscope chooses (``plan_samples``).

    A trajectory verl already opened an MLflow span for (the one during which the first loop of
    the process was built) has that span discarded, so it does not become a second trace.
    """
    _verl.check_version()  # an untested verl is said once
    if _verl.take_over_tracing(TAKEN_OVER) == "mlflow":
        _verl.discard_open_mlflow_trace()
