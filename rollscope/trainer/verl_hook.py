"""On verl's driver: join what training did with each trajectory to the trajectory rollscope stored.

verl imports this module in every process (an entry point in verl's ``verl.plugins`` group), so
on the guide's path — ``trace.backend=...`` and nothing else — its trainer is joined too.
Importing it touches nothing of verl: it waits for verl's trainer modules to be imported and
then wraps, in the trainer verl runs,

- v1 (default): ``PPOTrainer``'s advantage step and the multi-trajectory advantage function it
  calls (``_verl.V1_COMPUTE_ADVANTAGE``, ``_verl.V1_MULTI_TRAJECTORY_ADVANTAGES``), whose result
  holds the step's uid, masks, scores, both log-probs and advantages;
- v0: ``RayPPOTrainer``'s actor update (``_verl.V0_UPDATE_ACTOR``), whose batch holds the same,
  and its old-log-prob pass (``_verl.V0_OLD_LOG_PROB``), whose per-token entropies verl drops
  once it has averaged them (v1 keeps them in the TransferQueue, read with the trajectory ids);
- both: ``fit``, which waits at its end (bounded) until every step's records are handed on;
- verl's ``Tracking``: the W&B run it starts is published to the rollout workers (``wandb_run``).

The join key is rollscope's trajectory id, which the traced loop puts in its output's
``extra_fields`` (``agentloops.verl_run.TRAJECTORY_KEY``): verl carries those into the batch (v0's
``non_tensor_batch``; v1's TransferQueue, read for the step's keys). On the trainer's thread the
hook only keeps references to the step's tensors (no copy, no GPU sync, no pass over them); a
thread of its own computes the records (``training_record``) and sends them as late updates
through rollscope's tracing, started from verl's own ``trace.*`` keys in this process.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from rollscope import _verl
from rollscope._import_hooks import after_import

log = logging.getLogger("rollscope.trainer")

_V0, _V1 = _verl.V0_TRAINER, _verl.V1_TRAINER
DRAIN_TIMEOUT_S = 120.0  # at the end of fit: how long the last steps' records may take to go out
# At the end of fit, how long records a backend holds until their trajectory's trace arrives from a
# rollout worker (MLflow tags the worker's trace) may wait for it, re-flushed every _JOIN_POLL_S.
JOIN_WAIT_S = 60.0
_JOIN_POLL_S = 0.5
_WRAPPED = "__rollscope_joined__"


class _Recorder:
    """The thread that turns captured steps into records and sends them."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.config: Any = None
        self.sent = 0
        self.failed = 0

    def submit(self, config: Any, make_arrays: Any) -> None:
        with self.lock:
            if self.thread is None:
                self.config = config
                self.thread = threading.Thread(target=self._run, name="rollscope-training-record", daemon=True)
                self.thread.start()
        self.jobs.put(make_arrays)

    def drain(self, timeout: float = DRAIN_TIMEOUT_S) -> None:
        """Wait until every submitted step is sent and flushed (called when ``fit`` ends)."""
        if self.thread is None:
            return
        done = threading.Event()
        self.jobs.put(done)
        if not done.wait(timeout):
            log.warning("rollscope: training records still being written after %.0f s; the rest may be lost", timeout)

    def _run(self) -> None:
        from rollscope.tracing import get_tracer, init_from_verl_config
        from rollscope.trainer.training_record import records

        tracer = None
        try:
            tracer = get_tracer() or init_from_verl_config(self.config)
        except Exception as exc:  # a tracing setup error never fails training
            log.error("rollscope: training records not recorded: %s", exc)
        while True:
            job = self.jobs.get()
            if isinstance(job, threading.Event):
                if tracer is not None:
                    flush_until_joined(tracer)
                job.set()
                continue
            if tracer is None:
                continue
            try:
                for trajectory_id, record in records(job()):
                    tracer.training(trajectory_id, record)
                    self.sent += 1
            except Exception as exc:  # an unexpected batch layout: said once per step, training goes on
                self.failed += 1
                log.warning("rollscope: a step's training records not recorded: %s: %s", type(exc).__name__, exc)


recorder = _Recorder()


def flush_until_joined(tracer: Any, wait_s: float = JOIN_WAIT_S) -> int:
    """Flush until no backend holds a record waiting for its trajectory's trace, or ``wait_s``
    passed; returns how many still wait. The last step's traces may still be on their way from
    the rollout workers when ``fit`` ends, and Ray ends this process (its sidecar with it) soon
    after: a record still waiting then would be lost, not counted."""
    deadline = time.monotonic() + wait_s
    while True:
        tracer.flush()
        waiting = sum(s.get("training_waiting", 0) for s in tracer.stats()["backends"].values())
        if not waiting or time.monotonic() >= deadline:
            return waiting
        time.sleep(_JOIN_POLL_S)


def _traced(config: Any) -> bool:
    """Whether rollscope records this run: verl's trace backend (or rollscope's variable) is set."""
    trace = config.actor_rollout_ref.rollout.get("trace") or {}
    return bool(os.environ.get("ROLLSCOPE_TRACE_BACKEND") or trace.get("backend"))


def _column(non_tensor: dict[str, Any], key: str, rows: int) -> list[Any]:
    values = non_tensor.get(key)
    return [None] * rows if values is None else list(values)


def capture_v0(trainer: Any, batch: Any) -> None:
    """v0: the batch verl's actor update is given (verl's DataProto, advantages computed)."""
    config = trainer.config
    if _traced(config):
        entropy = getattr(_current, "entropy", None)
        _current.entropy = None
        recorder.submit(config, v0_step(batch, trainer.global_steps, str(config.algorithm.adv_estimator), entropy))


def v0_step(batch: Any, step: int, estimator: str, entropy: Any = None) -> Callable[[], Any]:
    """The step's arrays from a v0 batch (and the entropies of its old-log-prob pass), built when
    called (on the recorder's thread): until then only references to the batch's tensors are held."""
    from rollscope.semconv import TRAJECTORY_KEY

    tensors, non_tensor = batch.batch, dict(batch.non_tensor_batch)

    def arrays() -> Any:
        from rollscope.trainer.training_record import StepArrays

        responses = tensors["responses"]
        rows, width = responses.shape
        return StepArrays(
            step=step,
            trajectory_ids=_column(non_tensor, TRAJECTORY_KEY, rows),
            uids=list(non_tensor["uid"]),
            response_mask=tensors["response_mask"],
            advantages=tensors["advantages"],
            scores=tensors["token_level_scores"],
            rewards=tensors["token_level_rewards"],
            lengths=tensors["attention_mask"][:, -width:].sum(-1),
            old_log_probs=tensors.get("old_log_probs"),
            rollout_log_probs=tensors.get("rollout_log_probs"),
            min_versions=_column(non_tensor, "min_global_steps", rows),
            max_versions=_column(non_tensor, "max_global_steps", rows),
            estimator=estimator,
            entropy=entropy if entropy is not None and tuple(entropy.shape) == (rows, width) else None,
            ref_log_probs=tensors.get("ref_log_prob"),
        )

    return arrays


# v1: the trainer and step batch whose advantages are being computed; v0: the step's entropies
_current = threading.local()


def capture_v1(trainer: Any, batch: Any, data: Any) -> None:
    """v1: the DataProto verl's multi-trajectory advantage function returned for ``batch`` (a
    TransferQueue ``KVBatchMeta``: keys and tags). The trajectory ids are read from the
    TransferQueue (the agent loop's ``extra_fields``, one small field per row)."""
    if not _traced(trainer.config):
        return
    import transfer_queue as tq

    from rollscope.semconv import TRAJECTORY_KEY

    try:  # the entropies verl's old-log-prob pass put beside the rows (none where it was bypassed)
        extra = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields", "entropy"]
        )
        entropy = extra["entropy"]
    except Exception:
        extra = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        entropy = None
    fields = extra["extra_fields"]
    fields = fields.tolist() if hasattr(fields, "tolist") else list(fields)
    tensors, tags, step = data.batch, list(batch.tags), trainer.global_steps
    estimator = str(trainer.config.algorithm.adv_estimator)

    def arrays() -> Any:
        import torch

        from rollscope.trainer.training_record import StepArrays

        def plain(f: Any) -> dict:
            return f if isinstance(f, dict) else {}

        return StepArrays(
            step=step,
            trajectory_ids=[plain(f).get(TRAJECTORY_KEY) for f in fields],
            uids=list(data.non_tensor_batch["uid"]),
            response_mask=tensors["response_mask"],
            advantages=tensors["advantages"],
            scores=tensors["token_level_scores"],
            rewards=tensors["token_level_rewards"],
            lengths=torch.tensor([int(t.get("response_len") or 0) for t in tags]),
            old_log_probs=tensors.get("old_log_probs"),
            rollout_log_probs=tensors.get("rollout_log_probs"),
            min_versions=[t.get("min_global_steps") for t in tags],
            max_versions=[t.get("max_global_steps") for t in tags],
            estimator=estimator,
            entropy=None if entropy is None else _padded(entropy, tensors["response_mask"].shape),
            ref_log_probs=tensors.get("ref_log_prob"),
        )

    recorder.submit(trainer.config, arrays)


def _padded(values: Any, shape: Any) -> Any:
    """A v1 per-token field (nested: one row per response, as long as it) as a right-padded
    tensor of ``shape``, the layout of the step's other arrays."""
    import torch

    rows = values.unbind(0) if getattr(values, "is_nested", False) else list(values)
    out = torch.zeros(tuple(shape), dtype=torch.float32)
    for i, row in enumerate(rows):
        n = min(len(row), shape[-1])
        out[i, :n] = row[:n].float()
    return out


def _guarded(capture: Any, *args: Any) -> None:
    try:
        capture(*args)
    except Exception as exc:  # the join never fails a training step
        log.warning("rollscope: a step's training records not captured: %s: %s", type(exc).__name__, exc)


def _wrap_fit(cls: type) -> None:
    fit = cls.fit

    @functools.wraps(fit)
    def joined_fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fit(self, *args, **kwargs)
        finally:
            recorder.drain()

    cls.fit = joined_fit


def patch_v0(module: Any) -> None:
    cls = module.RayPPOTrainer
    if getattr(cls, _WRAPPED, False):
        return
    _verl.check_version()
    update_actor = getattr(cls, _verl.V0_UPDATE_ACTOR)

    @functools.wraps(update_actor)
    def joined_update_actor(self: Any, batch: Any) -> Any:
        _guarded(capture_v0, self, batch)
        return update_actor(self, batch)

    setattr(cls, _verl.V0_UPDATE_ACTOR, joined_update_actor)
    old_log_prob = getattr(cls, _verl.V0_OLD_LOG_PROB)

    @functools.wraps(old_log_prob)
    def entropy_keeping_old_log_prob(self: Any, batch: Any) -> Any:
        result = old_log_prob(self, batch)
        try:  # verl pops the entropies once averaged: keep a reference for this step's records
            output = result[0] if isinstance(result, tuple) else result
            _current.entropy = output.batch.get("entropys") if _traced(self.config) else None
        except Exception:  # an output of another shape: the records go without entropy
            _current.entropy = None
        return result

    setattr(cls, _verl.V0_OLD_LOG_PROB, entropy_keeping_old_log_prob)
    _wrap_fit(cls)
    setattr(cls, _WRAPPED, True)


def patch_v1(module: Any) -> None:
    cls = module.PPOTrainer
    if getattr(cls, _WRAPPED, False):
        return
    _verl.check_version()
    compute = getattr(cls, _verl.V1_COMPUTE_ADVANTAGE)
    advantages = getattr(module, _verl.V1_MULTI_TRAJECTORY_ADVANTAGES)

    @functools.wraps(compute)
    def joined_compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
        _current.step = (self, batch)
        try:
            return compute(self, batch, metrics)
        finally:
            _current.step = None

    @functools.wraps(advantages)
    def joined_advantages(data: Any, *args: Any, **kwargs: Any) -> Any:
        result = advantages(data, *args, **kwargs)
        current = getattr(_current, "step", None)
        if current is not None:
            _guarded(capture_v1, current[0], current[1], result)
        return result

    setattr(cls, _verl.V1_COMPUTE_ADVANTAGE, joined_compute_advantage)
    setattr(module, _verl.V1_MULTI_TRAJECTORY_ADVANTAGES, joined_advantages)
    _wrap_fit(cls)
    setattr(cls, _WRAPPED, True)


def patch_tracking(module: Any) -> None:
    """verl's ``Tracking`` (its loggers, made as ``fit`` starts): once it has started a W&B run,
    that run is published to the rollout workers (``wandb_run``)."""
    cls = module.Tracking
    if getattr(cls, _WRAPPED, False):
        return
    init = cls.__init__

    @functools.wraps(init)
    def publishing_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            wandb = getattr(self, "logger", {}).get("wandb")
            if wandb is not None and getattr(wandb, "run", None) is not None:
                from rollscope.tracing import wandb_run

                wandb_run.publish(wandb.run)
        except Exception as exc:  # the run is not linked; training as it was
            log.warning("rollscope: the W&B run not linked to the traces: %s: %s", type(exc).__name__, exc)

    cls.__init__ = publishing_init
    setattr(cls, _WRAPPED, True)


_PATCHES = {_V0: patch_v0, _V1: patch_v1, _verl.TRACKING: patch_tracking}


def _patching(name: str, patch: Callable[[Any], None]) -> Callable[[Any], None]:
    def patch_or_warn(module: Any) -> None:
        try:
            patch(module)
        except Exception as exc:  # a verl whose trainer looks different: training as it was
            log.warning("rollscope: verl's trainer (%s) not joined: %s", name, exc)

    return patch_or_warn


def install() -> None:
    """Join verl's trainer in this process: now for a trainer module already imported, on import
    for the others (no verl module is imported early). Idempotent."""
    for name, patch in _PATCHES.items():
        after_import(name, _patching(name, patch))


install()
