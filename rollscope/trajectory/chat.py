"""An llm turn as a conversation: its rendered prompt split back into role-tagged messages, and the
same turn in OpenAI's chat shape (what Weave's UI and other chat viewers draw as a chat).

Chat templates differ only in their turn markers, so each known family is one pattern (ChatML:
Qwen and the bundled examples; Gemma; Llama 3). A prompt in none of them gives None. Tool calls are
hermes' ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the format verl's and
rollscope's loops parse) and tool responses ``<tool_response>...</tool_response>``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Each family: a turn's start, its role, its text up to its end marker, or up to the next turn's
# start where a template leaves the end out (the bundled Gemma template's tool calls end the
# model's turn at ``</tool_call>``, the tool's response following at once).
_TEMPLATES = (
    (re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.S), "<|im_end|>"),
    (re.compile(r"<start_of_turn>(\w+)\n(.*?)(?:<end_of_turn>|(?=<start_of_turn>)|\Z)", re.S), "<end_of_turn>"),
    (
        re.compile(
            r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|(?=<\|start_header_id\|>)|\Z)", re.S
        ),
        "<|eot_id|>",
    ),
)
END_MARKERS = tuple(end for _, end in _TEMPLATES)  # what ends a model's turn, per family
# A user turn that only carries a tool's response (templates with no tool role write it so).
_TOOL_RESPONSE = re.compile(r"\s*<tool_response>.*</tool_response>\s*", re.S)
_ROLES = {"model": "assistant", "ipython": "tool"}  # Gemma's and Llama 3's names for them
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.S)
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


@dataclass
class Message:
    role: str
    content: str


def messages(prompt_text: str) -> list[Message] | None:
    """The messages in a rendered prompt (the trailing empty assistant header dropped), or None
    when the template is not one of the known families."""
    for pattern, _ in _TEMPLATES:
        found = pattern.findall(prompt_text)
        if found:
            out = [Message(_role(role, content), content.strip("\n")) for role, content in found]
            if out and out[-1].role == "assistant" and not out[-1].content:
                out.pop()
            return out
    return None


def _role(role: str, content: str) -> str:
    role = _ROLES.get(role, role)
    return "tool" if role == "user" and _TOOL_RESPONSE.fullmatch(content) else role


def reply_text(text: str) -> str:
    """A reply's text without the end-of-turn marker and what follows it."""
    for end in END_MARKERS:
        if end in text:
            return text.split(end, 1)[0]
    return text


def openai_messages(prompt_text: str) -> list[dict[str, Any]] | None:
    """The prompt's messages in OpenAI's chat shape: an assistant's tool calls as ``tool_calls``
    (``arguments`` a JSON string), each tool response a ``tool`` message answering the call it
    follows (``tool_call_id``). None when the template is not one of the known families."""
    found = messages(prompt_text)
    if found is None:
        return None
    out: list[dict[str, Any]] = []
    unanswered: list[str] = []  # the ids of the last assistant message's calls, in order
    for i, m in enumerate(found):
        if m.role == "assistant":
            message = openai_reply(m.content, f"call_{i}")
            unanswered = [c["id"] for c in message.get("tool_calls") or ()]
            out.append(message)
        elif m.role == "tool":
            bodies = _RESPONSE.findall(m.content) or [m.content]
            for body in bodies:
                message = {"role": "tool", "content": body}
                if unanswered:
                    message["tool_call_id"] = unanswered.pop(0)
                out.append(message)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def openai_reply(text: str, call_prefix: str = "call") -> dict[str, Any]:
    """A model's reply as an OpenAI assistant message: each well-formed hermes tool call one of
    ``tool_calls`` (ids ``<call_prefix>_<n>``), the text around them the content (a call whose
    JSON does not read stays in the text, as the model wrote it)."""
    text = reply_text(text)
    calls, kept, last = [], [], 0
    for found in _CALL.finditer(text):
        call = _call(found.group(1), f"{call_prefix}_{len(calls)}")
        if call is None:
            continue
        calls.append(call)
        kept.append(text[last : found.start()])
        last = found.end()
    kept.append(text[last:])
    message: dict[str, Any] = {"role": "assistant", "content": "".join(kept).strip() if calls else text}
    if calls:
        message["tool_calls"] = calls
    return message


def _call(body: str, call_id: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return None
    arguments = parsed.get("arguments", {})
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": parsed["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }
