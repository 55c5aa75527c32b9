"""The LLM client an agent loop talks to, with every ``generate`` traced as an llm span."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Any

from rollscope.tracing import SpanKind
from rollscope.tracing.instrument import current_frame, snapshot, state, trace_enabled, traced_await
from rollscope.tracing.spans import Span, Trajectory

LLM_SPAN_NAME = "llm.generate"


class TracedLLMClient:
    """Wraps verl's ``LLMServerClient`` (or any object with its ``generate``); all else passes through.

    ``tokenizer`` is here for token2text: the tracer decodes ``prompt_ids`` and ``token_ids``
    with the traced object's tokenizer, as verl's tracer does.
    """

    def __init__(self, inner: Any, tokenizer: Any = None) -> None:
        self.inner = inner
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                 **kwargs: Any) -> Awaitable[Any]:  # fmt: skip
        """One llm span per call, its inputs as ``rollout_trace_op`` would bind them. Written out
        rather than decorated, and untraced it hands back the inner call itself: it runs on every
        turn of every rollout. Inside a trajectory a call that succeeds is recorded as one leaf-span
        event when it returns (no Span object, no context change: ``Tracer.leaf_span``; what the
        inner client traces itself hangs beside the turn, under the loop's span). Token counts,
        finish reason and latency are derived where the span is shaped (``tracing._shaping``)."""
        call = self.inner.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        if state.tracer is None or not trace_enabled.get():
            return call
        # The containers the loop mutates later are copied (``snapshot``, inlined for the usual
        # types); kwargs is this call's own dict (its None entries are dropped where it is shaped).
        inputs = {
            "request_id": request_id,
            "prompt_ids": prompt_ids.copy() if type(prompt_ids) is list else snapshot(prompt_ids),
            "sampling_params": sampling_params.copy() if type(sampling_params) is dict else snapshot(sampling_params),
            "kwargs": kwargs,
        }
        parent = current_frame.get()
        if parent is None:  # outside any trajectory: the span opens one
            return traced_await(call, LLM_SPAN_NAME, SpanKind.LLM, inputs, decoder=self.tokenizer)
        return self._leaf(call, inputs, parent)

    async def _leaf(self, call: Awaitable[Any], inputs: dict[str, Any], parent: Span | Trajectory) -> Any:
        start_ns = time.time_ns()
        try:
            output = await call
        except BaseException as exc:
            span = Span(LLM_SPAN_NAME, SpanKind.LLM, parent.trajectory, parent.id, inputs, None)
            span.start_ns, span.decoder = start_ns, self.tokenizer
            if state.tracer is not None:
                state.tracer.end_span(span, None, exc)
            raise
        tracer = state.tracer
        if tracer is not None:  # (unless tracing was shut down while the call ran)
            tracer.leaf_span(parent, LLM_SPAN_NAME, SpanKind.LLM, start_ns, inputs, output, None,
                             self.tokenizer)  # fmt: skip
        return output


def traced_client(client: Any, tokenizer: Any = None) -> Any:
    """Wrap once: a client that is already traced is returned as is."""
    if client is None or isinstance(client, TracedLLMClient):
        return client
    return TracedLLMClient(client, tokenizer)
