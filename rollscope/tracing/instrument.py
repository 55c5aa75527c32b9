"""The instrumentation layer: what agent loops, tools and LLM clients use to trace themselves.

Everything else in ``rollscope.tracing`` whose module name starts with an underscore is private
(an import contract in ``pyproject.toml`` keeps code outside ``tracing/`` from importing it). The
names here are the ones the hot path needs, each cheap enough for every turn of every rollout:

- ``state.tracer``: the process's tracer, None when tracing is off. An attribute, read where a
  call would cost more than the check saves (``if state.tracer is None: return call``).
- ``begin_span``/``end_span``: a span around any piece of work, under the current frame, opening
  a trajectory when there is none; pair every ``begin_span`` with an ``end_span``.
- ``traced_callable``: a function or coroutine function with each call in a span, the one route
  of every traced callable (how it opens and ends its span given).
- ``traced_await``: the same around one awaitable, for wrappers with nothing to add in between.
- ``state.tracer.leaf_span``: a span recorded in one event once its call returned (no context
  change, no Span object): the LLM client's turns.
- ``current_frame``/``trace_enabled``: the task's innermost open span or trajectory, and whether
  tracing is on in this task (``rollout_trace_attr(trace=False)`` turns it off).
- ``prompt_inputs``/``replied``: an llm turn's prompt recorded as what it adds to the
  trajectory's last turn (``_turns``), and that turn's reply added to what the next is compared to.
- ``snapshot``/``native``: copies of what the caller mutates later; plain values of rich objects.
- ``verl_context``: whether verl allows tracing here, and the trajectory verl opened, if any.
- ``plan_samples``/``has_plan``: which samples of a step are traced (deterministic, whole groups).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any

from rollscope.tracing._api import begin_span, end_span, snapshot, traced_callable
from rollscope.tracing._context import current_frame, current_trajectory, trace_enabled, verl_context
from rollscope.tracing._payload import native
from rollscope.tracing._runtime import state
from rollscope.tracing._turns import Context, prompt_inputs, replied
from rollscope.tracing.spans import SpanKind, new_id

__all__ = [
    "Context",
    "begin_span",
    "current_frame",
    "current_trajectory",
    "end_span",
    "has_plan",
    "native",
    "new_id",
    "plan_samples",
    "prompt_inputs",
    "replied",
    "snapshot",
    "state",
    "trace_enabled",
    "traced_await",
    "traced_callable",
    "verl_context",
]


async def traced_await(
    call: Awaitable[Any], name: str, kind: SpanKind, inputs: Any, attributes: dict | None = None, decoder: Any = None
) -> Any:
    """``await call`` inside a span: its result the span's outputs, an exception recorded on the
    span and raised on. ``decoder``: the tokenizer that turns the span's token ids into text."""
    span = begin_span(name, kind, inputs, attributes)
    if span is None:
        return await call
    span.decoder = decoder
    try:
        output = await call
    except BaseException as exc:
        end_span(span, None, exc)
        raise
    end_span(span, output)
    return output


def has_plan(step: Any) -> bool:
    """Whether this step's traced samples were chosen already (always, when every sample is)."""
    sampler = state.tracer.sampler if state.tracer is not None else None
    return sampler is None or sampler.k is None or sampler.has_plan(step)


def plan_samples(step: Any, sample_indices: Iterable[Any]) -> None:
    """Choose which of this step's samples are traced, from the worker's whole batch."""
    if state.tracer is not None:
        state.tracer.sampler.plan(step, sample_indices)
