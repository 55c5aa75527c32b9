"""A user's own loop, the one docs/agent-loops.md writes from scratch, run by ``rollscope run`` as a
user runs it: its malformed calls, unknown tools and turn limit are counted by insights as the
bundled loop's are, and ``constrain_tool_calls`` holds its replies to its tool's schema."""

import json
import re
import subprocess
import sys
from pathlib import Path

from rollscope.semconv import CONSTRAIN, TOOL_SCHEMAS
from rollscope.store import TraceStore
from tests.cli.test_run_cli import rollscope

DOC = Path(__file__).resolve().parents[2] / "docs" / "agent-loops.md"
PROMPTS = 5
# Per trajectory: a call that is no JSON, a call to a tool that does not exist, then good calls
# until every turn is used (the scripted model repeats its last reply).
REPLIES = """replies:
  - '<tool_call>{"name": "lookup", "arguments": </tool_call>'
  - '<tool_call>{"name": "define", "arguments": {"term": "PPO"}}</tool_call>'
  - '<tool_call>{"name": "lookup", "arguments": {"term": "GRPO"}}</tool_call>'
"""


def _docs_loop() -> str:
    """The docs' from-scratch block, as it is written there."""
    [code] = [
        m.group(1)
        for m in re.finditer(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M)
        if "class GlossaryAgent" in m.group(1)
    ]
    return code


def test_the_docs_loop_gets_what_the_bundled_loop_gets(tmp_path):
    (tmp_path / "glossary.py").write_text(_docs_loop())
    (tmp_path / "own_replies.yaml").write_text(REPLIES)
    (tmp_path / "own_tools.yaml").write_text("tools:\n  - function: glossary:lookup\n")
    (tmp_path / "five.jsonl").write_text(
        "".join(
            json.dumps({"prompt": [{"role": "user", "content": f"What is term {i}?"}], "data_source": "glossary"})
            + "\n"
            for i in range(PROMPTS)
        )
    )
    (tmp_path / "own.yaml").write_text(
        "name: own\nagent: glossary.GlossaryAgent\ndataset: five.jsonl\ntools: own_tools.yaml\n"
        "llm: scripted:own_replies.yaml\ntrace_dir: traces\nsampling: {temperature: 1.0, constrain_tool_calls: true}\n"
    )
    result = rollscope("run", "own.yaml", "--quiet", cwd=tmp_path)
    assert result.returncode == 0 and f"{PROMPTS} of {PROMPTS}" in result.stdout, result.stderr
    assert "has no tool schemas" not in result.stderr

    found = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "insights", "--dir", str(tmp_path / "traces"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.returncode == 0, found.stderr
    signals = {s["name"]: s for s in json.loads(found.stdout)["signals"]}
    assert (signals["turn_limit"]["count"], signals["turn_limit"]["total"]) == (PROMPTS, PROMPTS)
    errors = signals["tool_errors"]
    assert (errors["count"], errors["total"]) == (2 * PROMPTS, 3 * PROMPTS), errors
    kinds = {kind: found["count"] for kind, found in errors["by_tool_and_kind"].items()}
    assert kinds == {"?|malformed_call": PROMPTS, "define|unknown_tool": PROMPTS}, errors

    with TraceStore(tmp_path / "traces") as store:
        records = [store.get(t.id) for t in store.trajectories()]
    assert len(records) == PROMPTS
    for record in records:
        llm = [s for s in record.spans if s.kind == "llm"]
        assert len(llm) == 3 and record.num_llm_calls == 3  # a turn is an LLM call
        for span in llm:
            params = span.inputs["sampling_params"]
            assert CONSTRAIN not in params and [s["function"]["name"] for s in params[TOOL_SCHEMAS]] == ["lookup"]
        failed = [s for s in record.spans if s.status == "error"]
        assert [s.name for s in failed] == ["tool_call_error.?", "tool_call_error.define"]
        assert record.turn_limit == 1
