"""Retokenization drift: do the tokens the model was trained on equal what the chat template makes
of the same conversation?

A multi-turn loop builds its token sequence turn by turn (the prompt, the sampled tokens of each
reply, each tool response rendered on its own); the trainer trains on that sequence. Whoever later
renders the conversation's messages with the chat template — an SFT export, a reward model, the
next turn of a loop that re-renders — gets different tokens wherever the template does not
reproduce what the model sampled (whitespace a template strips, reasoning it drops, a tool call it
re-serialises). The check renders the whole conversation once and reports the first position
where the two sequences differ, with both sides around it. Only positions both sequences have are
compared: the template's closing markup after the last reply is not a drift.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rollscope.store.summary import RETOKENIZATION

__all__ = ["RETOKENIZATION", "check", "first_difference"]
WINDOW = 8  # tokens shown on each side of the first difference


def first_difference(rollout_ids: list[int], template_ids: list[int], window: int = WINDOW) -> dict[str, Any]:
    """The comparison of the loop's token sequence with the template's rendering of its messages."""
    shared = min(len(rollout_ids), len(template_ids))
    at = next((i for i in range(shared) if rollout_ids[i] != template_ids[i]), None)
    result: dict[str, Any] = {"match": at is None, "rollout_length": len(rollout_ids),
                              "template_length": len(template_ids)}  # fmt: skip
    if at is not None:
        low = max(0, at - window)
        result.update({"position": at, "window_start": low, "rollout": rollout_ids[low: at + window],
                       "template": template_ids[low: at + window]})  # fmt: skip
    return result


async def check(tokenizer: Any, messages: list[dict[str, Any]], tools: Any, sequence: list[int],
                template_kwargs: dict[str, Any] | None = None) -> dict[str, Any] | None:  # fmt: skip
    """Render ``messages`` with the tokenizer's chat template (off the event loop, as verl renders)
    and compare with ``sequence``; None when the template cannot render them."""

    def render() -> list[int]:
        ids = tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=True, return_dict=False,
                                            **(template_kwargs or {}))  # fmt: skip
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    try:
        template_ids = await asyncio.get_running_loop().run_in_executor(None, render)
    except Exception:  # a template that cannot render this conversation: nothing to compare
        return None
    return first_difference(list(sequence), template_ids)
