"""Tool calls as models write them, read within their bound (rollscope/agentloops/tool_parser.py)."""

import json
import tracemalloc

from rollscope.agentloops.tool_parser import MALFORMED_CALL, MAX_CALL_CHARS, extract_json_call


def test_a_llama3_call_past_its_bound_is_said_without_being_decoded():
    """A 10 MB JSON call of five million floats: the model is told it is too long; the reply is
    never decoded into five million objects (what it cost: ~160 MB here, 1.2 GB for 50 MB)."""
    text = '{"name": "plot", "parameters": {"xs": [' + "1.5," * 2_500_000 + "1.5]}}"
    assert len(text) > MAX_CALL_CHARS
    tracemalloc.start()
    try:
        content, [call] = extract_json_call(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert call.name == MALFORMED_CALL and "longer than 1,048,576 characters" in json.loads(call.arguments)["problem"]
    assert content == "" and peak < 4 * len(text)  # (the reply's own slices, no decoded floats)


def test_a_llama3_call_within_its_bound_is_read():
    content, [call] = extract_json_call('{"name": "calc", "parameters": {"expression": "6 * 7"}} and after')
    assert call.name == "calc" and json.loads(call.arguments) == {"expression": "6 * 7"}
    assert content == " and after"
