"""A decoded prompt as chat messages: what the otel and trackio backends show instead of template text."""

from __future__ import annotations

import re

_CHATML = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.S)


def prompt_messages(text: str) -> list[dict[str, str]]:
    """A decoded prompt as chat messages: split into roles where it is ChatML (Qwen's template,
    verl's usual models), one user message otherwise. An empty generation prompt is dropped."""
    messages = [{"role": role, "content": content.rstrip("\n")} for role, content in _CHATML.findall(text)]
    if messages and messages[-1]["role"] == "assistant" and not messages[-1]["content"]:
        messages.pop()
    return messages or [{"role": "user", "content": text}]
