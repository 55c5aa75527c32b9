"""The LLM client an agent loop talks to, with every call through it traced: ``generate`` and
any other method that returns token output (a recipe's ``generate_with_version``) as llm spans,
any other method as a span of its own."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from rollscope.semconv import CONSTRAIN, LLM_SPAN_NAME, TOOL_SCHEMAS
from rollscope.tracing import SpanKind
from rollscope.tracing.instrument import (
    Context,
    begin_span,
    current_frame,
    end_span,
    new_id,
    prompt_inputs,
    replied,
    snapshot,
    state,
    trace_enabled,
    traced_await,
    traced_callable,
)
from rollscope.tracing.spans import Span, Trajectory

log = logging.getLogger("rollscope.agentloops")

# The loop instance whose run is executing in this task (``traced_loop``): its tools' schemas are
# what ``constrain_tool_calls`` holds a reply to, and a ``super().run()`` adds no second span.
running_loop: ContextVar[Any] = ContextVar("rollscope_running_loop", default=None)
_unconstrained_warned: set[type] = set()


def tool_schemas_of(loop: Any) -> list[dict[str, Any]]:
    """The tool schemas a loop shows its model: its ``tool_schemas`` where it keeps them (verl's
    ``ToolAgentLoop`` does), else those of its tools (``self.tools``, or the ``tools=`` verl gave it)."""
    schemas = getattr(loop, "tool_schemas", None)
    if isinstance(schemas, list) and schemas:
        return [s.model_dump(exclude_unset=True, exclude_none=True) if hasattr(s, "model_dump") else s for s in schemas]
    tools = getattr(loop, "__dict__", {}).get("tools")
    tools = tools.values() if isinstance(tools, dict) else tools
    if not tools:
        tools = getattr(loop, "_rollscope_given_tools", None) or ()
    return [
        t.tool_schema.model_dump(exclude_unset=True, exclude_none=True)
        for t in tools
        if getattr(t, "tool_schema", None) is not None
    ]


def constrained(sampling_params: dict[str, Any]) -> dict[str, Any]:
    """The sampling parameters without the run's ``constrain_tool_calls`` key (no engine's), with
    the running loop's tool schemas where it is true: a loop that passes its sampling parameters on
    to ``generate`` gets its calls constrained as the bundled loop's are. Warned once per loop class
    where it has no tools to hold them to."""
    params = {k: v for k, v in sampling_params.items() if k != CONSTRAIN}
    if sampling_params[CONSTRAIN] and TOOL_SCHEMAS not in params:
        loop = running_loop.get()
        schemas = tool_schemas_of(loop) if loop is not None else []
        if schemas:
            params[TOOL_SCHEMAS] = schemas
        elif type(loop) not in _unconstrained_warned:
            _unconstrained_warned.add(type(loop))
            who = type(loop).__name__ if loop is not None else "this call"
            log.warning(
                "constrain_tool_calls is set, but %s has no tool schemas (no tools given, no tool_schemas "
                "kept): its replies are not constrained",
                who,
            )
    return params


class TracedLLMClient:
    """Wraps verl's ``LLMServerClient`` (or any object with its ``generate``); all else passes through.

    ``tokenizer`` is here for token2text: the tracer decodes ``prompt_ids`` and ``token_ids``
    with the traced object's tokenizer, as verl's tracer does.
    """

    def __init__(self, inner: Any, tokenizer: Any = None) -> None:
        self.inner = inner
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        """The inner client's attribute; a public method traced (``_traced_method``), made once."""
        value = getattr(self.inner, name)
        if name.startswith("_") or not callable(value) or isinstance(value, type):
            return value
        traced = self.__dict__[name] = _traced_method(value, f"llm.{name}", self.tokenizer)
        return traced

    def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> Awaitable[Any]:
        """One llm span per call, its inputs as ``rollout_trace_op`` would bind them. Written out
        rather than decorated, and untraced it hands back the inner call itself: it runs on every
        turn of every rollout. Inside a trajectory a call that succeeds is recorded as one leaf-span
        event when it returns (no Span object, no context change: ``Tracer.leaf_span``; what the
        inner client traces itself hangs beside the turn, under the loop's span). Token counts,
        finish reason and latency are derived where the span is shaped (``tracing._shaping``)."""
        if CONSTRAIN in sampling_params:  # (the run's key; the bundled loop takes it out itself)
            sampling_params = constrained(sampling_params)
        call = self.inner.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        if state.tracer is None or not trace_enabled.get():
            return call
        # The containers the loop mutates later are copied (``snapshot``, inlined for the usual
        # types); kwargs is this call's own dict (its None entries are dropped where it is shaped).
        # Inside a trajectory, a prompt that continues its last turn is recorded as what it adds.
        inputs: dict[str, Any] = {"request_id": request_id}
        parent = current_frame.get()
        if parent is not None and type(prompt_ids) is list:
            span_id = new_id()
            context = prompt_inputs(parent.trajectory, span_id, prompt_ids, inputs)
        else:
            span_id = context = None
            inputs["prompt_ids"] = prompt_ids.copy() if type(prompt_ids) is list else snapshot(prompt_ids)
        params = sampling_params
        inputs["sampling_params"] = params.copy() if type(params) is dict else snapshot(params)
        inputs["kwargs"] = kwargs
        if parent is None:  # outside any trajectory: the span opens one
            return traced_await(call, LLM_SPAN_NAME, SpanKind.LLM, inputs, decoder=self.tokenizer)
        return self._leaf(call, inputs, parent, span_id, context)

    async def _leaf(
        self,
        call: Awaitable[Any],
        inputs: dict[str, Any],
        parent: Span | Trajectory,
        span_id: str | None,
        context: Context | None,
    ) -> Any:
        start_ns = time.time_ns()
        try:
            output = await call
        except BaseException as exc:
            span = Span(LLM_SPAN_NAME, SpanKind.LLM, parent.trajectory, parent.id, inputs, None)
            span.start_ns, span.decoder = start_ns, self.tokenizer
            if span_id is not None:
                span.id = span_id
            if state.tracer is not None:
                state.tracer.end_span(span, None, exc)
            raise
        if context is not None:
            replied(parent.trajectory, context, output)
        tracer = state.tracer
        if tracer is not None:  # (unless tracing was shut down while the call ran)
            tracer.leaf_span(
                parent, LLM_SPAN_NAME, SpanKind.LLM, start_ns, inputs, output, None, self.tokenizer, span_id
            )
        return output


def traced_client(client: Any, tokenizer: Any = None) -> Any:
    """Wrap once: a client that is already traced is returned as is."""
    if client is None or isinstance(client, TracedLLMClient):
        return client
    return TracedLLMClient(client, tokenizer)


def _traced_method(method: Callable[..., Any], span_name: str, tokenizer: Any) -> Callable[..., Any]:
    """A server manager's method other than ``generate``: a span per call, its inputs bound by
    name (``prompt_ids`` and ``sampling_params`` where the method takes them); the span is an llm
    span when what it returns is token output (``token_ids``), so its turn counts as one."""
    try:
        signature: inspect.Signature | None = inspect.signature(method)
    except (TypeError, ValueError):
        signature = None

    def inputs_of(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            return snapshot(dict(signature.bind_partial(*args, **kwargs).arguments))  # type: ignore[union-attr]
        except (AttributeError, TypeError):
            return snapshot({"args": list(args), "kwargs": kwargs})

    def finished(span: Any, result: Any, error: BaseException | None = None) -> None:
        if error is None and getattr(result, "token_ids", None) is not None:
            span.kind, span.decoder = SpanKind.LLM, tokenizer
            if not hasattr(result, "__pydantic_fields_set__") and hasattr(result, "__dict__"):
                result = dict(vars(result))  # its fields, as verl's TokenOutput is recorded
        end_span(span, None if error is not None else result, error)

    def open_span(args: tuple, kwargs: dict[str, Any]) -> Any:
        return begin_span(span_name, SpanKind.CUSTOM, inputs_of(args, kwargs))

    return traced_callable(method, open_span, finished)
