"""Start rollscope tracing from a verl training config, reading verl's own keys.

verl's ``TraceConfig`` dataclass accepts exactly backend, token2text,
max_samples_per_step_per_worker, project_name and experiment_name, so rollscope's extras live
under their own top-level key (``+rollscope.trace.trace_dir=...``) or in environment variables
(``ROLLSCOPE_TRACE_DIR``, ``ROLLSCOPE_SAMPLE_SEED``, ``ROLLSCOPE_MAX_PAYLOAD_CHARS``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from rollscope import _verl
from rollscope.tracing._runtime import Tracer, get_tracer, init_tracing
from rollscope.tracing.backends import parse_backend_names

VERL_MLFLOW_DEFAULT = "sqlite:////tmp/mlruns.db"
_ENV_EXTRAS = {
    "ROLLSCOPE_SAMPLE_SEED": ("sample_seed", int),
    "ROLLSCOPE_MAX_PAYLOAD_CHARS": ("max_payload_chars", int),
}


def _get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None:
            return default
        if isinstance(node, Mapping) or hasattr(node, "get"):
            node = node.get(part, None)
        else:
            node = getattr(node, part, None)
    return default if node is None else node


def init_from_verl_config(cfg: Any, **overrides: Any) -> Tracer | None:
    """Tracing as ``actor_rollout_ref.rollout.trace.*`` asks; None when no backend is set.

    A tracer already running in this process with the same settings is kept (verl builds one
    AgentLoopWorker per process, but tests and notebooks may call this repeatedly).
    """
    trace = _get(cfg, "actor_rollout_ref.rollout.trace")
    backend = os.environ.get("ROLLSCOPE_TRACE_BACKEND") or _get(trace, "backend")
    if not backend:
        return None
    kwargs: dict[str, Any] = {
        "backend": backend,
        "project": _get(trace, "project_name") or _get(cfg, "trainer.project_name"),
        "experiment": _get(trace, "experiment_name") or _get(cfg, "trainer.experiment_name"),
        "token2text": bool(_get(trace, "token2text", False)),
        "max_samples_per_step_per_worker": _get(trace, "max_samples_per_step_per_worker"),
    }
    for env, (key, cast) in _ENV_EXTRAS.items():
        if os.environ.get(env):
            try:
                kwargs[key] = cast(os.environ[env])
            except ValueError as exc:
                raise ValueError(f"environment variable {env}={os.environ[env]!r}: {exc}") from exc
    kwargs.update(_verl.plain_config(_get(cfg, "rollscope.trace")))
    kwargs.update(overrides)
    if "mlflow" in parse_backend_names(kwargs["backend"]) and "mlflow_tracking_uri" not in kwargs:
        # the store verl's own MLflow tracing writes to (verl's default when the variable is unset)
        kwargs["mlflow_tracking_uri"] = os.environ.get("MLFLOW_TRACKING_URI", VERL_MLFLOW_DEFAULT)
    existing = get_tracer()
    if existing is not None and all(existing.settings.get(k) == v for k, v in kwargs.items()):
        return existing
    return init_tracing(**kwargs)
