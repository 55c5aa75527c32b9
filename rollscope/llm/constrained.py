"""Tool calls constrained to the tools' JSON schemas: a GBNF grammar for llama.cpp's sampler.

A reply is either one tool call in the hermes format, ``<tool_call>{"name": N, "arguments": A}</tool_call>``,
whose name is one of the tools' and whose arguments match that tool's parameter schema (types,
required keys, no others, string patterns), or plain text (no ``<``). A small model then cannot
call a tool that does not exist, cut its JSON short or misspell an argument: what remains is
whether it chose the right call. It is opt-in (``sampling: {constrain_tool_calls: true}`` in a
run config; the tool loop turns it into the grammar, the embedded model samples with it) and
shown on each llm span (``rollscope.constrained``, with the grammar among its sampling
parameters), because a policy being trained must learn the format itself: constrained samples
are not what it would write alone.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

CONSTRAIN = "constrain_tool_calls"  # the sampling key asking for it
GRAMMAR = "grammar"  # the sampling key the grammar travels in (GBNF text)


def tool_call_grammar(tool_schemas: list[dict[str, Any]]) -> str:
    """The GBNF grammar for one reply, given the tools' OpenAI function schemas."""
    return _grammar(json.dumps(tool_schemas, sort_keys=True, default=str))


@functools.lru_cache(maxsize=16)
def _grammar(schemas_json: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    calls = []
    for schema in json.loads(schemas_json):
        function = schema.get("function", schema)
        parameters = _closed(copy.deepcopy(function.get("parameters") or {"type": "object", "properties": {}}))
        calls.append({"type": "object", "properties": {"name": {"const": function["name"]}, "arguments": parameters},
                      "required": ["name", "arguments"], "additionalProperties": False})  # fmt: skip
    json_rules = json_schema_to_gbnf(json.dumps({"oneOf": calls} if len(calls) != 1 else calls[0]),
                                     prop_order=["name", "arguments"])  # fmt: skip
    json_rules = re.sub(r"^root ::=", "tool-call-json ::=", json_rules, flags=re.M)
    return ('root ::= tool-call | answer\n'
            'tool-call ::= "<tool_call>" tool-call-json "</tool_call>"\n'
            'answer ::= [^<] [^<]*\n' + json_rules)  # fmt: skip


def _closed(schema: Any) -> Any:
    """Objects in a schema take only the properties they name (a model's extra keys are refused)."""
    if isinstance(schema, dict):
        if schema.get("type") == "object" and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            _closed(value)
    elif isinstance(schema, list):
        for value in schema:
            _closed(value)
    return schema
