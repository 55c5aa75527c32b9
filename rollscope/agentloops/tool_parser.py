"""Tool-call parsing that never drops a call silently.

Formats: hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and the same
without the closing tag at the very end of a response — what a model stopped by the stop string
``</tool_call>`` (the embedded model's setup) leaves behind; ``llama3_json``: Llama 3.x's reply
that is one JSON call ``{"name": ..., "parameters": {...}}`` (after ``<|python_tag|>`` or not).
The end-of-turn token a reply ends with (``<|im_end|>``, ``<|eot_id|>``) is not part of its text:
a chat template adds it where the turn ends, so left in the message it would be rendered twice.
A call that cannot be parsed comes back as a ``FunctionCall`` named ``MALFORMED_CALL`` whose
arguments carry the problem, so the loop can tell the model what went wrong (verl's hermes parser
logs and drops it). Each call also keeps the text it was read from and its place in the reply
(``WrittenCall``): nothing the model wrote is lost between the reply and its message.
"""

from __future__ import annotations

import json
import re
import weakref
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.utils.ray_utils import get_event_loop

MALFORMED_CALL = "__malformed_tool_call__"
# A call's body is parsed only up to this size: whatever a model writes, parsing stays bounded.
MAX_CALL_CHARS = 1 << 20
_DECODER = json.JSONDecoder()
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_JSON_CALL = re.compile(r'\s*(?:<\|python_tag\|>\s*)?(?=\{\s*"name"\s*:)')  # where a Llama 3 JSON call starts
# Tokens that end a turn in the chat templates of the families users train (besides eos).
END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
)


class WrittenCall(FunctionCall):
    """A call and how the model wrote it: ``text``, its block exactly as written (from
    ``<tool_call>`` through ``</tool_call>``, or to the reply's end when it was never closed: a
    garbled closing tag and what follows stay in it), and ``at``, its position in the reply's
    content (the text outside the calls). The content with each ``text`` put back at its ``at`` is
    the reply itself, so a chat template that renders them gives back the tokens the model sampled
    (the retokenization check), whatever the call's JSON looked like or whether it parsed at all."""

    text: str
    at: int


def parse_call(body: str) -> FunctionCall:
    """One ``<tool_call>`` body -> a call, or a MALFORMED_CALL explaining the problem. Never raises:
    whatever shape the JSON has (nesting past the interpreter's limit, integers past its digit
    limit, ids that are not strings), the model is told what was wrong."""
    if len(body) > MAX_CALL_CHARS:
        return _malformed(f"the tool call is longer than {MAX_CALL_CHARS:,} characters", body)
    try:  # the first JSON value; trailing text (an end-of-turn token after a cut-off call) is ignored
        call, _ = _DECODER.raw_decode(body)
    except json.JSONDecodeError as exc:
        return _malformed(f"the tool call is not valid JSON ({exc.msg} at position {exc.pos})", body)
    except RecursionError:
        return _malformed("the tool call's JSON is nested too deeply", body)
    except ValueError as exc:  # e.g. an integer literal past Python's digit limit
        return _malformed(f"the tool call's JSON has a value Python cannot read ({exc})", body)
    if not isinstance(call, dict):
        return _malformed("the tool call must be a JSON object with 'name' and 'arguments'", body)
    name, call_id = call.get("name"), call.get("id")
    if not isinstance(name, str) or not name:
        return _malformed("the tool call has no 'name' string", body)
    if call_id is not None and not isinstance(call_id, str):
        return _malformed("the tool call's 'id' must be a string", body)
    arguments: Any = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # some models double-encode; a string that is not JSON stays raw
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return FunctionCall(name=name, arguments=arguments, tool_call_id=call_id)
        except (ValueError, RecursionError) as exc:  # verl's loop decodes them again and would raise
            return _malformed(f"the tool call's arguments hold JSON Python cannot read ({type(exc).__name__})", body)
    try:
        encoded = json.dumps(arguments, ensure_ascii=False)
    except (ValueError, RecursionError) as exc:
        return _malformed(f"the tool call's arguments cannot be encoded as JSON ({type(exc).__name__})", body)
    return FunctionCall(name=name, arguments=encoded, tool_call_id=call_id)


def _malformed(problem: str, body: str) -> FunctionCall:
    return FunctionCall(name=MALFORMED_CALL, arguments=json.dumps({"problem": problem, "text": body[:500]}))


def extract_from_text(text: str) -> tuple[str, list[WrittenCall]]:
    """(the text outside the calls, as written, each call). Blocks are found with ``str.find``
    (linear, in C): a regular expression took seconds on 50 MB of model output."""
    if _OPEN not in text:
        return text, []
    outside: list[str] = []
    calls: list[WrittenCall] = []
    pos = at = 0
    while (start := text.find(_OPEN, pos)) != -1:
        outside.append(text[pos:start])
        at += start - pos
        body = start + len(_OPEN)
        end = text.find(_CLOSE, body)
        # cut off before the closing tag (or the tag garbled): the rest of the reply is the call
        pos = len(text) if end == -1 else end + len(_CLOSE)
        call = parse_call(text[body : len(text) if end == -1 else end].strip())
        calls.append(WrittenCall(**call.model_dump(), text=text[start:pos], at=at))
        if end == -1:
            break
    outside.append(text[pos:])
    return "".join(outside), calls


def extract_json_call(text: str) -> tuple[str, list[WrittenCall]]:
    """Llama 3.x's form: a reply that is one JSON call (``{"name": ..., "parameters": {...}}``,
    ``<|python_tag|>`` before it or not). A reply that starts as such a call and does not parse is a
    malformed call, never an answer; any other reply has no call."""
    found = _JSON_CALL.match(text)
    if found is None:
        return text, []
    start = len(text) - len(text.lstrip())
    body_at = found.end()
    if len(text) - body_at > MAX_CALL_CHARS:  # (said before a byte of it is decoded: parse_call's bound)
        end = len(text)
    else:
        try:
            _, length = _DECODER.raw_decode(text[body_at:])
            end = body_at + length
        except (ValueError, RecursionError):  # parse_call says what is wrong with it
            end = len(text)
    call = parse_call(text[body_at:end])
    return text[:start] + text[end:], [WrittenCall(**call.model_dump(), text=text[start:end], at=start)]


def end_of_turn_ids(tokenizer: Any) -> frozenset[int]:
    """The ids that end a model's turn: its eos and the end-of-turn tokens of the common chat
    formats it has (found once per tokenizer)."""
    try:
        return _END_IDS[tokenizer]
    except (KeyError, TypeError):
        pass
    added = getattr(tokenizer, "added_tokens_encoder", None) or {}
    ids = {added[t] for t in END_OF_TURN_TOKENS if t in added}
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    found = frozenset(ids)
    try:
        _END_IDS[tokenizer] = found
    except TypeError:  # not weakly referenceable: found again next time
        pass
    return found


_END_IDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def written_back(content: str, calls: list[WrittenCall]) -> str:
    """``content`` with the ``calls``' text put back where each was written: the reply itself for
    all of ``extract_from_text``'s calls (any subset works: each ``at`` is a place in the content)."""
    parts, at = [], 0
    for call in calls:
        parts += [content[at : call.at], call.text]
        at = call.at
    return "".join([*parts, content[at:]])


@ToolParser.register("rollscope")
class RollscopeToolParser(ToolParser):
    """``<tool_call>`` blocks (hermes, Qwen), every call kept (``WrittenCall``), the end-of-turn
    token left out of the reply's text."""

    json_calls = False  # the reply is one JSON call (Llama 3.x), not tagged blocks

    async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None) -> tuple[str, list[WrittenCall]]:
        if responses_ids and responses_ids[-1] in end_of_turn_ids(self.tokenizer):
            responses_ids = responses_ids[:-1]
        text = await get_event_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        return extract_json_call(text) if self.json_calls else extract_from_text(text)


@ToolParser.register("llama3_json")
class Llama3JsonToolParser(RollscopeToolParser):
    """Llama 3.x's JSON tool calls (the form its chat template renders a call in)."""

    json_calls = True
