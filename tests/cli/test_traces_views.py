"""`rollscope traces show | diff | group` on a store recorded through the tracing API."""

import json
import subprocess
import sys

import pytest

from rollscope.store import TraceStore
from tests.viewer.conftest import record


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "traces"
    record(path)
    return path


def cli(*args):
    result = subprocess.run([sys.executable, "-m", "rollscope.cli", "traces", *args], capture_output=True, text=True,
                            env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"}, timeout=60)  # fmt: skip
    return result


def ids(store_dir, **filters):
    with TraceStore(store_dir) as store:
        return [r.id for r in store.trajectories(**filters)]


def test_show_turns_tools_tokens_reward_errors(store_dir):
    tid = ids(store_dir, step=2, sample_index=1, rollout_n=3)[0]
    out = cli("show", tid, "--dir", str(store_dir))
    assert out.returncode == 0, out.stderr
    for text in ("What is 2 + 3?", "The answer is 5.", '{"expression": "2+3"}', "calculator: bad expression",
                 "20 → 13 tokens", "turns · tool calls · tokens", "2 · 1 · 18", "reward"):  # fmt: skip
        assert text in out.stdout, text
    data = json.loads(cli("show", tid, "--dir", str(store_dir), "--json").stdout)
    assert data["num_tool_errors"] == 1 and [s["kind"] for s in data["spans"]] == ["agent", "llm", "tool", "llm"]


def test_diff_turn_by_turn(store_dir):
    a, b = ids(store_dir, step=1, sample_index=0)[:2]
    out = cli("diff", a, b, "--dir", str(store_dir))
    assert out.returncode == 0, out.stderr
    assert "calculator 1+0" in out.stdout and "calculator 1+1" in out.stdout and "first divergence" in out.stdout
    data = json.loads(cli("diff", a, b, "--dir", str(store_dir), "--json").stdout)
    assert data["first_divergence"] == 0 and data["fields"]["reward"] == [0.1, 1.1]
    assert [t["changed"] for t in data["turns"]] == [["output"], ["inputs", "output"], ["output"]]


def test_group_with_advantages(store_dir):
    out = cli("group", "1", "0", "--dir", str(store_dir))
    assert out.returncode == 0, out.stderr
    assert "4 rollouts, mean reward 0.6" in out.stdout and "+0.500" in out.stdout and "-0.500" in out.stdout
    data = json.loads(cli("group", "1", "0", "--dir", str(store_dir), "--json").stdout)
    assert [r["advantage"] for r in data["rollouts"]] == pytest.approx([-0.5, 0.5, -0.5, 0.5])
    assert [r["normalized_advantage"] for r in data["rollouts"]] == pytest.approx([-1.0, 1.0, -1.0, 1.0])


def test_ls_json_fields_and_tool_error_filter(store_dir):
    listed = json.loads(cli("ls", "--dir", str(store_dir), "--json", "--tool-errors").stdout)
    assert len(listed) == 6 and all(t["rollout_n"] == 3 for t in listed)
    assert {"id", "experiment", "step", "sample_index", "rollout_n", "validate", "status", "reward", "num_turns",
            "num_tool_calls"} <= set(listed[0])  # fmt: skip


def test_unknown_ids_are_one_line_errors(store_dir):
    for args in (("show", "nope"), ("diff", "nope", "nada"), ("group", "9", "9")):
        out = cli(*args, "--dir", str(store_dir))
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.startswith("rollscope: error: no trajector")
