"""`rollscope traces ls` as a user runs it: a real subprocess over a real store."""

import json
import subprocess
import sys

import pytest

from rollscope import tracing


@pytest.fixture
def store_dir(tmp_path):
    d = tmp_path / "traces"
    tracing.init_tracing(project="p", experiment="cli", trace_dir=str(d))
    for sample in range(3):
        for n in range(2):
            with tracing.rollout_trace_attr(step=5, sample_index=sample, rollout_n=n):
                with tracing.trace_span("generate", kind="llm"):
                    pass
                tracing.set_reward(sample + n / 2)
    tracing.shutdown_tracing()
    return d


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_ls_json_has_the_documented_fields(store_dir):
    out = _cli("traces", "ls", "--dir", str(store_dir), "--json", "--min-reward", "1", "--sort", "reward", "--desc")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["reward"] for r in rows] == [2.5, 2.0, 1.5, 1.0]
    for key in ("id", "experiment", "step", "sample_index", "rollout_n", "validate", "status", "reward",
                "num_turns", "num_tool_calls"):  # fmt: skip
        assert key in rows[0]
    assert rows[0]["num_turns"] == 1 and rows[0]["experiment"] == "cli"


@pytest.mark.slow
def test_ls_table_and_clear_error(store_dir, tmp_path):
    out = _cli("traces", "ls", "--dir", str(store_dir), "--sample", "1")
    assert out.returncode == 0
    assert out.stdout.strip().splitlines()[-1] == f"2 of 2 trajectories in {store_dir}"
    missing = _cli("traces", "ls", "--dir", str(tmp_path / "none"))
    assert missing.returncode == 2
    expected = f"rollscope: error: no trace store at {tmp_path / 'none'} (set --dir or ROLLSCOPE_TRACE_DIR)"
    assert missing.stderr.strip() == expected
