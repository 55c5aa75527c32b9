"""The HTTP part of the server clients: one pooled connection set, errors that say where and what."""

from __future__ import annotations

from typing import Any

import httpx

from rollscope.llm.base import LLMServerError


class JSONEndpoint:
    """POSTs of JSON to one server; ``server`` names it in errors ("SGLang at URL: ...")."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 600.0,
        headers: dict[str, str] | None = None,
        server: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.server = server
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers, limits=limits)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        where = f"{self.server} at {url}" if self.server else url
        try:
            response = await self._client.post(url, json=body)
        except httpx.RemoteProtocolError:
            raise LLMServerError(
                f"{where}: the server closed the connection without answering (did it stop? its log says why)"
            ) from None
        except httpx.TransportError as exc:
            raise LLMServerError(f"{where}: cannot reach the server ({type(exc).__name__}: {exc})") from None
        if response.status_code != 200:
            raise LLMServerError(f"{where}: HTTP {response.status_code}: {_said(response)}")
        try:
            data = response.json()
        except ValueError:
            raise LLMServerError(f"{url}: answered with something that is not JSON: {response.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise LLMServerError(f"{url}: expected a JSON object, got {type(data).__name__}")
        return data

    async def close(self) -> None:
        await self._client.aclose()


def _said(response: httpx.Response) -> str:
    """What an error answer says, in one line: the message of an OpenAI-style (vLLM, SGLang) or
    FastAPI error body, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        message = message or body.get("message") or body.get("detail")
        if isinstance(message, str) and message:
            return " ".join(message.split())[:300]
    return " ".join(response.text.split())[:300]
