"""The process-wide tracer: configuration, backends and exporter, and its lifecycle.

``init_tracing`` builds one ``Tracer``; while none exists every traced call costs one attribute
lookup (``state.tracer``). The tracer turns trajectory and span lifecycle calls into events for the
exporter; where the backends run and where events are shaped is ``_pipeline``'s decision.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from rollscope.semconv import STATUS_ERROR
from rollscope.tracing import _events as ev
from rollscope.tracing._payload import DEFAULT_MAX_PAYLOAD_CHARS, PayloadShaper
from rollscope.tracing._pipeline import build_pipeline
from rollscope.tracing._redaction import Redactor
from rollscope.tracing._sampling import TraceSampler
from rollscope.tracing.spans import Span, SpanKind, Trajectory

log = logging.getLogger("rollscope.tracing")


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
        sidecar: bool | int | None = None,
        **backend_options: Any,
    ) -> None:
        self.settings = dict(
            backend=backend,
            project=project,
            experiment=experiment,
            token2text=token2text,
            max_samples_per_step_per_worker=max_samples_per_step_per_worker,
            sample_seed=sample_seed,
            max_payload_chars=max_payload_chars,
            redact_patterns=tuple(redact_patterns),
            tokenizer=tokenizer,
            max_queue=max_queue,
            sidecar=sidecar,
            **backend_options,
        )
        self.project = project
        self.experiment = experiment
        self.token2text = token2text
        self.sampler = TraceSampler(max_samples_per_step_per_worker, sample_seed)
        self.samples_all = max_samples_per_step_per_worker is None  # no sampler call per trajectory
        # (its rules loaded only where events are shaped here: a trace sidecar redacts its own)
        self.shaper = PayloadShaper(Redactor(redact_patterns, preload=False), max_payload_chars, token2text, tokenizer)
        pipeline = build_pipeline(
            backend,
            backend_options,
            shaper=self.shaper,
            project=project,
            experiment=experiment,
            token2text=token2text,
            sidecar=sidecar,
            max_payload_chars=max_payload_chars,
            redact_patterns=redact_patterns,
            max_queue=max_queue,
        )
        if pipeline.shapes_here:
            self.shaper.redactor.preload()
        self.backends = pipeline.backends
        self.exporter = pipeline.exporter
        self.submit = self.exporter.submit  # the hot path, as the exporter chose it once
        self.emit_span_start = pipeline.emit_span_start  # read by begin_span, which builds spans

    # ---- lifecycle calls made on the rollout's thread: build an object, append an event ----
    # (a span is built by api.begin_span itself: one call layer fewer per traced call)
    def open_trajectory(
        self,
        *,
        step: Any = None,
        sample_index: Any = None,
        rollout_n: Any = None,
        validate: bool = False,
        name: str = "rollout_trace",
        attributes: dict[str, Any] | None = None,
        experiment: str | None = None,
    ) -> Trajectory:
        # _as_int only for what is not already an int (the usual case: a call fewer each)
        if type(step) is not int and step is not None:
            step = _as_int(step)
        if type(sample_index) is not int and sample_index is not None:
            sample_index = _as_int(sample_index)
        if type(rollout_n) is not int and rollout_n is not None:
            rollout_n = _as_int(rollout_n)
        t = Trajectory(
            project=self.project,
            experiment=experiment if experiment is not None else self.experiment,
            step=step,
            sample_index=sample_index,
            rollout_n=rollout_n,
            validate=validate,
            agent_name=name,
            attributes=attributes,
        )
        self.submit((ev.TRAJECTORY_START, t))
        return t

    def close_trajectory(self, t: Trajectory, error: BaseException | None = None) -> None:
        t.finish(error)
        t.turns = None  # (its copy of the context: not kept while the end event waits to be shaped)
        self.submit((ev.TRAJECTORY_END, t))

    def end_span(self, span: Span, outputs: Any = None, error: BaseException | None = None) -> None:
        span.finish(outputs, error)
        counts = span.trajectory.counts
        kind = span.kind  # a SpanKind is found under its value ("llm")
        counts[kind] = counts.get(kind, 0) + 1
        if span.status == STATUS_ERROR:
            counts["errors"] = counts.get("errors", 0) + 1
        self.submit(span)  # a bare Span in the queue means "span ended": one tuple fewer per span

    def leaf_span(
        self,
        parent: Span | Trajectory,
        name: str,
        kind: SpanKind,
        start_ns: int,
        inputs: Any,
        outputs: Any,
        attributes: dict[str, Any] | None = None,
        decoder: Any = None,
        span_id: str | None = None,
    ) -> None:
        """A span that ended without error and had nothing nested in it, recorded in one event
        (``_events.LEAF_SPAN``): for the calls of every turn (``llm_client``). ``span_id``: its
        id, where a later turn refers to it; else it is given one where it is unpacked."""
        counts = parent.trajectory.counts
        counts[kind] = counts.get(kind, 0) + 1
        self.submit(
            (ev.LEAF_SPAN, parent, name, kind, start_ns, time.time_ns(), inputs, outputs, attributes, decoder, span_id)
        )

    def reward(self, trajectory_id: str, reward: float | None, details: dict[str, Any]) -> None:
        self.submit((ev.REWARD, trajectory_id, reward, details))

    def training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        """What the trainer did with a trajectory that has ended (``trainer.training_record``): a
        late update, as a late reward is. ``record`` holds numbers and verl's group id only."""
        self.submit((ev.TRAINING, trajectory_id, record))

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
class TracingState:
    """Where the process's tracer lives: ``state.tracer`` is None when tracing is off. The hot
    path reads it as an attribute (no call); only ``init_tracing``/``shutdown_tracing`` set it."""

    __slots__ = ("tracer",)

    def __init__(self) -> None:
        self.tracer: Tracer | None = None


state = TracingState()
_atexit_registered = False


def get_tracer() -> Tracer | None:
    return state.tracer


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

    Extra options: ``max_payload_chars``, ``redact_patterns``, ``tokenizer``, ``max_queue``,
    ``sidecar`` (False keeps every backend in this process; N starts N sidecars, each with whole
    trajectories; default from ``ROLLSCOPE_TRACE_SIDECAR``, one), and the options of the chosen
    backends (``trace_dir`` for ``local``).
    """
    global _atexit_registered
    new = Tracer(
        backend=backend,
        project=project,
        experiment=experiment,
        token2text=token2text,
        max_samples_per_step_per_worker=max_samples_per_step_per_worker,
        sample_seed=sample_seed,
        **backend_options,
    )
    old, state.tracer = state.tracer, new
    if old is not None:
        old.close()
    if not _atexit_registered:
        atexit.register(shutdown_tracing)
        _atexit_registered = True
    return new


def flush_tracing(timeout: float | None = 30.0) -> bool:
    """Block until everything traced so far is in every backend. False if it timed out."""
    return state.tracer.flush(timeout) if state.tracer is not None else True


def shutdown_tracing(timeout: float | None = 30.0) -> bool:
    tracer, state.tracer = state.tracer, None
    return tracer.close(timeout) if tracer is not None else True


def stats() -> dict[str, Any]:
    """Exporter counters: per backend exported, queued, dropped and errors."""
    return state.tracer.stats() if state.tracer is not None else {"pending": 0, "shape_errors": 0, "backends": {}}


def _restart_in_child() -> None:
    """A forked child inherits the tracer object but not its threads: build a fresh one."""
    if state.tracer is not None:
        settings = dict(state.tracer.settings)
        state.tracer.exporter.abandon()
        state.tracer = None
        try:
            state.tracer = Tracer(**settings)
        except Exception as exc:  # tracing must never break the child
            log.warning("tracing disabled in forked child: %s", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_restart_in_child)
