"""The rest of verl's public tracing API, on rollscope's tracer, so that code written for verl's
tracer (``verl.utils.rollout_trace``, ``verl.experimental.agent_loop.get_trajectory_info``) moves
over by changing its import.

``RolloutTraceConfig`` keeps verl's semantics: a singleton initialised once (a second ``init`` is
ignored until ``reset``), ``backend`` naming what traces — here any of rollscope's backends or a
comma list of them; a name that is none (verl's tests use ``"dummy"``) traces nothing, as verl's
does —, ``get_client`` answering the object that traces (rollscope's ``Tracer``; None when nothing
does). ``reset`` also ends the tracer the config started, so a new ``init`` takes effect.
"""

from __future__ import annotations

from typing import Any

from rollscope.tracing._runtime import Tracer, get_tracer, init_tracing, shutdown_tracing
from rollscope.tracing.backends import available_backends, parse_backend_names


class RolloutTraceConfig:
    """verl's ``RolloutTraceConfig``: project, experiment, backend, token2text and sampling for
    every trace of this process, set once."""

    _instance: RolloutTraceConfig | None = None
    backend: str | None = None
    client: Tracer | None = None
    token2text: bool = False
    _initialized: bool = False
    project_name: str | None = None
    experiment_name: str | None = None
    max_samples_per_step_per_worker: int | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> RolloutTraceConfig:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._initialized = False
        return cls._instance

    @classmethod
    def get_instance(cls) -> RolloutTraceConfig:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    @classmethod
    def init(
        cls,
        project_name: str,
        experiment_name: str,
        backend: str | None,
        token2text: bool = False,
        max_samples_per_step_per_worker: int | None = None,
    ) -> None:
        config = cls.get_instance()
        if config._initialized:
            return
        config.backend, config.token2text = backend, token2text
        config.project_name, config.experiment_name = project_name, experiment_name
        config.max_samples_per_step_per_worker = max_samples_per_step_per_worker
        names = parse_backend_names(backend)
        known = set(available_backends())
        config.client = None
        if names and all(n in known for n in names):
            config.client = init_tracing(
                backend=names,
                project=project_name,
                experiment=experiment_name,
                token2text=token2text,
                max_samples_per_step_per_worker=max_samples_per_step_per_worker,
            )
        config._initialized = True

    @classmethod
    def get_backend(cls) -> str | None:
        return cls.get_instance().backend

    @classmethod
    def get_client(cls) -> Tracer | None:
        return cls.get_instance().client

    @classmethod
    def enable_token2text(cls) -> bool:
        return cls.get_instance().token2text

    @classmethod
    def reset(cls) -> None:
        instance, cls._instance = cls._instance, None
        if instance is not None and instance.client is not None and instance.client is get_tracer():
            shutdown_tracing()


async def get_trajectory_info(step: int, index: list[Any], validate: bool) -> list[dict[str, Any]]:
    """verl's ``get_trajectory_info``: each item of a batch as a trajectory's attributes — its
    step, its sample index, its rollout number (0, 1, ... along a run of equal indices: a GRPO
    group's rollouts sit next to each other in verl's batch) and whether it validates."""
    info, rollout_n = [], 0
    for i, sample in enumerate(index):
        rollout_n = rollout_n + 1 if i > 0 and index[i - 1] == sample else 0
        info.append({"step": step, "sample_index": sample, "rollout_n": rollout_n, "validate": validate})
    return info
