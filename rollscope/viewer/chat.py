"""An llm turn as the conversation the model saw: the prompt's rendered chat template split back
into role-tagged messages, followed by the model's reply.

Chat templates differ only in their turn markers, so each known family is one pattern (ChatML:
Qwen and the bundled examples; Gemma; Llama 3). A prompt in none of them gives None, and the raw
prompt text is shown instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markupsafe import Markup, escape

from rollscope.store.diff import turn_text
from rollscope.store.records import SpanRecord, TrajectoryRecord

# Each family: a turn's start, its role, its text up to its end marker, or up to the next turn's
# start where a template leaves the end out (the bundled Gemma template's tool calls end the
# model's turn at ``</tool_call>``, the tool's response following at once).
_TEMPLATES = (
    (re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|(?=<\|im_start\|>)|\Z)", re.S), "<|im_end|>"),
    (re.compile(r"<start_of_turn>(\w+)\n(.*?)(?:<end_of_turn>|(?=<start_of_turn>)|\Z)", re.S), "<end_of_turn>"),
    (re.compile(r"<\|start_header_id\|>(\w+)<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|(?=<\|start_header_id\|>)|\Z)",
                re.S), "<|eot_id|>"),
)
# A user turn that only carries a tool's response (templates with no tool role write it so).
_TOOL_RESPONSE = re.compile(r"\s*<tool_response>.*</tool_response>\s*", re.S)
_ROLES = {"model": "assistant", "ipython": "tool"}  # Gemma's and Llama 3's names for them


# Special tokens left in a message's text (a BOS, an end-of-text, ``<|eot_id|>``, a tool-call tag):
# ``<|word|>`` (ChatML, Llama 3), Gemma's and sentencepiece's named ones, the hermes tool and
# reasoning tags.
_SPECIAL = re.compile(r"<\|[A-Za-z0-9_.:-]{1,40}\|>|</?(?:bos|eos|s|pad|unk|start_of_turn|end_of_turn|tool_call|"
                      r"tool_response|tools|think)>")


def with_markers(text: str) -> Markup:
    """``text`` escaped for the page, each special token in it drawn as a marker (a boxed token
    that cannot be read as the model's words)."""
    out, last = [], 0
    for found in _SPECIAL.finditer(text):
        out += [escape(text[last:found.start()]), Markup('<span class="special-token">%s</span>') % found.group()]
        last = found.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


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


def conversation(span: SpanRecord) -> list[Message] | None:
    """The turn's prompt as messages, then the reply as the assistant's message (its end marker
    removed); None when the prompt text was not recorded or its template is unknown."""
    prompt = span.inputs.get("prompt_text") if isinstance(span.inputs, dict) else None
    if not isinstance(prompt, str):
        return None
    found = messages(prompt)
    if found is None:
        return None
    reply = turn_text(span)
    if reply is not None:
        for _, end in _TEMPLATES:
            reply = reply.split(end, 1)[0] if end in reply else reply
        found.append(Message("assistant", reply))
    return found


@dataclass
class Turn:
    """What an llm turn adds to the conversation: the messages since the previous turn's reply
    (new user or tool messages, then this reply), and how many earlier messages its prompt repeats."""

    new: list[Message]
    earlier: int


def turns(record: TrajectoryRecord) -> dict[str, Turn]:
    """Each llm span's ``Turn``, in order, so that the trajectory reads as one conversation top to
    bottom: a prompt that starts with the previous turn's messages and reply shows only what follows
    them (a prompt that does not, a new conversation, shows whole)."""
    out: dict[str, Turn] = {}
    before: list[Message] = []
    for span in sorted((s for s in record.spans if s.kind == "llm"), key=lambda s: s.start_ns):
        found = conversation(span)
        if found is None:
            continue
        shared = 0
        while shared < min(len(before), len(found) - 1) and _same(before[shared], found[shared]):
            shared += 1
        if shared < len(before):  # not a continuation of the conversation so far: shown whole
            shared = 0
        out[span.id] = Turn(found[shared:], shared)
        before = found
    return out


def _same(a: Message, b: Message) -> bool:
    return a.role == b.role and a.content.strip() == b.content.strip()


def ground_truth(record: TrajectoryRecord) -> str | None:
    """The row's ``reward_model.ground_truth`` as the run span recorded it."""
    for span in record.spans:
        inputs = span.inputs if isinstance(span.inputs, dict) else {}
        reward_model = inputs.get("reward_model")
        if isinstance(reward_model, dict) and reward_model.get("ground_truth") is not None:
            value = reward_model["ground_truth"]
            return value if isinstance(value, str) else str(value)
    return None
