"""The process-wide tracer: configuration, backends and exporter, and its lifecycle.

``init_tracing`` builds one ``Tracer``; while none exists every traced call costs one global
lookup. The tracer turns trajectory and span lifecycle calls into events for the exporter and
shapes those events (JSON, redaction, truncation, token2text) on the exporter's thread.
"""

from __future__ import annotations

import atexit
import inspect
import logging
import os
from collections.abc import Iterable
from typing import Any

from rollscope.tracing import exporter as ev
from rollscope.tracing.backends import create_backends, parse_backend_names
from rollscope.tracing.payload import DEFAULT_MAX_PAYLOAD_CHARS, PayloadShaper
from rollscope.tracing.redaction import Redactor
from rollscope.tracing.sampling import TraceSampler
from rollscope.tracing.spans import Span, SpanKind, Trajectory

log = logging.getLogger("rollscope.tracing")


class CallArgs:
    """A traced call's raw arguments, bound to parameter names later, on the exporter thread."""

    __slots__ = ("args", "kwargs", "signature")

    def __init__(self, signature: inspect.Signature | None, args: tuple, kwargs: dict) -> None:
        self.signature = signature
        self.args = args
        self.kwargs = kwargs

    def owner(self) -> Any:
        """The bound instance (``self``) when the call is a method call."""
        if self.signature is not None and self.args:
            first = next(iter(self.signature.parameters), None)
            if first in ("self", "cls"):
                return self.args[0]
        return None

    def bind(self) -> dict[str, Any]:
        if self.signature is None:
            return {"args": list(self.args), **self.kwargs}
        try:
            bound = self.signature.bind(*self.args, **self.kwargs)
        except TypeError:
            return {"args": list(self.args), **self.kwargs}
        bound.apply_defaults()
        inputs = dict(bound.arguments)
        first = next(iter(self.signature.parameters), None)
        if first in ("self", "cls"):
            inputs.pop(first, None)
        return inputs


class Tracer:
    def __init__(
        self,
        *,
        backend: str | list[str] = "local",
        project: str | None = None,
        experiment: str | None = None,
        token2text: bool = False,
        max_samples_per_step_per_worker: int | None = None,
        sample_seed: int = 0,
        max_payload_chars: int | None = DEFAULT_MAX_PAYLOAD_CHARS,
        redact_patterns: Iterable[str] = (),
        tokenizer: Any = None,
        max_queue: int = 10_000,
        **backend_options: Any,
    ) -> None:
        self.settings = dict(
            backend=backend, project=project, experiment=experiment, token2text=token2text,
            max_samples_per_step_per_worker=max_samples_per_step_per_worker, sample_seed=sample_seed,
            max_payload_chars=max_payload_chars, redact_patterns=tuple(redact_patterns),
            tokenizer=tokenizer, max_queue=max_queue, **backend_options,
        )  # fmt: skip
        self.project = project
        self.experiment = experiment
        self.token2text = token2text
        self.sampler = TraceSampler(max_samples_per_step_per_worker, sample_seed)
        self.shaper = PayloadShaper(Redactor(redact_patterns), max_payload_chars, token2text, tokenizer)
        names = parse_backend_names(backend)
        self.backends = create_backends(names, {"project": project, "experiment": experiment}, backend_options)
        self.exporter = ev.Exporter(self.backends, self._shape, max_queue=max_queue)
        self._submit = self.exporter.submit

    # ---- lifecycle calls made on the rollout's thread: build an object, append an event ----
    def open_trajectory(
        self,
        *,
        step: Any = None,
        sample_index: Any = None,
        rollout_n: Any = None,
        validate: bool = False,
        name: str = "agent_loop",
        attributes: dict[str, Any] | None = None,
        experiment: str | None = None,
    ) -> Trajectory:
        t = Trajectory(
            project=self.project,
            experiment=experiment if experiment is not None else self.experiment,
            step=_as_int(step),
            sample_index=_as_int(sample_index),
            rollout_n=_as_int(rollout_n),
            validate=validate,
            agent_name=name,
            attributes=attributes,
        )
        self._submit((ev.TRAJECTORY_START, t))
        return t

    def close_trajectory(self, t: Trajectory, error: BaseException | None = None) -> None:
        t.finish(error)
        self._submit((ev.TRAJECTORY_END, t))

    def start_span(
        self, name: str, kind: SpanKind, frame: tuple[Trajectory, str], inputs: Any, attributes: dict | None
    ) -> Span:
        span = Span(name, kind, frame[0].id, frame[1], inputs, attributes)
        self._submit((ev.SPAN_START, span))
        return span

    def end_span(self, span: Span, outputs: Any = None, error: BaseException | None = None) -> None:
        span.finish(outputs, error)
        self._submit((ev.SPAN_END, span))

    def reward(self, trajectory_id: str, reward: float | None, details: dict[str, Any]) -> None:
        self._submit((ev.REWARD, trajectory_id, reward, details))

    # ---- shaping, on the exporter thread ----
    def _shape(self, event: tuple) -> tuple:
        kind = event[0]
        shape = self.shaper.shape
        if kind == ev.SPAN_START or kind == ev.SPAN_END:
            span: Span = event[1]
            if isinstance(span.inputs, CallArgs):
                call = span.inputs
                if self.token2text:
                    span.decoder = getattr(call.owner(), "tokenizer", None)
                span.inputs = shape(call.bind(), span.decoder)
            elif kind == ev.SPAN_START:
                span.inputs = shape(span.inputs)
            span.attributes = shape(span.attributes)
            if kind == ev.SPAN_END:
                span.outputs = shape(span.outputs, span.decoder)
                if span.error_message is not None:
                    span.error_message = shape(span.error_message)
        elif kind == ev.TRAJECTORY_START or kind == ev.TRAJECTORY_END:
            t: Trajectory = event[1]
            t.attributes = shape(t.attributes)
            if t.error_message is not None:
                t.error_message = shape(t.error_message)
        elif kind == ev.REWARD:
            return (kind, event[1], event[2], shape(event[3]))
        return event

    def flush(self, timeout: float | None = 30.0) -> bool:
        return self.exporter.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> bool:
        ok = self.exporter.close(timeout)
        dropped = {n: s["dropped"] for n, s in self.exporter.stats()["backends"].items() if s["dropped"]}
        if dropped:
            log.warning("trace events dropped by slow or failing backends: %s", dropped)
        return ok

    def stats(self) -> dict[str, Any]:
        return self.exporter.stats()


def _as_int(v: Any) -> Any:
    """numpy integers and digit strings become ints, so filters match however the index arrived."""
    if v is None or type(v) is int:
        return v
    if isinstance(v, str):
        return int(v) if v.lstrip("-").isdigit() else v
    try:
        return int(v) if int(v) == v else v
    except (TypeError, ValueError, OverflowError):
        return str(v)


# ---- the process-wide tracer ----
_tracer: Tracer | None = None
_atexit_registered = False


def get_tracer() -> Tracer | None:
    return _tracer


def init_tracing(
    backend: str | list[str] = "local",
    project: str | None = None,
    experiment: str | None = None,
    token2text: bool = False,
    max_samples_per_step_per_worker: int | None = None,
    sample_seed: int = 0,
    **backend_options: Any,
) -> Tracer:
    """Start tracing in this process (replacing, after a flush, any tracer started before).

    Extra options: ``max_payload_chars``, ``redact_patterns``, ``tokenizer``, ``max_queue``, and
    the options of the chosen backends (``trace_dir`` for ``local``).
    """
    global _tracer, _atexit_registered
    new = Tracer(
        backend=backend, project=project, experiment=experiment, token2text=token2text,
        max_samples_per_step_per_worker=max_samples_per_step_per_worker, sample_seed=sample_seed,
        **backend_options,
    )  # fmt: skip
    old, _tracer = _tracer, new
    if old is not None:
        old.close()
    if not _atexit_registered:
        atexit.register(shutdown_tracing)
        _atexit_registered = True
    return new


def flush_tracing(timeout: float | None = 30.0) -> bool:
    """Block until everything traced so far is in every backend. False if it timed out."""
    return _tracer.flush(timeout) if _tracer is not None else True


def shutdown_tracing(timeout: float | None = 30.0) -> bool:
    global _tracer
    tracer, _tracer = _tracer, None
    return tracer.close(timeout) if tracer is not None else True


def stats() -> dict[str, Any]:
    """Exporter counters: per backend exported, queued, dropped and errors."""
    return _tracer.stats() if _tracer is not None else {"pending": 0, "shape_errors": 0, "backends": {}}


def _restart_in_child() -> None:
    """A forked child inherits the tracer object but not its threads: build a fresh one."""
    global _tracer
    if _tracer is not None:
        settings = dict(_tracer.settings)
        _tracer = None
        try:
            _tracer = Tracer(**settings)
        except Exception as exc:  # tracing must never break the child
            log.warning("tracing disabled in forked child: %s", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_in_child)
