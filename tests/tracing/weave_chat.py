"""Weave's UI's test for "this call is a chat", in Python: the predicates that decide whether a
call's page has a Chat tab (and compare shows chat bubbles) in its OpenAI format.

Ported from weave-js (github.com/wandb/weave, Apache-2.0), ``weave-js/src/components/
PagePanelComponents/Home/Browse3/pages/ChatView/ChatFormats/utils.ts`` (``isMessage``,
``isToolCalls``, ``isToolCall``, ``isMessageContent``, ``isMessagePart``, ``isPlaceholder``,
``isInternalMessage``) and ``openai.ts`` (``isTraceCallChatFormatOpenAI``), as read in 2026-12.
lodash's ``isPlainObject`` is a dict, ``isString`` a str, ``isArray`` a list.
"""

from __future__ import annotations

from typing import Any


def _has_string(obj: Any, prop: str) -> bool:
    return isinstance(obj, dict) and prop in obj and isinstance(obj[prop], str)


def is_tool_call(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and _has_string(call, "id")
        and _has_string(call, "type")
        and isinstance(call.get("function"), dict)
        and _has_string(call["function"], "name")
        and _has_string(call["function"], "arguments")
    )


def is_tool_calls(calls: Any) -> bool:
    if calls is None:
        return True
    return isinstance(calls, list) and all(is_tool_call(c) for c in calls)


def _is_placeholder(part: Any) -> bool:
    return (
        isinstance(part, dict)
        and _has_string(part, "name")
        and _has_string(part, "type")
        and ("default" not in part or isinstance(part["default"], str))
    )


def _is_internal_message(part: Any) -> bool:
    if not (isinstance(part, dict) and _has_string(part, "type")):
        return False
    if part["type"] == "text":
        return "text" not in part or isinstance(part["text"], str)
    if part["type"] == "image_url":
        return isinstance(part.get("image_url"), dict) and _has_string(part["image_url"], "url")
    if part["type"] == "tool_result":
        return _has_string(part, "tool_use_id")
    return False


def _is_message_part(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, dict) and (_is_placeholder(part) or _is_internal_message(part)))


def _is_message_content(content: Any) -> bool:
    return isinstance(content, str) or (isinstance(content, list) and all(_is_message_part(p) for p in content))


def is_message(message: Any) -> bool:
    if not isinstance(message, dict) or not _has_string(message, "role"):
        return False
    if "content" not in message and "tool_calls" not in message:
        return False
    if "content" in message and message["content"] is not None and not _is_message_content(message["content"]):
        return False
    return "tool_calls" not in message or is_tool_calls(message["tool_calls"])


def is_openai_chat(inputs: Any) -> bool:
    """``isTraceCallChatFormatOpenAI`` on a call's inputs."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("messages"), list):
        return False
    if _has_string(inputs, "model") and "mistral" in inputs["model"].lower():
        return False
    return all(is_message(m) for m in inputs["messages"])
