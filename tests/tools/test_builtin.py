"""The bundled tools, exercised for real (the sandbox runs real child processes)."""

import asyncio
import os

import pytest

from rollscope.tools.builtin import AnswerCheckerTool, CalculatorTool, LocalSearchTool, PythonSandboxTool
from rollscope.tools.builtin.answer_checker import final_number
from rollscope.tools.builtin.python_sandbox import run_sandboxed


def _execute(tool, params, instance_id="i"):
    return asyncio.run(tool.execute(instance_id, params))


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("17 * 23", "391"),
        ("(1 + 2) ** 3 - 4 / 8", "26.5"),
        ("7 // 2 + 7 % 2", "4"),
        ("-3 * -3", "9"),
        ("10 / 4", "2.5"),
        ("2 ** 0.5", "1.414213562"),
    ],
)
def test_calculator_values(expression, text):
    assert _execute(CalculatorTool(), {"expression": expression})[0].text == text


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "unsupported element Call"),
        ("1/0", "division by zero"),
        ("2 ** 1000", "exponent 1000 is larger than 100"),
        ("1 +", "cannot parse"),
        ("x * 2", "unsupported element Name"),
    ],
)
def test_calculator_refuses(expression, message):
    response, reward, _ = _execute(CalculatorTool(), {"expression": expression})
    assert response.text.startswith("Error: ") and message in response.text and reward == 0.0


def test_answer_checker_reward_flow():
    tool = AnswerCheckerTool()

    async def main():
        iid, _ = await tool.create(create_kwargs={"ground_truth": "#### 1,234"})
        wrong = await tool.execute(iid, {"answer": "1200"})
        right = await tool.execute(iid, {"answer": "The answer is $1,234."})
        reward = await tool.calc_reward(iid)
        await tool.release(iid)
        missing = await tool.execute(iid, {"answer": "1"})
        return wrong, right, reward, missing

    wrong, right, reward, missing = asyncio.run(main())
    assert (wrong[0].text, wrong[1]) == ("Incorrect. You answered 1200.", 0.0)
    assert right[1] == 1.0 and reward == 1.0
    assert missing[0].text.startswith("Error: no ground truth")
    assert final_number("no digits") is None and final_number("-2.5 then 7") == 7.0


def test_local_search_ranks_the_relevant_passage_first():
    response, _, metrics = _execute(LocalSearchTool(), {"query": "highest mountain Himalayas", "top_k": 2})
    assert response.text.startswith("[1] Mount Everest:") and metrics["hits"] == 2
    assert _execute(LocalSearchTool(), {"query": "zzzz qqqq"})[0].text == "No results for 'zzzz qqqq'."


@pytest.mark.slow
def test_python_tool_runs_code_and_reports_errors():
    tool = PythonSandboxTool({"timeout": 5, "cpu_seconds": 2})
    assert _execute(tool, {"code": "print(sum(i * i for i in range(10)))"})[0].text == "285\n"
    response, _, metrics = _execute(tool, {"code": "raise ValueError('bad input 42')"})
    assert "ValueError: bad input 42" in response.text and metrics["status"] == "error"
    assert "sandbox_runner" not in response.text  # the model sees its own frames only


# Escape attempts (files, network, processes, memory): tests/reliability/test_sandbox_escapes.py


@pytest.mark.slow
def test_python_tool_time_and_cpu_limits_leave_nothing_running():
    spin = asyncio.run(run_sandboxed("while True: pass", wall_s=10, cpu_s=1))
    assert spin["status"] == "killed" and "CPU limit" in spin["output"]
    sleeper = asyncio.run(run_sandboxed("import time; print('started', flush=True); time.sleep(60)", wall_s=1))
    assert sleeper["status"] == "timeout"
    assert sandbox_processes_left() == []


def sandbox_processes_left() -> list[int]:
    """Sandboxed processes still running that this test process started (its descendants) or that
    outlived whatever started them (orphans: their line of parents is sandbox processes up to the
    init process). A sandbox another test process is running at the same moment (``make test``
    runs two) is its own."""
    return [
        pid
        for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
        if _is_sandbox_child(pid) and _started_here_or_orphaned(pid)
    ]


def _is_sandbox_child(pid: int) -> bool:
    return _is_sandbox_command(_command(pid))


def _command(pid: int) -> bytes:
    """A process's command line (empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _is_sandbox_command(cmdline: bytes) -> bool:
    return b"sandbox_runner.py" in cmdline or b"/sandbox/runner.py" in cmdline


def _started_here_or_orphaned(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the parent (after the command's name)
        except OSError:  # gone meanwhile: whatever it was, it is not left running
            return False
        if pid == me:
            return True
        cmdline = _command(pid)
        if pid > 1 and not (_is_sandbox_command(cmdline) or b"bwrap" in cmdline.split(b"\0", 1)[0]):
            return False  # another process's sandbox, still in its hands
    return True
