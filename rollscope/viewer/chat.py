"""An llm turn as the conversation the model saw, on the trajectory page: the prompt's messages
(``store.chat``) followed by the model's reply; a prompt in no known template family shows its
raw text instead.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass

from markupsafe import Markup, escape

from rollscope.trajectory.chat import Message, messages, reply_text
from rollscope.trajectory.diff import turn_text
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord

# Special tokens left in a message's text (a BOS, an end-of-text, ``<|eot_id|>``, a tool-call tag):
# ``<|word|>`` (ChatML, Llama 3), Gemma's and sentencepiece's named ones, the hermes tool and
# reasoning tags.
_SPECIAL = re.compile(
    r"<\|[A-Za-z0-9_.:-]{1,40}\|>|</?(?:bos|eos|s|pad|unk|start_of_turn|end_of_turn|tool_call|"
    r"tool_response|tools|think)>"
)


def with_markers(text: str) -> Markup:
    """``text`` escaped for the page, each special token in it drawn as a marker (a boxed token
    that cannot be read as the model's words)."""
    out, last = [], 0
    for found in _SPECIAL.finditer(text):
        out += [escape(text[last : found.start()]), Markup('<span class="special-token">%s</span>') % found.group()]
        last = found.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


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
        found.append(Message("assistant", reply_text(reply)))
    return found


@dataclass
class Turn:
    """What an llm turn adds to the conversation: the messages since the previous turn's reply
    (new user or tool messages, then this reply), and how many earlier messages its prompt repeats
    (None: the turn it continues is not on this page)."""

    new: list[Message]
    earlier: int | None


def turns(record: TrajectoryRecord, shown: Container[str] | None = None) -> dict[str, Turn]:
    """Each llm span's ``Turn`` (of those in ``shown``, where given), in order, so that the
    trajectory reads as one conversation top to bottom. A turn stored as what it adds to the turn
    before is read from that alone (one turn's text, whatever the context's length); a prompt
    stored whole shows what follows the previous turn's messages and reply, or all of it where it
    does not start with them (a new conversation, a context the loop rewrote)."""
    prompts = record.prompts
    prompts.prefetch(s for s in record.spans if shown is None or s.id in shown)
    out: dict[str, Turn] = {}
    before: list[Message] = []  # the previous whole prompt's conversation, where that was the turn before
    seen: dict[str, int] = {}  # span id -> messages up to and with its reply
    for span in sorted((s for s in record.spans if s.kind == "llm"), key=lambda s: s.start_ns):
        if shown is not None and span.id not in shown:
            before = []
            continue
        base = prompts.base(span)
        if base is not None:
            added = prompts.added_text(span)
            found = messages(added) if added is not None else None
            if found is None:
                before = []
                continue
            reply = turn_text(span)
            new = found + ([Message("assistant", reply_text(reply))] if reply is not None else [])
            earlier = seen.get(base.id)
            out[span.id] = Turn(new, earlier)
            if earlier is not None:
                seen[span.id] = earlier + len(new)
            before = []
            continue
        found = conversation(span)
        if found is None:
            before = []
            continue
        shared = 0
        while shared < min(len(before), len(found) - 1) and _same(before[shared], found[shared]):
            shared += 1
        if shared < len(before):  # not a continuation of the conversation so far: shown whole
            shared = 0
        out[span.id] = Turn(found[shared:], shared)
        seen[span.id] = len(found)
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
