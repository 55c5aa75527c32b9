"""Where the analysis commands and the viewer read trajectories from: one interface, two sources.

``TraceSource`` is what ``traces ls/show/diff/group/prompt``, ``insights``, ``export``, ``rescore``
and ``rollscope ui`` use of a source. ``rollscope.store.TraceStore`` (the local store, one machine
or the shared-filesystem layout) is one implementation; ``rollscope.sources.weave.WeaveSource``
(``--source weave:ENTITY/PROJECT``: a Weave project, where a many-node team's traces already are)
is the other. ``open_source`` picks one from the command line's ``--source`` and ``--dir``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from rollscope.store.rescorings import RescoredReward, Rescoring
from rollscope.trajectory.records import StepStats, TrainingRecord, TrajectoryRecord

WEAVE = "weave:"


class SourceError(RuntimeError):
    """A source that cannot be read: its message names what and where (the CLI's exit 2)."""


class TraceSource(Protocol):
    """Trajectories, their spans, training records and rescorings, read by filters.

    ``aggregate`` runs the insights' SQL over the trajectories table (``store.schema``): a source
    keeps its trajectories' rows in that shape, whatever holds them."""

    where: str  # what the source is, for messages: a directory, or weave:ENTITY/PROJECT

    def trajectories(self, **filters: Any) -> list[TrajectoryRecord]: ...
    def count(self, **filters: Any) -> int: ...
    def total(self) -> int: ...
    def steps(self, **filters: Any) -> list[StepStats]: ...
    def experiments(self) -> list[tuple[str | None, str | None]]: ...
    def get(self, trajectory_id: str) -> TrajectoryRecord: ...
    def group(self, step: int, sample_index: Any, **filters: Any) -> list[TrajectoryRecord]: ...
    def groups(self, step: int, sample_index: Any, **filters: Any) -> list[list[TrajectoryRecord]]: ...
    def diff(self, a: str | TrajectoryRecord, b: str | TrajectoryRecord) -> Any: ...
    def training_records(self, **filters: Any) -> list[TrainingRecord]: ...
    def aggregate(self, sql: str, params: list[Any], combine: Callable[[list[tuple]], Any]) -> Any: ...
    def load_spans(self, trajectory_ids: list[str]) -> None: ...
    def rescoring(self, name: str, ids: Iterable[str] | None = None) -> Rescoring: ...
    def save_rescoring(self, name: str, meta: dict[str, Any], rewards: list[RescoredReward]) -> str: ...
    def close(self) -> None: ...


def open_source(
    source: str | None = None,
    directory: str | os.PathLike | None = None,
    *,
    index_segments: bool = False,
    **filters: Any,
) -> TraceSource:
    """``source``: ``weave:ENTITY/PROJECT``, or None for the local store in ``directory``.
    ``filters`` (``traces ls``' names) narrow what a remote source fetches: the server filters,
    so a step's listing costs what the step holds; the reader filters again as it answers."""
    if source is None or source == "local":
        from rollscope.store import TraceStore

        return TraceStore(directory, index_segments=index_segments)
    if source.startswith(WEAVE):
        from rollscope.sources.weave import WeaveSource

        return WeaveSource(source[len(WEAVE) :], **filters)
    raise ValueError(f"--source {source!r}: 'weave:ENTITY/PROJECT', or leave it out for the local store (--dir)")
