"""``rollscope push``: replay trajectories from the local store into a backend once the network is
there (training clusters often have none).

Idempotent and resumable through a ledger beside the shards (``pushed.sqlite``): a trajectory is
recorded there, per destination (kind, endpoint and project), only after the destination confirmed
it (a flush), so pushing
twice sends nothing twice and an interrupted push resumes where it stopped. Destinations that key
records by id (Weave: call ids derived from rollscope's ids) would not duplicate even without it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from rollscope.semconv import UNREADABLE
from rollscope.store import TraceStore
from rollscope.trajectory.records import TrajectoryRecord

log = logging.getLogger("rollscope.push")

LEDGER = "pushed.sqlite"


class Destination(Protocol):
    def write(self, record: TrajectoryRecord) -> None: ...
    def flush(self) -> None: ...


class BackendDestination:
    """A trace backend fed stored records: the remote backends take a whole trajectory at once
    (``TrajectoryBackend.write``), from a live Trajectory or a stored record alike."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def write(self, record: TrajectoryRecord) -> None:
        self.backend.write(record, record.spans)

    def flush(self) -> None:
        self.backend.flush()


def weave_destination(project: str | None = None, endpoint: str | None = None, client: Any = None) -> Destination:
    from rollscope.tracing.backends.weave import WeaveBackend

    return BackendDestination(WeaveBackend(project=project, weave_project=project, weave_client=client))


def mlflow_destination(project: str | None = None, endpoint: str | None = None) -> Destination:
    from rollscope.tracing.backends.mlflow import MlflowBackend

    return BackendDestination(MlflowBackend(project=project, mlflow_tracking_uri=endpoint))


def otel_destination(project: str | None = None, endpoint: str | None = None) -> Destination:
    from rollscope.tracing.backends.otel import OtelBackend

    return BackendDestination(OtelBackend(project=project, otel_endpoint=endpoint))


DESTINATIONS: dict[str, Callable[..., Destination]] = {
    "mlflow": mlflow_destination,
    "otel": otel_destination,
    "weave": weave_destination,
}


class Ledger:
    """Which trajectories each destination has confirmed (a small SQLite file in the store dir)."""

    def __init__(self, directory: Path) -> None:
        self.db = sqlite3.connect(directory / LEDGER, isolation_level=None)
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS pushed (destination TEXT, trajectory_id TEXT, pushed_at REAL, "
            "PRIMARY KEY (destination, trajectory_id))"
        )

    def done(self, destination: str) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT trajectory_id FROM pushed WHERE destination = ?", [destination])}

    def record(self, destination: str, ids: list[str]) -> None:
        now = time.time()
        self.db.executemany("INSERT OR IGNORE INTO pushed VALUES (?, ?, ?)", [(destination, i, now) for i in ids])

    def close(self) -> None:
        self.db.close()


# Where each kind of destination reads its endpoint when none is given.
_ENDPOINT_ENV = {
    "mlflow": ("MLFLOW_TRACKING_URI",),
    "otel": ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
    "weave": ("WF_TRACE_SERVER_URL",),
}


def ledger_key(to: str, project: str | None = None, endpoint: str | None = None) -> str:
    """A destination as the ledger knows it: its kind, endpoint and project. Pushing to another
    project or server is another destination; the plain kind is the default endpoint and project."""
    endpoint = endpoint or next((os.environ[v] for v in _ENDPOINT_ENV.get(to, ()) if os.environ.get(v)), None)
    return to if not (project or endpoint) else f"{to} {endpoint or '-'} {project or '-'}"


class Skipped(list):
    """The trajectories a push left out, each with why: a row or payload the store could not read
    back (marked ``rollscope.unreadable`` there)."""


def push(
    to: str,
    directory: str | None = None,
    *,
    batch: int = 50,
    destination: Destination | None = None,
    project: str | None = None,
    endpoint: str | None = None,
    skipped: Skipped | None = None,
    **filters: Any,
) -> Iterator[tuple[int, int]]:
    """Push the matching finished trajectories not yet pushed to ``to`` at ``endpoint`` in ``project``
    (None: the destination's defaults); yields (done, total) after each confirmed batch, ``done``
    counting those left out too. A trajectory the store cannot read back costs itself: it is left
    out (``skipped``: (id, why)), said, and tried again by the next push."""
    skipped = Skipped() if skipped is None else skipped
    if destination is None:
        if to not in DESTINATIONS:
            raise ValueError(f"--to {to}: unknown destination (available: {', '.join(DESTINATIONS)})")
        destination = DESTINATIONS[to](project=project, endpoint=endpoint)
    key = ledger_key(to, project, endpoint)
    with TraceStore(directory) as store:
        ledger = Ledger(store.path)
        try:
            done = ledger.done(key)
            todo = [r for r in store.trajectories(**filters) if r.status != "running" and r.id not in done]
            pending: list[str] = []
            for n, record in enumerate(todo, 1):
                problem = _unreadable(record)
                if problem is None:
                    destination.write(record)  # (a destination gone stops the push: the next resumes)
                    pending.append(record.id)
                else:
                    skipped.append((record.id, problem))
                    log.warning("push: trajectory %s left out (%s)", record.id, problem[:300])
                if len(pending) == batch or n == len(todo):
                    destination.flush()
                    ledger.record(key, pending)
                    pending = []
                    yield n, len(todo)
        finally:
            ledger.close()


def _unreadable(record: TrajectoryRecord) -> str | None:
    """What the store could not read back of this trajectory (its row or a span's payload), if any."""
    found = (record.attributes or {}).get(UNREADABLE)
    if found is None:
        found = next((s.attributes[UNREADABLE] for s in record.spans if UNREADABLE in (s.attributes or {})), None)
    return None if found is None else f"not readable in the store: {found}"


def resend_refused(to: str, project: str | None = None) -> tuple[int, int, Path]:
    """The calls ``to`` refused when they were traced or pushed, sent again (Weave keeps them as
    dead letters beside its spool); (sent, still refused, where they are kept)."""
    if to != "weave":
        raise ValueError(f"--refused: only weave keeps the calls its server refused (not {to})")
    from rollscope.tracing.backends.weave import WeaveBackend

    return WeaveBackend(weave_project=project).resend_refused()
