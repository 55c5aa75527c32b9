"""The trace events: what the rollout's thread hands to the exporter, the exporter to the backends'
workers, and the traced process to the trace sidecar (``_wire``). One protocol for all of them.

An event is a tuple whose first element is its kind, except "span ended", the most frequent, which
is the bare ``Span`` object. The kinds are named by ``EventKind``; tuples carry the plain ``int``
values below, because the wire's pickler takes exact ints without a call into Python and comparing
ints costs a third of comparing enum members, on every event.

| kind              | tuple                                                    | made by (one place each)        |
|-------------------|----------------------------------------------------------|---------------------------------|
| TRAJECTORY_START  | (kind, Trajectory)                                       | ``Tracer.open_trajectory``      |
| SPAN_START        | (kind, Span)  (only for backends that show running spans)| ``begin_span``                  |
| LEAF_SPAN         | (kind, parent, name, SpanKind, start_ns, end_ns, inputs, | ``Tracer.leaf_span``            |
|                   |  outputs, attributes, decoder, span id or None)          |                                 |
| TRAJECTORY_END    | (kind, Trajectory)                                       | ``Tracer.close_trajectory``     |
| REWARD            | (kind, trajectory id, reward, details)                   | ``Tracer.reward``               |
| TRAINING          | (kind, trajectory id, record): what training did with it | ``Tracer.training``             |
| FLUSH             | (kind, Marker)                                           | ``flush``                       |
| POSITION          | (kind, n): follows the n-th event the sidecar received    | ``position``                    |
| SPAN_END          | the Span itself in memory; this tag only on the wire     | ``Tracer.end_span``             |

Fields are read by the names below (``event[TRAJECTORY]``), never by bare positions. The data
events are built inline where they are made (one tuple, no constructor call: they are
made on the rollout's thread, every turn). FLUSH and POSITION are control events: they pass every
queue as they are, never shaped nor dropped.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from rollscope.tracing.spans import Span


class EventKind(IntEnum):
    TRAJECTORY_START = 0
    SPAN_START = 1
    LEAF_SPAN = 2
    TRAJECTORY_END = 3
    REWARD = 4
    FLUSH = 5
    POSITION = 6
    SPAN_END = 7
    TRAINING = 8


TRAJECTORY_START = EventKind.TRAJECTORY_START.value
SPAN_START = EventKind.SPAN_START.value
LEAF_SPAN = EventKind.LEAF_SPAN.value
TRAJECTORY_END = EventKind.TRAJECTORY_END.value
REWARD = EventKind.REWARD.value
FLUSH = EventKind.FLUSH.value
POSITION = EventKind.POSITION.value
SPAN_END = EventKind.SPAN_END.value
TRAINING = EventKind.TRAINING.value

# The fields of an event tuple, by position: ``event[KIND]``, then what follows it for its kind.
KIND = 0
TRAJECTORY = 1  # TRAJECTORY_START, TRAJECTORY_END: the Trajectory
SPAN = 1  # SPAN_START: the Span
TRAJECTORY_ID = 1  # REWARD, TRAINING: the id of the trajectory it belongs to
REWARD_VALUE = 2  # REWARD: the reward
REWARD_DETAILS = 3  # REWARD: its details (components, the reward function's extra outputs)
TRAINING_RECORD = 2  # TRAINING: what training did with the trajectory
MARKER = 1  # FLUSH: the Marker each worker arrives at
RECEIVED = 1  # POSITION: how many events the sidecar had received before it


def flush(marker: Any) -> tuple:
    """A flush marker's event: every worker arrives at ``marker`` once it has passed it."""
    return (FLUSH, marker)


def position(n: int) -> tuple:
    """In the sidecar: the events before this one are the first ``n`` received from the traced
    process (a backend makes its position durable with the data: ``Resumable.mark_position``)."""
    return (POSITION, n)


def is_flush(event: Any) -> bool:
    return type(event) is tuple and event[KIND] == FLUSH


def is_control(event: Any) -> bool:
    """A flush marker or a position: passed through queues as is, never shaped nor dropped."""
    return type(event) is tuple and (event[KIND] == FLUSH or event[KIND] == POSITION)


def span_from_leaf(event: tuple) -> Span:
    """The Span a LEAF_SPAN event stands for, built where the event is shaped (the sidecar, or the
    exporter's thread), never on the rollout's thread."""
    _, parent, name, kind, start_ns, end_ns, inputs, outputs, attributes, decoder, span_id = event
    span = Span(name, kind, parent.trajectory, parent.id, inputs, attributes)
    span.start_ns, span.decoder = start_ns, decoder
    if span_id is not None:
        span.id = span_id
    span.finish(outputs)
    span.end_ns = end_ns
    return span
