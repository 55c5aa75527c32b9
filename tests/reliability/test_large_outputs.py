"""Nothing lost at size, through ``rollscope run`` as a user runs it: a tool that answers with
256 KB of ``password=`` pairs (one line) in every trajectory. The run's summary counts what the
store holds, every trajectory is stored, each tool answer redacted and cut, no value kept."""

import json
import re

import pytest

from rollscope.store import TraceStore
from tests.cli.test_run_cli import rollscope
from tests.reliability.big_tools import VALUES

pytestmark = pytest.mark.slow
TOOLS = "tools:\n  - function: tests.reliability.big_tools:read_config\n"
CALL = {"name": "read_config", "arguments": {"name": "prod.env"}}


def test_a_256_kb_tool_answer_of_secrets_costs_no_trajectory(tmp_path):
    (tmp_path / "tools.yaml").write_text(TOOLS)
    (tmp_path / "replies.json").write_text(json.dumps([f"<tool_call>{json.dumps(CALL)}</tool_call>", "Done."]))
    traces = tmp_path / "traces"
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{tmp_path / 'replies.json'}",
        f"tools={tmp_path / 'tools.yaml'}",
        "limit=3",
        "--trace-dir",
        str(traces),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    done, total = map(int, re.search(r"trajectories\W+(\d+) of (\d+)", result.stdout).groups())
    with TraceStore(traces) as store:
        stored = [store.get(t.id) for t in store.trajectories(limit=None)]
    assert done == total == len(stored) == 3
    for record in stored:
        [answer] = [s for s in record.spans if s.kind == "tool" and s.name.startswith("read_config")]
        text = answer.outputs["text"] if isinstance(answer.outputs, dict) else str(answer.outputs)
        assert text.startswith("password=[REDACTED]") and "too dense with secrets to scan]" in text
        shown = json.dumps([(s.inputs, s.outputs) for s in record.spans])
        assert not any(v in shown for v in VALUES[:2000])
