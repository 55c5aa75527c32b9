"""What every rollscope LLM client shares: verl's ``generate`` shape, sampling defaults, one error type.

A client is any object with ``async generate(request_id, *, prompt_ids, sampling_params, **kw) ->
TokenOutput`` (verl's ``LLMServerClient`` contract), so the same client serves verl's
``AgentLoopWorker`` and ``rollscope run``. ``close()`` and ``check()`` are optional.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from verl.workers.rollout.replica import TokenOutput


class LLMServerError(RuntimeError):
    """The model cannot answer: server down, bad answer, model missing. Names what and where."""


class LLMClient(Protocol):
    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput: ...


def max_new_tokens(sampling_params: dict[str, Any], default: int) -> int:
    value = sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
    return int(value) if value else default


def stop_reason(finish_reason: Any) -> str:
    """verl's ``TokenOutput.stop_reason`` for a server's finish reason: "length" when the reply hit
    its token limit (as verl's own server reports it), "aborted", else "completed"."""
    if finish_reason == "length":
        return "length"
    return "aborted" if finish_reason in ("abort", "aborted") else "completed"


def stop_list(sampling_params: dict[str, Any]) -> list[str]:
    stop = sampling_params.get("stop") or []
    return [stop] if isinstance(stop, str) else list(stop)
