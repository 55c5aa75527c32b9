"""The tracing calls user code and rollscope's own loops make: verl's names, verl's semantics.

``rollout_trace_attr`` opens a trajectory; ``rollout_trace_op`` makes a method (async or sync) a
span of the current trajectory; ``trace_span`` is the same as a ``with`` block. Outside any
trajectory, the outermost traced call opens one itself: joined to the trajectory verl opened when
verl's own ``rollout_trace_attr`` is active, a bare one otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from rollscope.tracing._callargs import Binder, CallArgs
from rollscope.tracing._context import current_frame, trace_enabled, verl_context
from rollscope.tracing._events import SPAN_START
from rollscope.tracing._runtime import Tracer, state
from rollscope.tracing.spans import Span, SpanKind, Trajectory, code_location

F = TypeVar("F", bound=Callable[..., Any])


def rollout_trace_attr(
    sample_index: Any = None,
    step: Any = None,
    rollout_n: Any = None,
    name: str = "rollout_trace",
    validate: bool = False,
    trace: bool = True,
    **attributes: Any,
) -> contextlib.AbstractContextManager[Trajectory | None]:
    """Open a trajectory carrying verl's attributes; the block gets it (None when not traced).

    ``trace=False``, or a sample not chosen by ``max_samples_per_step_per_worker``, disables every
    traced call nested inside. ``block.hold()`` inside the block leaves the trajectory open past
    its end, for a result that arrives later (verl's reward): close it with
    ``get_tracer().close_trajectory(trajectory)``.
    """
    return _TrajectoryBlock(sample_index, step, rollout_n, validate, name, trace, attributes)


class _TrajectoryBlock:
    """``rollout_trace_attr``'s block. A class rather than a generator: it runs once per rollout on
    the event loop, and a plain ``__enter__``/``__exit__`` costs half as much."""

    __slots__ = ("args", "enabled_token", "frame_token", "held", "tracer", "trajectory")

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.trajectory: Trajectory | None = None
        self.enabled_token: Any = None
        self.held = False

    def hold(self) -> None:
        """Leave the trajectory open when the block ends; its owner closes it."""
        self.held = True

    def __enter__(self) -> Trajectory | None:
        sample_index, step, rollout_n, validate, name, trace, attributes = self.args
        tracer = self.tracer = state.tracer
        if tracer is None:
            return None
        if not trace or not (tracer.samples_all or tracer.sampler.should_trace(step, sample_index)):
            self.enabled_token = trace_enabled.set(False)
            return None
        t = self.trajectory = tracer.open_trajectory(
            step=step,
            sample_index=sample_index,
            rollout_n=rollout_n,
            validate=validate,
            name=name,
            attributes=attributes or None,
        )
        self.frame_token = current_frame.set(t)
        self.enabled_token = trace_enabled.set(True)
        return t

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self.trajectory is not None:
            if not self.held or exc is not None:
                self.tracer.close_trajectory(self.trajectory, exc)
            current_frame.reset(self.frame_token)
        if self.enabled_token is not None:
            trace_enabled.reset(self.enabled_token)


def _open_implicit(tracer: Tracer, name: str) -> Trajectory | None:
    """The trajectory for a traced call made outside any: verl's if verl opened one, else bare."""
    allowed, verl_attrs = verl_context()
    if not allowed:
        return None
    if verl_attrs is None:
        return tracer.open_trajectory(name=name)
    return tracer.open_trajectory(
        step=verl_attrs.get("step"),
        sample_index=verl_attrs.get("sample_index"),
        rollout_n=verl_attrs.get("rollout_n"),
        validate=bool(verl_attrs.get("validate", False)),
        name=name,
        experiment=verl_attrs.get("experiment_name"),
        attributes={"opened_by": "verl"},
    )


def snapshot(v: Any) -> Any:
    """Copy top-level containers so a caller mutating them later cannot change the trace."""
    t = type(v)
    if t is list or t is dict:
        return v.copy()
    return v


def _snapshot_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Copies only when a container is present; the common case allocates nothing."""
    for a in args:
        if type(a) is list or type(a) is dict:
            args = tuple([x.copy() if type(x) is list or type(x) is dict else x for x in args])
            break
    for v in kwargs.values():
        if type(v) is list or type(v) is dict:
            return args, {k: x.copy() if type(x) is list or type(x) is dict else x for k, x in kwargs.items()}
    return args, kwargs  # the wrapper's own **kwargs dict: nobody else holds or mutates it


@overload
def rollout_trace_op(func: F) -> F: ...
@overload
def rollout_trace_op(*, kind: SpanKind | str = ..., name: str | None = ...) -> Callable[[F], F]: ...


def rollout_trace_op(
    func: Callable[..., Any] | None = None,
    *,
    kind: SpanKind | str = SpanKind.CUSTOM,
    name: str | None = None,
) -> Any:
    """Trace each call of ``func`` as a span: inputs, output, timing, exception (re-raised).

    Usable bare (``@rollout_trace_op``, as in verl) or with ``kind=``/``name=``.
    """
    span_kind = SpanKind(kind)
    if func is None:
        return lambda f: rollout_trace_op(f, kind=span_kind, name=name)
    op_name = name or func.__qualname__
    sig = Binder(func)
    code = code_location(func)  # (each span gets its own copy: the exporter adds to it)

    def open_span(args: tuple, kwargs: dict) -> Span | None:
        return begin_span(op_name, span_kind, CallArgs(sig, *_snapshot_args(args, kwargs)), code.copy())

    return traced_callable(func, open_span)


def _tracing() -> bool:
    return state.tracer is not None and trace_enabled.get()


def _end(span: Span, result: Any, error: BaseException | None) -> None:
    if error is not None:
        end_span(span, None, error)
    else:
        end_span(span, snapshot(result))


def traced_callable(
    func: Callable[..., Any],
    open_span: Callable[[tuple, dict], Span | None],
    finish: Callable[[Span, Any, BaseException | None], None] = _end,
    tracing: Callable[[], bool] = _tracing,
) -> Callable[..., Any]:
    """``func`` with each call in a span: the one route of every traced callable
    (``rollout_trace_op``, the LLM client's methods, the tools ``observe_tools`` traces).

    ``tracing()`` says whether to trace at all, before anything is built; ``open_span(args,
    kwargs)`` begins the span (None: this call goes untraced); ``finish(span, result, error)`` ends
    it, by default with the result's snapshot or the exception, which is raised on. The wrapper is
    a coroutine function where ``func`` is one.
    """
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            span = open_span(args, kwargs) if tracing() else None
            if span is None:
                return await func(*args, **kwargs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as exc:
                finish(span, None, exc)
                raise
            finish(span, result, None)
            return result

        async_wrapper.__rollscope_traced__ = True  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        span = open_span(args, kwargs) if tracing() else None
        if span is None:
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as exc:
            finish(span, None, exc)
            raise
        finish(span, result, None)
        return result

    wrapper.__rollscope_traced__ = True  # type: ignore[attr-defined]
    return wrapper


def begin_span(
    name: str, kind: SpanKind, inputs: Any, attributes: dict | None = None, trajectory_name: str | None = None
) -> Span | None:
    """Start a span under the current frame (opening a trajectory, named ``trajectory_name`` or
    ``name``, if there is none); None if untraced. The building block of the decorators, for
    wrappers that need more control (``TracedAgentLoop``); pair every span with ``end_span``."""
    tracer = state.tracer
    if tracer is None or not trace_enabled.get():
        return None
    parent = current_frame.get()
    implicit = None
    if parent is None:
        implicit = parent = _open_implicit(tracer, trajectory_name or name)
        if implicit is None:
            return None
    span = Span(name, kind, parent.trajectory, parent.id, inputs, attributes)
    if tracer.emit_span_start:
        tracer.submit((SPAN_START, span))
    span.implicit = implicit
    span.ctx_token = current_frame.set(span)
    return span


def end_span(span: Span, outputs: Any = None, error: BaseException | None = None) -> None:
    current_frame.reset(span.ctx_token)
    span.ctx_token = None
    tracer = state.tracer
    if tracer is None:  # tracing was shut down while the span ran
        return
    tracer.end_span(span, outputs, error)
    if span.implicit is not None:
        tracer.close_trajectory(span.implicit, error)


class _NullSpan:
    """Stands in for a span when tracing is off, so ``with trace_span(...) as s`` code needs no ifs."""

    def __init__(self) -> None:
        self.outputs: Any = None
        self.attributes: dict[str, Any] = {}

    def fail(self, error: BaseException) -> None:
        pass


def trace_span(
    name: str, kind: SpanKind | str = SpanKind.CUSTOM, inputs: Any = None, **attributes: Any
) -> contextlib.AbstractContextManager[Span | _NullSpan]:
    """An ad-hoc span around a block. Set ``span.outputs`` inside the block to record a result;
    ``span.fail(exc)`` marks a handled error (an exception escaping the block is recorded too)."""
    return _SpanBlock(name, kind if type(kind) is SpanKind else SpanKind(kind), snapshot(inputs), attributes)


class _SpanBlock:
    """``trace_span``'s block: a class for the same reason as ``_TrajectoryBlock``."""

    __slots__ = ("args", "span")

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __enter__(self) -> Span | _NullSpan:
        name, kind, inputs, attributes = self.args
        span = self.span = begin_span(name, kind, inputs, attributes or None)
        return _NullSpan() if span is None else span

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        span = self.span
        if span is not None:
            end_span(span, span.outputs, exc)


def current_span() -> Span | None:
    """The innermost open span of this task (to add attributes from inside a traced call)."""
    frame = current_frame.get()
    return frame if type(frame) is Span else None


def set_reward(reward: float | None, trajectory_id: str | None = None, **details: Any) -> None:
    """Record a trajectory's reward: the current one, or any by id (also after it ended)."""
    tracer = state.tracer
    if tracer is None:
        return
    if trajectory_id is None:
        frame = current_frame.get()
        if frame is None:
            if not trace_enabled.get():  # a trajectory not traced (sampled out, trace=False): nothing to record
                return
            raise RuntimeError("set_reward() outside a trajectory needs trajectory_id=")
        frame.trajectory.reward = reward
        trajectory_id = frame.trajectory.id
    tracer.reward(trajectory_id, None if reward is None else float(reward), details)
