"""ScriptedLLM: a test double for an LLM server, with verl's token-in/token-out shape.

Replies are scripted per turn of each request (a trajectory keeps one request id across its
turns), so tests and benchmarks get deterministic conversations without model weights.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from verl.workers.rollout.replica import TokenOutput

Script = Sequence[str] | Callable[[int, list[int]], str]


class ScriptedLLM:
    """``generate`` returns the next scripted reply for the request, tokenized, plus EOS.

    ``replies`` is a list (turn i gets ``replies[min(i, len-1)]``) or a function
    ``(turn, prompt_ids) -> text``. Log-probabilities are deterministic per position.
    """

    def __init__(self, tokenizer: Any, replies: Script, *, latency_s: float = 0.0) -> None:
        self.tokenizer = tokenizer
        self.replies = replies
        self.latency_s = latency_s
        self.turns: dict[str, int] = defaultdict(int)
        self.calls: list[dict[str, Any]] = []
        self._cache: dict[str, list[int]] = {}

    def _reply(self, turn: int, prompt_ids: list[int]) -> str:
        if callable(self.replies):
            return self.replies(turn, prompt_ids)
        return self.replies[min(turn, len(self.replies) - 1)]

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        turn = self.turns[request_id]
        self.turns[request_id] += 1
        self.calls.append({"request_id": request_id, "turn": turn, "prompt_len": len(prompt_ids)})
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self._reply(turn, prompt_ids)
        ids = self._cache.get(text)
        if ids is None:
            ids = [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]
            self._cache[text] = ids
        max_tokens = sampling_params.get("max_tokens") or sampling_params.get("max_new_tokens")
        cut = bool(max_tokens) and len(ids) > max_tokens
        ids = ids[:max_tokens] if cut else ids
        return TokenOutput(
            token_ids=list(ids),
            log_probs=[-0.01 * (i + 1) for i in range(len(ids))],
            stop_reason="length" if cut else "completed",
        )
