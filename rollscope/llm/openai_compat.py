"""OpenAI-compatible ``/v1/completions`` (vLLM, llama.cpp, ...), token ids in and out where the server can.

Token-in/token-out matters: the agent loop must train on exactly the tokens the model produced. So
the prompt goes as token ids and the answer's ids are read from, in order: ``choices[0].token_ids``
(vLLM's ``return_token_ids``), ``logprobs.tokens`` written as ``token_id:N`` (vLLM's
``return_tokens_as_token_ids``). A server that refuses token-id prompts (llama-cpp-python's)
gets the prompt as text instead and its answer is re-tokenized; such outputs say so in
``extra_fields["retokenized"]`` because their ids may differ from what the model sampled.

Tool calls held to their schemas (``llm.constrained``) go as vLLM's structured outputs: a
structural tag in ``response_format``.
"""

from __future__ import annotations

import os
from typing import Any

from verl.workers.rollout.replica import TokenOutput

from rollscope.llm.base import LLMServerError, max_new_tokens, stop_list, stop_reason
from rollscope.llm.constrained import tool_call_structural_tag
from rollscope.llm.http_client import JSONEndpoint
from rollscope.semconv import TOOL_SCHEMAS

API_KEY_ENV = "ROLLSCOPE_LLM_API_KEY"


class OpenAICompatibleLLM:
    def __init__(
        self,
        base_url: str,
        *,
        tokenizer: Any = None,
        model: str | None = None,
        max_tokens: int = 512,
        api_key: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        api_key = api_key or os.environ.get(API_KEY_ENV)
        base_url = base_url.rstrip("/").removesuffix("/v1")
        self.endpoint = JSONEndpoint(
            base_url, timeout_s=timeout_s, headers={"Authorization": f"Bearer {api_key}"} if api_key else None
        )
        self.tokenizer = tokenizer
        self.model = model
        self.max_tokens = max_tokens
        self.text_prompts = False  # set once a server refuses token-id prompts

    async def check(self) -> None:
        """Fail early and clearly when the server is not there (also learns the model name)."""
        if self.model is None:
            self.model = await self._first_model()

    async def _first_model(self) -> str:
        url = f"{self.endpoint.base_url}/v1/models"
        try:
            response = await self.endpoint._client.get(url)
        except Exception as exc:
            raise LLMServerError(f"{url}: cannot reach the server ({type(exc).__name__}: {exc})") from None
        try:
            return response.json()["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMServerError(f"{url}: expected an OpenAI model list, got {response.text[:200]!r}") from None

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        if self.model is None:
            await self.check()
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_new_tokens(sampling_params, self.max_tokens),
            "temperature": sampling_params.get("temperature", 1.0),
            "top_p": sampling_params.get("top_p", 1.0),
            "logprobs": 1,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if (top_k := sampling_params.get("top_k")) and top_k > 0:
            body["top_k"] = top_k
        if stop := stop_list(sampling_params):
            body["stop"] = stop
        if tools := sampling_params.get(TOOL_SCHEMAS):
            body["response_format"] = tool_call_structural_tag(tools)
        data = await self._complete(body, list(prompt_ids))
        return self._parse(data, stop)

    async def _complete(self, body: dict[str, Any], prompt_ids: list[int]) -> dict[str, Any]:
        if not self.text_prompts:
            try:
                return await self.endpoint.post("/v1/completions", {**body, "prompt": prompt_ids})
            except LLMServerError as exc:
                # An HTTP answer (not a transport failure) to a token-id prompt: try text once; a server
                # that takes it (llama-cpp-python answers 500 with a validation error) gets text from now on.
                if self.tokenizer is None or "HTTP " not in str(exc):
                    raise
        bos = getattr(self.tokenizer, "bos_token_id", None)
        if prompt_ids and prompt_ids[0] == bos:
            prompt_ids = prompt_ids[1:]  # a text-prompt server adds its own BOS
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        data = await self.endpoint.post("/v1/completions", {**body, "prompt": text})
        self.text_prompts = True
        return data

    def _parse(self, data: dict[str, Any], stop: list[str]) -> TokenOutput:
        where = f"{self.endpoint.base_url}/v1/completions"
        try:
            choice = data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise LLMServerError(f"{where}: answer has no choices: {str(data)[:200]}") from None
        logprobs = choice.get("logprobs") or {}
        ids = choice.get("token_ids") or _ids_from_tokens(logprobs.get("tokens"))
        retokenized = ids is None
        if retokenized:
            text = choice.get("text")
            if not isinstance(text, str) or self.tokenizer is None:
                raise LLMServerError(f"{where}: answer has neither token ids nor text: {str(choice)[:200]}")
            if stop and not any(text.endswith(s) for s in stop):
                text += _matched_stop(choice, stop)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        token_logprobs = logprobs.get("token_logprobs")
        aligned = token_logprobs and len(token_logprobs) == len(ids)
        log_probs = [float(x or 0.0) for x in token_logprobs] if aligned else None
        extra = {"finish_reason": choice.get("finish_reason"), "retokenized": retokenized}
        return TokenOutput(
            token_ids=list(ids),
            log_probs=log_probs,
            stop_reason=stop_reason(choice.get("finish_reason")),
            extra_fields=extra,
        )

    async def close(self) -> None:
        await self.endpoint.close()


def _ids_from_tokens(tokens: Any) -> list[int] | None:
    if not tokens or not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return None
    return [int(t.split(":", 1)[1]) for t in tokens]


def _matched_stop(choice: dict[str, Any], stop: list[str]) -> str:
    """Servers that drop the stop string: put it back when the server says which one matched, so a
    ``</tool_call>`` the model wrote is there for the tool parser (rollscope's parser also reads
    calls cut off before their closing tag)."""
    matched = choice.get("stop_reason") or choice.get("matched_stop")
    if isinstance(matched, str) and matched in stop:
        return matched
    return ""
