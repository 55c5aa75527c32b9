"""The trackio backend with the real trackio package, read back from trackio's own local store
(in a subprocess: trackio fixes its store directory, TRACKIO_DIR, when imported)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent("""
    import json
    from rollscope import tracing
    from rollscope.tracing.backends.trackio import TrackioBackend

    tracing.init_tracing(backend="trackio", project="tkproj", experiment="run-a")
    for i in range(3):
        with tracing.rollout_trace_attr(step=2, sample_index=i, rollout_n=i % 2, name="tool_agent"):
            with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": "q"}):
                prompt = "<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nWhat is 6 * 7?<|im_end|>\\n"
                with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": prompt}) as s:
                    s.outputs = {"response_text": "<tool_call>calculator</tool_call>", "token_ids": [1, 2, 3]}
                with tracing.trace_span("CalculatorTool.execute", kind="tool", **{"tool.name": "calculator"},
                                        inputs={"instance_id": "c1", "parameters": {"expression": "6*7"}}) as s:
                    s.outputs = {"text": "42"}
                if i == 2:
                    with tracing.trace_span("llm.generate", kind="llm") as s:
                        s.fail(TimeoutError("server busy"))
            tracing.set_reward(float(i))
    tracing.shutdown_tracing(60)
    from trackio.sqlite_storage import SQLiteStorage
    print(json.dumps(SQLiteStorage.get_traces("tkproj", run="run-a"), default=str))
""")


def test_one_trackio_trace_per_trajectory_in_trackios_store(tmp_path):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("[")]  # (trackio prints too)
    traces = json.loads(line)
    assert len(traces) == 3
    assert {t["key"] for t in traces} == {"rollout_trace/tool_agent"}  # verl's key for the op
    by_sample = {t["metadata"]["sample_index"]: t for t in traces}
    for i, t in by_sample.items():
        assert t["step"] == 2
        meta = t["metadata"]
        assert (meta["rollout_n"], meta["reward"], meta["experiment_name"]) == (i % 2, float(i), "run-a")
        assert t["messages"][:4] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": "<tool_call>calculator</tool_call>"},
            {"role": "tool", "name": "calculator", "tool_call_id": "c1", "content": "42"},
        ]
        spans = {s["name"]: s for s in t["spans"]}
        turn = spans["llm.generate"] if i != 2 else t["spans"][1]
        assert turn["kind"] == "generation" and turn["usage"]["completion_tokens"] == 3
        assert spans["CalculatorTool.execute"]["kind"] == "tool"
        assert spans["llm.generate"]["parent_id"] == spans["ToolAgentLoop.run"]["id"]
    failed = [s for s in by_sample[2]["spans"] if s["status"] == "error"]
    assert len(failed) == 1 and "server busy" in failed[0]["error"]
