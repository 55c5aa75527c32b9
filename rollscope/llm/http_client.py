"""The HTTP part of the server clients: one pooled connection set, errors that say where and what."""

from __future__ import annotations

from typing import Any

import httpx

from rollscope.llm.base import LLMServerError


class JSONEndpoint:
    def __init__(self, base_url: str, *, timeout_s: float = 600.0, headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0), headers=headers, limits=limits)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            response = await self._client.post(url, json=body)
        except httpx.TransportError as exc:
            raise LLMServerError(f"{url}: cannot reach the server ({type(exc).__name__}: {exc})") from None
        if response.status_code != 200:
            raise LLMServerError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            data = response.json()
        except ValueError:
            raise LLMServerError(f"{url}: answered with something that is not JSON: {response.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise LLMServerError(f"{url}: expected a JSON object, got {type(data).__name__}")
        return data

    async def close(self) -> None:
        await self._client.aclose()
