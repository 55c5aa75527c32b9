"""Tool-call parsing that never drops a call silently.

Formats: hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, and the same
without the closing tag at the very end of a response — what a model stopped by the stop string
``</tool_call>`` (the embedded model's setup) leaves behind. A call that cannot be parsed comes back
as a ``FunctionCall`` named ``MALFORMED_CALL`` whose arguments carry the problem, so the loop can
tell the model what went wrong (verl's hermes parser logs and drops it).
"""

from __future__ import annotations

import json
import re
from typing import Any

from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.utils.ray_utils import get_event_loop

MALFORMED_CALL = "__malformed_tool_call__"
_DECODER = json.JSONDecoder()
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


def parse_call(body: str) -> FunctionCall:
    """One ``<tool_call>`` body -> a call, or a MALFORMED_CALL explaining the problem."""
    try:  # the first JSON value; trailing text (an end-of-turn token after a cut-off call) is ignored
        call, _ = _DECODER.raw_decode(body)
    except json.JSONDecodeError as exc:
        return _malformed(f"the tool call is not valid JSON ({exc.msg} at position {exc.pos})", body)
    if not isinstance(call, dict):
        return _malformed("the tool call must be a JSON object with 'name' and 'arguments'", body)
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return _malformed("the tool call has no 'name' string", body)
    arguments: Any = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # some models double-encode; an undecodable string stays raw
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return FunctionCall(name=name, arguments=arguments, tool_call_id=call.get("id"))
    return FunctionCall(name=name, arguments=json.dumps(arguments, ensure_ascii=False), tool_call_id=call.get("id"))


def _malformed(problem: str, body: str) -> FunctionCall:
    return FunctionCall(name=MALFORMED_CALL, arguments=json.dumps({"problem": problem, "text": body[:500]}))


def extract_from_text(text: str) -> tuple[str, list[FunctionCall]]:
    if "<tool_call>" not in text:
        return text, []
    calls = [parse_call(body.strip()) for body in _BLOCK.findall(text)]
    return _BLOCK.sub("", text).strip(), calls


@ToolParser.register("rollscope")
class RollscopeToolParser(ToolParser):
    async def extract_tool_calls(self, responses_ids: list[int], tools: Any = None) -> tuple[str, list[FunctionCall]]:
        text = await get_event_loop().run_in_executor(None, self.tokenizer.decode, responses_ids)
        return extract_from_text(text)
