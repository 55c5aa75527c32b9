"""The event model: one trajectory root span plus llm / tool / custom child spans.

Shaped on OpenTelemetry's GenAI conventions so every backend can map it without guessing:
a trajectory is an ``invoke_agent`` span, an LLM turn a ``chat`` span, a tool call an
``execute_tool`` span. Objects are plain slotted classes because one is built on the rollout's
hot path for every traced call; all shaping (JSON, redaction, compression) happens later, off
the event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import os
import time
import traceback
from enum import Enum
from typing import Any

from rollscope.semconv import STATUS_CANCELLED, STATUS_ERROR, STATUS_OK, STATUS_RUNNING


class SpanKind(str, Enum):
    AGENT = "agent"  # the trajectory root (gen_ai invoke_agent)
    LLM = "llm"  # one generate / chat turn
    TOOL = "tool"  # one tool method call (execute_tool)
    REWARD = "reward"  # reward computation
    CUSTOM = "custom"

    # Hashes as its value, in C: a kind is a dict key on the hot path (``Trajectory.counts``),
    # where it also finds the plain string ("llm"), and Enum's own __hash__ is Python code.
    __hash__ = str.__hash__


STACKTRACE = "exception.stacktrace"
# OpenTelemetry's code attributes: where a traced function is defined (Weave publishes it as the op's code)
CODE_FILE, CODE_LINE, CODE_FUNCTION = "code.file.path", "code.line.number", "code.function.name"
CODE_ATTRIBUTES = (CODE_FILE, CODE_LINE, CODE_FUNCTION)


def code_location(func: Any) -> dict[str, Any]:
    """Where ``func`` (unwrapped) is defined, as OpenTelemetry's code attributes; empty where it has
    no Python code (a builtin)."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    if code is None:
        return {}
    return {
        CODE_FILE: code.co_filename,
        CODE_LINE: code.co_firstlineno,
        CODE_FUNCTION: getattr(func, "__qualname__", code.co_name),
    }


MAX_STACKTRACE_CHARS = 8000

# Ids: a random per-process prefix plus a zero-padded counter. Unique across processes and hosts,
# far cheaper on the hot path than uuid4, and increasing, so the store's index appends instead of
# splitting pages. Re-seeded after fork so children never collide.
_prefix = os.urandom(6).hex()
_counter = itertools.count(1)


def _reseed_ids() -> None:
    global _prefix, _counter
    _prefix = os.urandom(6).hex()
    _counter = itertools.count(1)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reseed_ids)


def new_id() -> str:
    return f"{_prefix}{next(_counter):012x}"


class _Timed:
    """Id, timing and status, shared by spans and trajectories. Each sets its id and start in its
    own ``__init__`` (written out: a call layer costs as much as the work, in a real loop)."""

    __slots__ = ("end_ns", "error_message", "error_type", "id", "start_ns", "status")

    def fail(self, error: BaseException) -> None:
        """Mark as failed without raising: for errors that are handled (a tool error the model sees).
        An error that was raised keeps where it came from: its traceback (the end, where the
        error is, when long) as the ``exception.stacktrace`` attribute (OpenTelemetry's name),
        redacted like every attribute where the span is shaped (not for an error that says it is a
        clean message, ``keep_traceback = False``). A cancellation is not a failure: ``STATUS_CANCELLED``,
        with the canceller's message (``task.cancel(msg)``)."""
        if isinstance(error, asyncio.CancelledError):
            self.status = STATUS_CANCELLED
            self.error_type, self.error_message = "CancelledError", str(error) or "cancelled"
            return
        self.status = STATUS_ERROR
        self.error_type = type(error).__name__
        self.error_message = str(error)
        if error.__traceback__ is not None and getattr(error, "keep_traceback", True):
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
            attributes = self.attributes if self.attributes is not None else {}  # type: ignore[attr-defined]
            attributes[STACKTRACE] = text if len(text) <= MAX_STACKTRACE_CHARS else "…" + text[-MAX_STACKTRACE_CHARS:]
            self.attributes = attributes  # type: ignore[attr-defined]

    def _finish(self, error: BaseException | None) -> None:
        self.end_ns = time.time_ns()
        if error is not None:
            self.fail(error)
        elif self.status == STATUS_RUNNING:
            self.status = STATUS_OK


class Span(_Timed):
    """One timed operation inside a trajectory."""

    __slots__ = (
        "attributes",
        "ctx_token",
        "decoder",
        "implicit",
        "inputs",
        "kind",
        "name",
        "outputs",
        "parent_id",
        "shaped",
        "trajectory",
        "trajectory_id",
    )

    def __init__(
        self,
        name: str,
        kind: SpanKind,
        trajectory: Trajectory,
        parent_id: str | None,
        inputs: Any = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        # Id, start and status set here rather than by a shared helper: a span is built for every traced call.
        self.id = f"{_prefix}{next(_counter):012x}"
        self.start_ns = time.time_ns()
        self.end_ns = None
        self.status = STATUS_RUNNING
        self.error_type = self.error_message = None
        self.name = name
        self.kind = kind
        self.trajectory = trajectory
        self.trajectory_id = trajectory.id
        self.parent_id = parent_id
        self.inputs = inputs
        self.outputs: Any = None
        # None until the exporter shapes it (saves a dict per span on the hot path).
        self.attributes = attributes
        # Bookkeeping, never exported: the context token and the trajectory this span opened
        # (rollout side); the token2text tokenizer and whether inputs are shaped yet (exporter side).
        self.ctx_token: Any = None
        self.implicit: Trajectory | None = None
        self.decoder: Any = None
        self.shaped = False

    def finish(self, outputs: Any = None, error: BaseException | None = None) -> None:
        # No helper call here either: every span ends through this method.
        self.outputs = outputs
        self.end_ns = time.time_ns()
        if error is not None:
            self.fail(error)
        elif self.status == STATUS_RUNNING:
            self.status = STATUS_OK

    def __repr__(self) -> str:
        return f"Span({self.kind.value}:{self.name} id={self.id} status={self.status})"


class Trajectory(_Timed):
    """One rollout: the root of a span tree plus the attributes it is filtered by."""

    __slots__ = (
        "agent_name",
        "attributes",
        "counts",
        "experiment",
        "project",
        "reward",
        "rollout_n",
        "sample_index",
        "step",
        "turns",
        "validate",
    )

    def __init__(
        self,
        *,
        project: str | None,
        experiment: str | None,
        step: int | None,
        sample_index: Any,
        rollout_n: int | None,
        validate: bool,
        agent_name: str,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        # Id, start and status set here, as in Span (no helper call): one trajectory per rollout.
        self.id = f"{_prefix}{next(_counter):012x}"
        self.start_ns = time.time_ns()
        self.end_ns = None
        self.status = STATUS_RUNNING
        self.error_type = self.error_message = None
        self.counts: dict[str, int] = {}  # ended spans per kind, and "errors": live figures for runners
        self.project = project
        self.experiment = experiment
        self.step = step
        self.sample_index = sample_index
        self.rollout_n = rollout_n
        self.validate = bool(validate)
        self.agent_name = agent_name
        self.attributes = attributes if attributes is not None else {}
        self.reward: float | None = None
        self.turns: Any = None  # the last llm turn, as the next one is compared to it (``tracing._turns``)

    def finish(self, error: BaseException | None = None) -> None:
        self._finish(error)

    @property
    def trajectory(self) -> Trajectory:
        """A trajectory is the root frame of its own span tree (spans have the same attribute)."""
        return self

    def __repr__(self) -> str:
        return (
            f"Trajectory(id={self.id} step={self.step} sample_index={self.sample_index} "
            f"rollout_n={self.rollout_n} status={self.status})"
        )
