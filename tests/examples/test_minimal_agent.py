"""The documented complete loop and tool (examples/minimal_agent/agent.py): docs/agent-loops.md
shows that file as it is, `rollscope run` runs it, and the tool's result shapes reach the model."""

import asyncio
import json
import re
import sys
from pathlib import Path

from tests.cli.test_run_cli import rollscope

EXAMPLE = Path(__file__).parents[2] / "examples" / "minimal_agent"


def test_the_docs_show_the_example_as_it_is():
    readme = (Path(__file__).parents[2] / "docs" / "agent-loops.md").read_text()
    code = (EXAMPLE / "agent.py").read_text()
    body = code[code.index("from typing import Any") :]
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert body in blocks, "docs/agent-loops.md's agent loop differs from examples/minimal_agent/agent.py"


def test_the_minimal_agent_runs_traced(tmp_path):
    replies = tmp_path / "r.yaml"
    replies.write_text("replies:\n  - 'The answer is 976.'\n")
    traces = tmp_path / "t"
    result = rollscope(
        "run",
        str(EXAMPLE / "config.yaml"),
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "2",
        "--dir",
        str(traces),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    assert "2 of 2" in result.stdout and "0.500 over 2" in result.stdout  # row 0's answer is 976
    listed = json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)
    assert {(t["agent_name"], t["num_turns"], t["status"]) for t in listed} == {("agent:AskOnceAgent", 1, "ok")}


def test_the_tool_may_return_a_str_a_tuple_or_fail(local_tracer, read_store):
    sys.path.insert(0, str(EXAMPLE))
    try:
        from agent import WordCountTool
    finally:
        sys.path.remove(str(EXAMPLE))
    from verl.tools.schemas import OpenAIFunctionToolSchema

    from rollscope import tracing

    schema = OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": "word_count",
                "description": "Count words.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            },
        }
    )
    tool = WordCountTool({}, schema)

    async def main():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            return [
                await tool.execute("i", {"text": "a b c"}),
                await tool.execute("i", {"text": "a b"}, with_reward=True),
                await tool.execute("i", {"text": 5}),
            ]

    plain, rewarded, failed = asyncio.run(main())
    assert (plain[0].text, plain[1], plain[2]) == ("3", 0.0, {})
    assert (rewarded[0].text, rewarded[1], rewarded[2]) == ("2", 0.1, {"words": 2})
    assert failed[0].text == "Error: tool 'word_count' failed: TypeError: text must be a string"
    spans = read_store().trajectories()[0].spans
    assert [(s.name, s.status) for s in spans] == [("WordCountTool.execute", "ok")] * 2 + [
        ("WordCountTool.execute", "error")
    ]
