"""The W&B run a trajectory belongs to: what ties its Weave calls to the training run and step.

verl's trainer starts its W&B run (``trainer.logger=[..., 'wandb']``: ``verl.utils.tracking``'s
``wandb.init``) in the trainer's process, after its rollout workers exist; the trajectories are
traced in those workers, where no ``wandb.run`` is. So the trainer's process publishes the run as
it starts (``publish``, from rollscope's verl plugin, ``verl_hook``): in its environment and in
Ray's key-value store, which every worker of the cluster reads (``current``). Each trajectory
opened under verl carries it as ``ATTRIBUTE`` ("entity/project/run_id"); the Weave backend writes
the run and the trajectory's step (verl's global step, the step the trainer logs its metrics at)
into every call's own ``wb_run_id`` and ``wb_run_step``. Elsewhere ``ROLLSCOPE_WANDB_RUN`` names
the run (``rollscope run``'s ``wandb_run=`` sets it).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from rollscope.semconv import WANDB_RUN

log = logging.getLogger("rollscope.trainer")

ATTRIBUTE = WANDB_RUN  # a trajectory's attribute: its W&B run, "entity/project/run_id"
ENV = "ROLLSCOPE_WANDB_RUN"
_KEY = b"rollscope/wandb_run"
# While no run is published (a trainer without a wandb logger: the usual case), how often a worker
# asks Ray's store again: the ask is a blocking round trip on the rollout's event loop, and verl
# starts its logger before the first rollout, so the first ask after that finds it.
_RECHECK_S = 30.0
_found: dict[str, Any] = {"run": None, "checked": -_RECHECK_S}


def path_of(run: Any) -> str | None:
    """``entity/project/run_id`` of a wandb run (an offline run's entity may be empty)."""
    run_id = getattr(run, "id", None)
    if not run_id:
        return None
    return f"{getattr(run, 'entity', None) or ''}/{getattr(run, 'project', None) or ''}/{run_id}"


def publish(run: Any) -> None:
    """Make ``run`` (a ``wandb.run``) the run of every trajectory traced from now on, in this
    process and, under Ray, in every worker of the cluster."""
    path = path_of(run)
    if path is None:
        return
    os.environ[ENV] = path
    _found["run"] = path
    try:
        import ray
        from ray.experimental import internal_kv

        if ray.is_initialized():
            internal_kv._internal_kv_put(_KEY, path.encode(), overwrite=True)
    except Exception as exc:  # no Ray, or its store not reachable: this process's trajectories only
        log.info("rollscope: the W&B run %s not shared with Ray's workers (%s)", path, exc)


def current() -> str | None:
    """The W&B run of a trajectory opened now: ``ROLLSCOPE_WANDB_RUN``, else what the trainer
    published in Ray's store (asked at most every ``_RECHECK_S`` until found, then kept)."""
    named = os.environ.get(ENV)
    if named:
        return named
    if _found["run"] is not None:
        return _found["run"]
    now = time.monotonic()
    if now - _found["checked"] < _RECHECK_S:
        return None
    _found["checked"] = now
    try:
        import ray
        from ray.experimental import internal_kv

        if ray.is_initialized():
            value = internal_kv._internal_kv_get(_KEY)
            if value:
                _found["run"] = value.decode()
    except Exception:  # no Ray here: no run
        return None
    return _found["run"]


def run_id(path: Any) -> str | None:
    """The run id of ``path`` (``entity/project/run_id``, or an id alone)."""
    if not isinstance(path, str) or not path.strip("/"):
        return None
    return path.rstrip("/").rsplit("/", 1)[-1]
