"""The loop's side of the retokenization check (``rollscope.trajectory.retokenization``): for a fast
tokenizer the run span carries a request and the check runs where the span is shaped, off the
rollout's thread; any other is checked here, off the event loop."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from rollscope.trajectory.retokenization import first_difference, tokenizer_file

__all__ = ["check", "request"]

# tokenizer -> (its backend's JSON file, the chat template with and without tools, its special
# tokens), or None where the check cannot run off the rollout's thread
_CONTEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def request(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Any,
    sequence: list[int],
    template_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What the check needs, for a fast tokenizer with a chat template; None for another: ``check``
    it here."""
    context = _context(tokenizer)
    if context is None:
        return None
    name, with_tools, without_tools, special = context
    return {
        "tokenizer": name,
        "template": with_tools if tools else without_tools,
        "special_tokens": special,
        "messages": messages,
        "tools": tools,
        "sequence": sequence,
        "kwargs": template_kwargs,
    }


def _context(tokenizer: Any) -> tuple | None:
    """``_read_context``, kept per tokenizer until its chat template is replaced."""
    template = getattr(tokenizer, "chat_template", None)
    try:
        found = _CONTEXTS.get(tokenizer)
    except TypeError:  # not weakly referenceable: read each time
        return _read_context(tokenizer)
    if found is None or found[0] is not template:
        found = _CONTEXTS[tokenizer] = (template, _read_context(tokenizer))
    return found[1]


def _read_context(tokenizer: Any) -> tuple | None:
    try:
        return (
            tokenizer_file(tokenizer.backend_tokenizer),
            tokenizer.get_chat_template(None, [{}]),
            tokenizer.get_chat_template(None, None),
            dict(tokenizer.special_tokens_map),
        )
    except Exception:  # a slow tokenizer, no chat template, no disk: checked in process (or not at all)
        return None


async def check(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Any,
    sequence: list[int],
    template_kwargs: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Render ``messages`` with the tokenizer's chat template (off the event loop, as verl renders)
    and compare with ``sequence``; None when the template cannot render them."""

    def render() -> list[int]:
        ids = tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=True, return_dict=False, **(template_kwargs or {})
        )
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    try:
        template_ids = await asyncio.get_running_loop().run_in_executor(None, render)
    except Exception:  # a template that cannot render this conversation: nothing to compare
        return None
    return first_difference(
        list(sequence), template_ids, decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
    )
