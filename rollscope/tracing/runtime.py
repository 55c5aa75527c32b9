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
from rollscope.tracing.spans import STATUS_ERROR, Span, SpanKind, Trajectory

log = logging.getLogger("rollscope.tracing")


class CallArgs:
    """A traced call's raw arguments, bound to parameter names later, on the exporter thread."""

    __slots__ = ("args", "binder", "kwargs")

    def __init__(self, binder: Binder, args: tuple, kwargs: dict) -> None:
        self.binder = binder
        self.args = args
        self.kwargs = kwargs

    def owner(self) -> Any:
        """The bound instance (``self``) when the call is a method call."""
        return self.args[0] if self.binder.is_method and self.args else None

    def bind(self) -> dict[str, Any]:
        return self.binder.bind(self.args, self.kwargs)


class Binder:
    """Maps a call's arguments to parameter names the way verl's trace does (defaults applied,
    ``self`` left out, extra keywords under the ``**kwargs`` name), precomputed per function
    because ``Signature.bind`` is slow."""

    __slots__ = ("defaults", "is_method", "names", "signature", "simple", "var_keyword")

    def __init__(self, func: Any) -> None:
        try:
            self.signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            self.signature = None
        params = list(self.signature.parameters.values()) if self.signature else []
        self.is_method = bool(params) and params[0].name in ("self", "cls")
        kinds = {p.kind for p in params}
        self.var_keyword = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
        # Simple: no *args and no positional-only parameters.
        self.simple = self.signature is not None and not kinds & {
            inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY
        }
        self.names = [p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        self.defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        if self.simple and len(args) <= len(self.names):
            inputs = dict(zip(self.names, args, strict=False))
            extra = None
            for key, value in kwargs.items():
                if self.var_keyword is not None and key not in self.defaults and key not in self.names:
                    if value is not None:  # extras left at None (image_data=None, ...) say nothing
                        extra = extra or {}
                        extra[key] = value
                else:
                    inputs[key] = value
            for name, default in self.defaults.items():
                inputs.setdefault(name, default)
            if self.var_keyword is not None:
                inputs[self.var_keyword] = extra or {}
        elif self.signature is not None:
            try:
                bound = self.signature.bind(*args, **kwargs)
            except TypeError:
                return {"args": list(args[self.is_method :]), **kwargs}
            bound.apply_defaults()
            inputs = dict(bound.arguments)
        else:
            return {"args": list(args), **kwargs}
        if self.is_method:
            inputs.pop(self.names[0], None)
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
        max_queue: int = 2_000,
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
        self._emit_span_start = any(b.wants_span_start for b in self.backends)

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
        self, name: str, kind: SpanKind, parent: Span | Trajectory, inputs: Any, attributes: dict | None
    ) -> Span:
        span = Span(name, kind, parent.trajectory, parent.id, inputs, attributes)
        if self._emit_span_start:
            self._submit((ev.SPAN_START, span))
        return span

    def end_span(self, span: Span, outputs: Any = None, error: BaseException | None = None) -> None:
        span.finish(outputs, error)
        counts = span.trajectory.counts
        kind = span.kind.value
        counts[kind] = counts.get(kind, 0) + 1
        if span.status == STATUS_ERROR:
            counts["errors"] = counts.get("errors", 0) + 1
        self._submit(span)  # a bare Span in the queue means "span ended": one tuple fewer per span

    def reward(self, trajectory_id: str, reward: float | None, details: dict[str, Any]) -> None:
        self._submit((ev.REWARD, trajectory_id, reward, details))

    # ---- shaping, on the exporter thread ----
    def _shape(self, event: Span | tuple) -> Span | tuple:
        shape = self.shaper.shape
        if type(event) is Span:
            self._shape_span(event, ended=True)
            return event
        kind = event[0]
        if kind == ev.SPAN_START:
            self._shape_span(event[1], ended=False)
        elif kind == ev.TRAJECTORY_START or kind == ev.TRAJECTORY_END:
            t: Trajectory = event[1]
            if t.attributes:
                t.attributes = shape(t.attributes)
            if t.error_message is not None:
                t.error_message = shape(t.error_message)
        elif kind == ev.REWARD:
            return (kind, event[1], event[2], shape(event[3]))
        return event

    def _shape_span(self, span: Span, ended: bool) -> None:
        shape = self.shaper.shape
        if not span.shaped:  # inputs once, at the first event seen for the span
            raw = span.inputs
            if isinstance(raw, CallArgs):
                if self.token2text:
                    span.decoder = getattr(raw.owner(), "tokenizer", None)
                raw = raw.bind()
            span.inputs = shape(raw, span.decoder)
            span.shaped = True
        span.attributes = shape(span.attributes) if span.attributes else {}
        if ended:
            span.outputs = shape(span.outputs, span.decoder)
            if span.error_message is not None:
                span.error_message = shape(span.error_message)

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
