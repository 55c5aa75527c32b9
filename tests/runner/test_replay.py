"""`rollscope replay`: a stored trajectory re-run from its record, token for token, as a
regression test of tool, agent and reward code; and from a later model turn with another LLM."""

import asyncio
import json
import subprocess
import sys

import pytest

from rollscope.store import TraceStore
from tests.runner.flip_tool import FlipCalculator

THREE_TURNS = """replies:
  - '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>'
  - '<tool_call>{"name": "calculator", "arguments": {"expression": "976 + 0"}}</tool_call>'
  - 'The answer is 976.'
"""
TOOLS = "tools:\n  - class_name: tests.runner.flip_tool.FlipCalculator\n    config: {type: native}\n"


def rollscope(*args):
    return subprocess.run([sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two trajectories of the gsm8k example recorded by the runner with a scripted LLM, three
    model turns each (two calculator calls, then the answer), the calculator from a tool file."""
    from rollscope.runner import session
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner

    root = tmp_path_factory.mktemp("replay")
    (root / "replies.yaml").write_text(THREE_TURNS)
    (root / "tools.yaml").write_text(TOOLS)
    config = load_config(
        "gsm8k-calculator",
        [
            f"llm=scripted:{root / 'replies.yaml'}",
            f"tools={root / 'tools.yaml'}",
            "limit=2",
            f"trace_dir={root / 'traces'}",
            "step=4",
        ],
    )
    runner = Runner(config)
    runner.setup()
    asyncio.run(session.run_traced(runner))
    with TraceStore(root / "traces") as store:
        ids = [t.id for t in store.trajectories()]
    return root, ids


def test_check_passes_on_unchanged_code_and_stores_a_marked_replay(recorded):
    from rollscope.testing import replay

    root, (first, _) = recorded
    outcome = replay(first, store=str(root / "traces"))
    assert outcome.ok, outcome.differences
    assert outcome.diff.first_divergence is None
    with TraceStore(root / "traces") as store:
        original, again = store.get(first), store.get(outcome.replay)
        assert (again.replay_of, again.step, again.sample_index, again.experiment) == (
            first,
            original.step,
            original.sample_index,
            original.experiment,
        )
        turns = [[s.outputs["token_ids"] for s in t.spans if s.kind == "llm"] for t in (original, again)]
        assert turns[0] == turns[1] and len(turns[0]) == 3  # the same conversation, token for token
        assert [t.id for t in store.group(4, original.sample_index)] == [first]  # replays join no group
        assert sum(s.trajectories for s in store.steps()) == 2  # nor the per-step figures


def test_check_fails_naming_the_turn_when_the_tool_changes(recorded):
    from rollscope.testing import replay

    root, (_, second) = recorded
    FlipCalculator.broken = True
    try:
        outcome = replay(second, store=str(root / "traces"))
    finally:
        FlipCalculator.broken = False
    assert not outcome.ok
    assert outcome.differences[0].startswith("tool call 0 (FlipCalculator.execute, model turn 0): result '976'")
    # (the inner CalculatorTool's own span, a tool span too, still says 976: it did not change)
    assert outcome.differences[1].startswith("tool call 2 (FlipCalculator.execute, model turn 1): result '976'")
    assert len(outcome.differences) == 2 and "'977'" in outcome.differences[0]


def test_from_turn_one_with_another_llm_diverges_at_turn_one(recorded, tmp_path):
    root, (first, _) = recorded
    other = tmp_path / "other.yaml"
    other.write_text("replies:\n  - 'I will not use tools. The answer is 42.'\n")
    result = rollscope(
        "replay", first, "--dir", str(root / "traces"), "--from-turn", "1", "--llm", f"scripted:{other}", "--json"
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["first_divergent_model_turn"] == 1 and data["from_turn"] == 1
    with TraceStore(root / "traces") as store:
        again = store.get(data["replay"])
        replies = [s.outputs["response_text"] for s in again.spans if s.kind == "llm"]
    assert replies[1].startswith("I will not use tools") and len(replies) == 2
    assert again.attributes["from_turn"] == 1 and again.replay_of == first


def test_check_on_the_command_line_and_clear_errors(recorded, tmp_path):
    root, (first, _) = recorded
    ok = rollscope("replay", first, "--dir", str(root / "traces"), "--check")
    assert ok.returncode == 0, ok.stderr
    assert "same tool results, final response and reward as recorded" in ok.stdout
    missing = rollscope("replay", first, "--dir", str(root / "traces"), "--from-turn", "1")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "rollscope: error: --from-turn K asks a model from turn K on: name it with --llm"
    )
    from rollscope import tracing

    tracing.init_tracing(trace_dir=str(tmp_path / "bare"))
    with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("llm.generate", kind="llm") as s:
        s.outputs = {"token_ids": [1]}
    tracing.shutdown_tracing()
    with TraceStore(tmp_path / "bare") as store:
        [bare] = store.trajectories()
    result = rollscope("replay", bare.id, "--dir", str(tmp_path / "bare"), "--check")
    assert result.returncode == 2
    assert "cannot be replayed: its run span records no loop to rebuild" in result.stderr


def test_the_trajectory_page_lists_its_replays_and_links_the_diff(recorded, browser):
    import threading

    from selenium.webdriver.common.by import By

    from rollscope.testing import replay
    from rollscope.viewer.server import make_server
    from tests.viewer.test_browser import click_and_wait, shot

    root, (first, _) = recorded
    made = replay(first, store=str(root / "traces")).replay  # (its own: the test runs alone too)
    with TraceStore(root / "traces") as store:
        replays = [t.id for t in store.trajectories(replay_of=first)]
    assert made in replays
    httpd = make_server(str(root / "traces"), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{httpd.server_address[1]}/t/{first}")
        listed = browser.find_elements(By.CSS_SELECTOR, "#replays li")
        assert sorted(li.find_element(By.TAG_NAME, "a").text for li in listed) == sorted(replays)
        shot(browser, "13-replays")
        click_and_wait(browser, listed[0].find_element(By.CSS_SELECTOR, "a.replay-diff"), "/compare")
        headers = browser.find_elements(By.CSS_SELECTOR, "#compare-table thead th a")
        assert headers[0].text == first and headers[1].text in replays
    finally:
        httpd.shutdown()
        httpd.server_close()
