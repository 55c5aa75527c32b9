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
import re
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
        return named if run_id(named) is not None else None
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


class RunPathError(ValueError):
    """A W&B run named in a form no W&B run has: the message says what and what is expected."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")  # an entity's or a project's name
_ID = re.compile(r"[A-Za-z0-9_-]+\Z")  # a run's id


def parse(path: Any) -> tuple[str | None, str | None, str]:
    """(entity, project, run id) of ``entity/project/run_id`` (an offline run's entity may be
    empty: ``/project/run_id``), or (None, None, id) of an id alone. Anything else, a ``..``, a
    newline or a fourth part among them, is a ``RunPathError``: a run path reaches Weave's ids and
    filters, and must name one run, never another project's or a path."""
    if not isinstance(path, str):
        raise RunPathError(f"W&B run {path!r}: expected entity/project/run_id or a run id")
    parts = path.split("/")
    if len(parts) == 1 and _ID.match(path):
        return None, None, path
    if len(parts) == 3:
        entity, project, found = parts
        if (not entity or _NAME.match(entity)) and _NAME.match(project) and _ID.match(found):
            return entity or None, project, found
    raise RunPathError(
        f"W&B run {path!r}: expected entity/project/run_id (names of letters, digits, '_', '-', '.'; "
        "an id of letters, digits, '_', '-') or a run id alone"
    )


def run_id(path: Any) -> str | None:
    """The run id of ``path`` (``entity/project/run_id``, or an id alone); None for none or for a
    path no run has (said once)."""
    if path is None or path == "":
        return None
    try:
        return parse(path)[2]
    except RunPathError as exc:
        _say_once(str(exc))
        return None


def link(project_id: str, path: Any) -> str | None:
    """The run as the calls of the Weave project ``project_id`` carry it (``wb_run_id``):
    ``entity/project/run_id``. A run of another W&B project keeps its own path, never re-filed
    under the calls' project; an id alone is taken as the calls' project's run."""
    try:
        entity, project, found = parse(path) if path not in (None, "") else (None, None, "")
    except RunPathError as exc:
        _say_once(str(exc))
        return None
    if not found:
        return None
    own_entity, _, own_project = project_id.partition("/")
    if project is None or (project == own_project and entity in (None, own_entity)):
        return f"{project_id}/{found}"
    return f"{entity or own_entity}/{project}/{found}"


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning("rollscope: %s; the trajectories are not linked to it", message)
