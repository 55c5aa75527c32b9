"""SGLang's native ``/generate``: token ids in (``input_ids``), token ids and log-probabilities out.

Request: ``{"input_ids", "sampling_params": {max_new_tokens, temperature, top_p, top_k, stop},
"return_logprob": true}``. Answer: ``output_ids`` and ``meta_info.output_token_logprobs``
(``[logprob, token_id, text]`` triples), ``meta_info.finish_reason``. Tool calls held to their
schemas (``llm.constrained``) go as ``sampling_params.structural_tag`` (a JSON string).
"""

from __future__ import annotations

import json
from typing import Any

from verl.workers.rollout.replica import TokenOutput

from rollscope.llm.base import LLMServerError, max_new_tokens, stop_list, stop_reason
from rollscope.llm.constrained import tool_call_structural_tag
from rollscope.llm.http_client import JSONEndpoint
from rollscope.semconv import TOOL_SCHEMAS


class SGLangLLM:
    def __init__(self, base_url: str, *, max_tokens: int = 512, timeout_s: float = 600.0) -> None:
        self.endpoint = JSONEndpoint(base_url, timeout_s=timeout_s, server="SGLang")
        self.max_tokens = max_tokens

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        params = {
            "max_new_tokens": max_new_tokens(sampling_params, self.max_tokens),
            "temperature": sampling_params.get("temperature", 1.0),
            "top_p": sampling_params.get("top_p", 1.0),
            "top_k": sampling_params.get("top_k", -1),
        }
        if stop := stop_list(sampling_params):
            params["stop"] = stop
        if tools := sampling_params.get(TOOL_SCHEMAS):
            params["structural_tag"] = json.dumps(tool_call_structural_tag(tools))
        data = await self.endpoint.post(
            "/generate",
            {"input_ids": list(prompt_ids), "sampling_params": params, "return_logprob": True, "rid": request_id},
        )
        ids = data.get("output_ids")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise LLMServerError(f"{self.endpoint.base_url}/generate: answer has no output_ids list: {str(data)[:200]}")
        meta = data.get("meta_info") or {}
        triples = meta.get("output_token_logprobs") or []
        log_probs = [float(t[0]) for t in triples] if len(triples) == len(ids) else None
        finish = (meta.get("finish_reason") or {}).get("type")
        return TokenOutput(
            token_ids=ids, log_probs=log_probs, stop_reason=stop_reason(finish), extra_fields={"finish_reason": finish}
        )

    async def close(self) -> None:
        await self.endpoint.close()
