"""Helpers for tests and benchmarks (yours and rollscope's); production code never imports them.

- ``make_model_dir`` and ``compose_config``: verl's real agent-loop classes on a CPU — a model
  directory made on the spot and verl's own packaged ``ppo_trainer`` config composed with Hydra.
  Pair them with ``rollscope.llm.ScriptedLLM``.
- ``register_fault_backends``: trace backends that fail the way remote ones do.
- ``replay``: a stored trajectory as a regression test.
- ``rollscope.testing.weave_server``: W&B's servers for the real weave client, in process.
"""

from __future__ import annotations

from typing import Any

from rollscope.llm.tokenizer_dir import make_model_dir
from rollscope.runner.trainer_config import compose_config

__all__ = ["compose_config", "make_model_dir", "register_fault_backends", "replay"]


# ---- trace backends that fail the way remote ones do (test doubles, for fault tests and benchmarks) ----


def register_fault_backends(delay_s: float = 5.0) -> list[str]:
    """Register ``fault-down``, ``fault-slow`` and ``fault-raising``; returns their names.

    fault-down: every call fails as a collector that is not there (connection refused).
    fault-slow: every call takes ``delay_s`` (a server answering in 5 s).
    fault-raising: every call raises an unexpected error (a bug in a backend).
    """
    from rollscope.tracing.backends import TraceBackend, register_backend

    class DownBackend(TraceBackend):
        name = "fault-down"

        def on_trajectory_start(self, trajectory: Any) -> None:
            raise ConnectionRefusedError(111, "Connection refused (test double: collector down)")

        on_span_end = on_trajectory_end = on_trajectory_start

    class SlowBackend(TraceBackend):
        name = "fault-slow"

        def on_trajectory_start(self, trajectory: Any) -> None:
            import time

            time.sleep(delay_s)

        on_span_end = on_trajectory_end = on_trajectory_start

    class RaisingBackend(TraceBackend):
        name = "fault-raising"

        def on_trajectory_start(self, trajectory: Any) -> None:
            raise RuntimeError("backend bug (test double)")

        on_span_end = on_trajectory_end = on_trajectory_start

    for cls in (DownBackend, SlowBackend, RaisingBackend):
        register_backend(cls.name, cls)
    return [DownBackend.name, SlowBackend.name, RaisingBackend.name]


def replay(trajectory_id: str, store: str | None = None, *, config: str | None = None, tokenizer: Any = None) -> Any:
    """A stored trajectory as a regression test: every model turn from the record, tools, loop and
    reward run for real; the outcome's ``ok`` is False, with ``differences`` naming each changed
    tool result, final response or reward (``rollscope replay ID --check``)."""
    from rollscope.runner.replay import replay as run_replay

    return run_replay(trajectory_id, store=store, config=config, check=True, tokenizer=tokenizer)

