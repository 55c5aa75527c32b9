"""Test doubles: trace backends that fail the way remote ones do (for fault tests and benchmarks)."""

from __future__ import annotations

from typing import Any


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
