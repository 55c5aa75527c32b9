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
    result = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", *args],
        capture_output=True,
        text=True,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    return result


def ids(store_dir, **filters):
    with TraceStore(store_dir) as store:
        return [r.id for r in store.trajectories(**filters)]


def test_show_turns_tools_tokens_reward_errors(store_dir):
    tid = ids(store_dir, step=2, sample_index=1, rollout_n=3)[0]
    out = cli("show", tid, "--dir", str(store_dir))
    assert out.returncode == 0, out.stderr
    for text in (
        "What is 2 + 3?",
        "The answer is 5.",
        '{"expression": "2+3"}',
        "calculator: bad expression",
        "20 → 13 tokens",
        "turns · tool calls · tokens",
        "2 · 1 · 18",
        "reward",
    ):
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
    # a row per model turn, its tool call under it (never a tool call beside an llm call)
    assert [t["changed"] for t in data["turns"]] == [["output", "tool calls"], ["output"]]
    assert [c["name"] for c in data["turns"][0]["a"]["tool_calls"]] == ["CalculatorTool.execute"]


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
    assert {
        "id",
        "experiment",
        "step",
        "sample_index",
        "rollout_n",
        "validate",
        "status",
        "reward",
        "num_turns",
        "num_tool_calls",
    } <= set(listed[0])


def test_unknown_ids_are_one_line_errors(store_dir):
    for args in (("show", "nope"), ("diff", "nope", "nada"), ("group", "9", "9")):
        out = cli(*args, "--dir", str(store_dir))
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert out.stderr.startswith("rollscope: error: no trajector")


def _same_text_rollouts(trace_dir):
    """Two rollouts that said and did the same, each with its own request and tool instance ids."""
    import uuid

    from rollscope import tracing

    tracing.init_tracing(project="p", experiment="same", trace_dir=str(trace_dir))
    for n in range(2):
        with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=n):
            with tracing.trace_span(
                "llm.generate", kind="llm", inputs={"request_id": uuid.uuid4().hex, "prompt_ids": [1, 2]}
            ) as s:
                s.outputs = {
                    "response_text": "call the calculator",
                    "token_ids": [5, 6, 7],
                    "log_probs": [-0.1, -4.0, -0.2],
                }
            with tracing.trace_span(
                "calculator", kind="tool", inputs={"instance_id": str(uuid.uuid4()), "parameters": {"x": 1}}
            ) as s:
                s.outputs = {"text": f"done (session {uuid.uuid4()})"}
    tracing.shutdown_tracing()


def test_diff_of_rollouts_that_differ_only_in_ids_finds_no_divergence(tmp_path):
    _same_text_rollouts(tmp_path / "t")
    a, b = ids(tmp_path / "t")
    data = json.loads(cli("diff", a, b, "--dir", str(tmp_path / "t"), "--json").stdout)
    assert data["first_divergence"] is None and [t["changed"] for t in data["turns"]] == [[]]
    out = cli("diff", a, b, "--dir", str(tmp_path / "t")).stdout
    assert "first divergence" not in out and "per-call ids differ" not in out and "same" in out  # id noise hidden


def test_show_tokens_in_the_terminal(tmp_path):
    _same_text_rollouts(tmp_path / "t")
    out = cli("show", ids(tmp_path / "t")[0], "--dir", str(tmp_path / "t"), "--tokens").stdout
    assert (
        "turn 0: 3 tokens · mean log-prob -1.433 · 33% of its tokens sampled at a probability under 10% (log-prob < -2.30) · token texts not recorded"
        in out
    )
    least = [line.split() for line in out.splitlines() if line.startswith("  #")]
    assert [row[:2] for row in least] == [["#1", "-4.000"], ["#2", "-0.200"], ["#0", "-0.100"]]


def test_a_group_never_mixes_experiments(store_dir, tmp_path):
    """Two experiments ran step 1, sample 0: two groups, each with its own mean, never one of 8."""
    import shutil

    from tests.viewer.conftest import record

    both = tmp_path / "both"
    shutil.copytree(store_dir, both)
    record(both, steps=2, samples=1, rollouts=2, experiment="second")  # rewards 0.1, 1.1 at step 1
    data = json.loads(cli("group", "1", "0", "--dir", str(both), "--json").stdout)
    assert [(g["experiment"], len(g["rollouts"]), round(g["mean_reward"], 3)) for g in data] == [
        ("second", 2, 0.6),
        ("viewer", 4, 0.6),
    ]
    text = cli("group", "1", "0", "--dir", str(both)).stdout
    assert "second: step 1, sample 0: 2 rollouts" in text and "viewer: step 1, sample 0: 4 rollouts" in text
    one = json.loads(cli("group", "1", "0", "--dir", str(both), "--experiment", "second", "--json").stdout)
    assert one["experiment"] == "second" and len(one["rollouts"]) == 2


def test_show_prints_a_custom_spans_inputs_and_output_and_with_full_the_stored_traceback(tmp_path):
    """A span of the user's own shows what it was given and gave without ``--json``; a raised
    error's traceback, stored with it, is said to be there and shown with ``--full``."""
    from rollscope import tracing

    trace_dir = tmp_path / "traces"
    tracing.init_tracing(experiment="custom", trace_dir=str(trace_dir))

    def parse_answer(text):
        return int(text.split("=")[1])

    with tracing.rollout_trace_attr(step=0, sample_index=0):
        with tracing.trace_span("lookup_docs", inputs={"query": "verl tool config", "k": 3}) as span:
            span.outputs = {"hits": ["docs/tools.md", "docs/verl.md"]}
        with pytest.raises(ValueError), tracing.trace_span("parse_answer", inputs={"text": "x=abc"}):
            parse_answer("x=abc")
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    [tid] = ids(trace_dir)
    short = cli("show", tid, "--dir", str(trace_dir))
    assert short.returncode == 0, short.stderr
    for text in (
        'in: {"query": "verl tool config", "k": 3}',
        'out: {"hits": ["docs/tools.md", "docs/verl.md"]}',
        "ValueError: invalid literal for int()",
        "(traceback stored: --full shows it)",
    ):
        assert text in short.stdout, (text, short.stdout)
    assert "Traceback (most recent call last)" not in short.stdout
    full = cli("show", tid, "--dir", str(trace_dir), "--full").stdout
    assert "Traceback (most recent call last)" in full and "in parse_answer" in full


def test_group_reads_whole_at_80_columns(store_dir):
    """Every id whole and no column cut in a terminal of 80 columns (the duration left out)."""
    result = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "group", "1", "0", "--dir", str(store_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.rstrip().splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in result.stdout, result.stdout
    assert all(i in result.stdout for i in ids(store_dir, step=1, sample_index=0))
    assert lines[1].split() == ["n", "id", "status", "reward", "adv", "adv/std", "turns", "tools", "errs"]


def test_show_prints_a_span_of_a_kind_of_its_own_and_a_name_that_reads_as_markup(tmp_path):
    """A Weave project's own ``@weave.op`` comes back as a kind rollscope does not know; a name
    may hold what rich would read as markup: both printed as written, never a crash."""
    import sqlite3

    from rollscope import tracing

    trace_dir = tmp_path / "traces"
    tracing.init_tracing(trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("[bold]search[/", inputs={"q": 1}):
        pass
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    for shard in trace_dir.rglob("*.rstrace"):
        with sqlite3.connect(shard) as db:
            db.execute("UPDATE spans SET kind = 'op'")
    [tid] = ids(trace_dir)
    shown = cli("show", tid, "--dir", str(trace_dir))
    assert shown.returncode == 0, shown.stderr
    assert "[bold]search[/" in shown.stdout and "op ·" in shown.stdout
