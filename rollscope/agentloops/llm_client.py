"""The LLM client an agent loop talks to, with every ``generate`` traced as an llm span."""

from __future__ import annotations

import sys
import time
from typing import Any

from rollscope.tracing import SpanKind, current_span, rollout_trace_op

_VERL_TRACING_BACKENDS = ("weave", "mlflow", "trackio")


def verl_traces_generate() -> str | None:
    """The backend verl's own ``LLMServerClient.generate`` decorator records into, if any.

    Put on each llm span as ``verl.traced`` so a rollscope backend writing to the same place
    (issue: weave) can skip the span instead of recording the call twice.
    """
    mod = sys.modules.get("verl.utils.rollout_trace")
    if mod is None:
        return None
    backend = mod.RolloutTraceConfig.get_backend()
    return backend if backend in _VERL_TRACING_BACKENDS else None


class TracedLLMClient:
    """Wraps verl's ``LLMServerClient`` (or any object with its ``generate``); all else passes through.

    ``tokenizer`` is here for token2text: the tracer decodes ``prompt_ids`` and ``token_ids``
    with the traced object's tokenizer, as verl's tracer does.
    """

    def __init__(self, inner: Any, tokenizer: Any = None) -> None:
        self.inner = inner
        self.tokenizer = tokenizer
        self._verl_backend = verl_traces_generate() if _is_verl_client(inner) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @rollout_trace_op(kind=SpanKind.LLM, name="llm.generate")
    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> Any:  # fmt: skip
        start = time.perf_counter()
        output = await self.inner.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)
        span = current_span()
        if span is not None:
            token_ids = getattr(output, "token_ids", None) or []
            span.attributes = {
                "gen_ai.usage.input_tokens": len(prompt_ids),
                "gen_ai.usage.output_tokens": len(token_ids),
                "gen_ai.response.finish_reasons": [getattr(output, "stop_reason", None)],
                "latency_s": time.perf_counter() - start,
            }
            if self._verl_backend:
                span.attributes["verl.traced"] = self._verl_backend
        return output


def _is_verl_client(client: Any) -> bool:
    generate = getattr(type(client), "generate", None)
    return getattr(generate, "__module__", "").startswith("verl.")


def traced_client(client: Any, tokenizer: Any = None) -> Any:
    """Wrap once: a client that is already traced is returned as is."""
    if client is None or isinstance(client, TracedLLMClient):
        return client
    return TracedLLMClient(client, tokenizer)
