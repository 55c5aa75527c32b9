"""Tool calls constrained to the tools' JSON schemas, in each engine's own form.

A reply is either plain text or a tool call in the hermes format, ``<tool_call>{"name": N,
"arguments": A}</tool_call>``, whose name is one of the tools' and whose arguments match that tool's
parameter schema (types, required keys, no others, string patterns). A small model then cannot call
a tool that does not exist, cut its JSON short or misspell an argument: what remains is whether it
chose the right call. It is opt-in (``sampling: {constrain_tool_calls: true}`` in a run config):
the tool loop puts the turn's tool schemas in the sampling parameters under ``TOOL_SCHEMAS`` and
each client turns them into its engine's constraint:

- the embedded model (llama.cpp): a GBNF grammar (``tool_call_grammar``): one call, or text with no ``<``;
- vLLM (``/v1/completions``) and SGLang: a structural tag (``tool_call_structural_tag``): text is
  free until the model writes ``<tool_call>``, from there the call is held to its tool's schema.

Each llm span shows it (``rollscope.constrained``, the schemas among its sampling parameters),
because a policy being trained must learn the format itself: constrained samples are not what it
would write alone.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def tool_call_grammar(tool_schemas: list[dict[str, Any]]) -> str:
    """The GBNF grammar for one reply (llama.cpp's sampler), given the tools' OpenAI function schemas."""
    return _grammar(json.dumps(tool_schemas, sort_keys=True, default=str))


def tool_call_structural_tag(tool_schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """xgrammar's structural tag (vLLM's ``response_format``, SGLang's ``structural_tag``): each tool
    a structure opened by ``<tool_call>`` and its name, its arguments held to its parameter schema."""
    structures = []
    for name, parameters in _functions(tool_schemas):
        structures.append(
            {
                "begin": f'{CALL_OPEN}{{"name": {json.dumps(name)}, "arguments": ',
                "schema": parameters,
                "end": f"}}{CALL_CLOSE}",
            }
        )
    return {"type": "structural_tag", "structures": structures, "triggers": [CALL_OPEN]}


def _functions(tool_schemas: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, closed parameter schema) of each tool."""
    found = []
    for schema in tool_schemas:
        function = schema.get("function", schema)
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        found.append((function["name"], _closed(copy.deepcopy(parameters))))
    return found


@functools.lru_cache(maxsize=16)
def _grammar(schemas_json: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    calls = [
        {
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for name, parameters in _functions(json.loads(schemas_json))
    ]
    json_rules = json_schema_to_gbnf(
        json.dumps({"oneOf": calls} if len(calls) != 1 else calls[0]), prop_order=["name", "arguments"]
    )
    json_rules = re.sub(r"^root ::=", "tool-call-json ::=", json_rules, flags=re.M)
    return (
        "root ::= tool-call | answer\n"
        f'tool-call ::= "{CALL_OPEN}" tool-call-json "{CALL_CLOSE}"\n'
        "answer ::= [^<] [^<]*\n" + json_rules
    )


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
