"""`rollscope run` tells the truth, as a user runs it (a subprocess): a tool that never returns,
sync or async, costs its own timeout and the command ends with its summary, the timeouts named;
a reward that fails is a failed run with the count said; mistakes in the agent or a tool's
docstring are found before verl is imported, naming the right entry."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from rollscope.store import TraceStore
from tests.cli.test_run_cli import ENV, IMPORT_PROBE, rollscope

BLOCKING = '''
import asyncio, time

from rollscope.tools import tool


@tool(timeout=3)
def block_sync(seconds: int) -> str:
    """Wait, in a plain function.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"


@tool(timeout=3)
async def block_async(seconds: int) -> str:
    """Wait, blocking the event loop (a blocking call in an async tool).

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return "done"
'''
TOOLS = """tools:
  - function: blocking_tools:block_sync
  - function: blocking_tools:block_async
"""
REPLIES = """replies:
  - '<tool_call>{"name": "block_sync", "arguments": {"seconds": 600}}</tool_call>'
  - '<tool_call>{"name": "block_async", "arguments": {"seconds": 600}}</tool_call>'
  - 'The answer is 976.'
"""


@pytest.mark.slow
def test_tools_that_never_return_cost_their_timeouts_and_the_run_ends_with_them_named(tmp_path):
    (tmp_path / "blocking_tools.py").write_text(BLOCKING)
    (tmp_path / "tools.yaml").write_text(TOOLS)
    (tmp_path / "replies.yaml").write_text(REPLIES)
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rollscope.cli",
            "run",
            "gsm8k-calculator",
            "--limit",
            "3",
            "--llm",
            f"scripted:{tmp_path / 'replies.yaml'}",
            "--dir",
            str(tmp_path / "traces"),
            f"tools={tmp_path / 'tools.yaml'}",
        ],
        capture_output=True,
        text=True,
        env={**ENV, "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path,
        timeout=600,  # (a bound on a hang: before, the command never ended)
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "block_sync: 3 timeout" in result.stdout and "block_async: 3 timeout" in result.stdout, result.stdout
    assert "timed out after 3s" in result.stderr and "blocked its event loop" in result.stderr
    assert len(TraceStore(tmp_path / "traces").trajectories()) == 3
    print(f"\nthe run with 6 blocking tool calls of 3 s took {took:.0f} s")


REWARD = """
def none_but_the_first(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if extra_info["index"] == 0 else None
"""
ANSWER = """replies:
  - 'The answer is 976.'
"""


@pytest.mark.slow
def test_a_reward_that_returned_nothing_is_a_failed_run_with_the_count_said(tmp_path):
    (tmp_path / "my_reward.py").write_text(REWARD)
    (tmp_path / "replies.yaml").write_text(ANSWER)
    result = rollscope(
        "run", "gsm8k-calculator", "--limit", "3", "--llm", f"scripted:{tmp_path / 'replies.yaml'}",
        "--dir", str(tmp_path / "traces"), "reward=my_reward:none_but_the_first",
        cwd=tmp_path, env_extra={"PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "trajectories failed (2 in the reward, 2 of 3)" in last and "returned None" in last, last
    assert "2 FAILED (2 in the reward)" in result.stdout and "first failure" in result.stdout
    tokens = next(line for line in result.stdout.splitlines() if "model tokens" in line)
    assert "model tokens 0 " not in " ".join(tokens.split()), tokens


MISTAKES = '''
from rollscope.tools import tool


@tool
def lookup(city: str) -> str:
    """The weather in a city.

    Args:
        city: its name
    """
    return "sunny"


@tool
def convert(amount: float, unit: str) -> str:
    """Convert an amount to another unit.

    Args:
        amount: how much
    """
    return "1"
'''


def test_an_agent_or_a_tools_docstring_mistake_is_found_before_verl_naming_the_entry(tmp_path):
    (tmp_path / "my_tools.py").write_text(MISTAKES)
    (tmp_path / "tools.yaml").write_text("tools:\n  - function: my_tools:lookup\n  - function: my_tools:convert\n")
    (tmp_path / "replies.yaml").write_text(ANSWER)
    probe = IMPORT_PROBE
    cases = [
        ("agent=tests.runner.agents:BrokenAgnet", "did you mean 'BrokenAgent'?"),
        (f"tools={tmp_path / 'tools.yaml'}", "tools[1]"),
    ]
    for override, fragment in cases:
        result = subprocess.run(
            [sys.executable, "-c", probe, "run", "gsm8k-calculator", "--llm", f"scripted:{tmp_path / 'replies.yaml'}",
             override],
            capture_output=True,
            text=True,
            env={**ENV, "PYTHONPATH": f"{tmp_path}:{ENV.get('PYTHONPATH', '')}"},
            timeout=120,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and lines[-1] == "LIGHT", (override, result.stderr[-2000:])
        assert lines[-2].startswith("rollscope: error: ") and fragment in lines[-2], lines[-2]
    assert "parameter 'unit' is not described in the docstring's Args: section" in lines[-2]
