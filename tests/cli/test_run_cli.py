"""`rollscope run` as a user runs it: a subprocess, its exit code, what it prints."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rollscope.store import TraceStore
from tests.llm.stand_in import StandInServer
from tests.llm.test_server_clients import free_port

REPLIES = """replies:
  - '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>'
  - 'The answer is 976.'
"""
ENV = {**os.environ, "WANDB_ERROR_REPORTING": "false", "COLUMNS": "200"}
# ``python -c IMPORT_PROBE run ...``: the CLI, then on stderr whether verl, torch or transformers was imported
IMPORT_PROBE = (
    "import atexit, runpy, sys; sys.argv = ['rollscope', *sys.argv[1:]]\n"
    "atexit.register(lambda: print('HEAVY' if {'verl', 'torch', 'transformers'} & set(sys.modules)"
    " else 'LIGHT', file=sys.stderr))\n"
    "runpy.run_module('rollscope.cli', run_name='__main__')\n"
)


def rollscope(*args, cwd=None, env_extra=None):
    return subprocess.run(
        [sys.executable, "-m", "rollscope.cli", *args],
        capture_output=True,
        text=True,
        env={**ENV, **(env_extra or {})},
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture
def replies(tmp_path):
    path = tmp_path / "replies.yaml"
    path.write_text(REPLIES)
    return path


def assert_one_line_error(result, code, *fragments):
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("rollscope: error: ")
    for fragment in fragments:
        assert fragment in line, line


def test_run_prints_a_summary_and_the_traces_are_listed(tmp_path, replies):
    traces = tmp_path / "traces"
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "3",
        "--n",
        "2",
        "--trace-dir",
        str(traces),
        "--step",
        "4",
    )
    assert result.returncode == 0, result.stderr
    assert "6 of 6" in result.stdout and "0.333 over 6" in result.stdout  # sample 0's answer is 976
    assert str(traces) in result.stdout
    assert f"rollscope traces ls --dir {traces} --experiment gsm8k-calculator" in result.stdout
    assert "6/6 trajectories" in result.stderr  # progress lines when not on a terminal
    listed = json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)
    assert len(listed) == 6 and {t["step"] for t in listed} == {4}


def test_bad_config_key(replies):
    result = rollscope("run", "gsm8k-calculator", f"llm=scripted:{replies}", "temprature=0")
    assert_one_line_error(result, 2, "override 'temprature=0'", "unknown config key 'temprature'")


def test_unknown_example():
    assert_one_line_error(
        rollscope("run", "no-such-example"), 2, "no such config file or bundled example", "gsm8k-calculator"
    )


def test_missing_dataset(tmp_path, replies):
    result = rollscope("run", "gsm8k-calculator", "--llm", f"scripted:{replies}", f"dataset={tmp_path}/none.jsonl")
    assert_one_line_error(result, 2, f"{tmp_path}/none.jsonl: dataset not found")


def test_unreadable_dataset_row(tmp_path, replies):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": [{"role": "user", "content": "hi"}]}\nnot json\n')
    result = rollscope("run", "gsm8k-calculator", "--llm", f"scripted:{replies}", f"dataset={data}")
    assert_one_line_error(result, 2, f"{data}: line 2: invalid JSON")


def test_server_down(tmp_path, replies):
    """Nothing listening at --llm: one line, exit 3, and no store for a run that never started."""
    from rollscope.testing import make_model_dir

    model = make_model_dir(tmp_path / "model")
    url = f"http://127.0.0.1:{free_port()}"
    result = rollscope(
        "run", "gsm8k-calculator", "--llm", url, "--model", str(model), "--trace-dir", str(tmp_path / "t")
    )
    assert_one_line_error(result, 3, f"--llm {url}: cannot reach the server: nothing answers at 127.0.0.1:")
    assert not (tmp_path / "t").exists()


def test_a_server_that_hangs_up_leaves_no_store(tmp_path):
    """A port that accepts connections and closes them unanswered (a test double for a server
    that is not ready): one line, exit 3, no store (tracing starts once the LLM said it can answer)."""
    import socket
    import threading

    from rollscope.testing import make_model_dir

    model = make_model_dir(tmp_path / "model")
    listener = socket.create_server(("127.0.0.1", 0))

    def hang_up():
        while True:
            try:
                listener.accept()[0].close()
            except OSError:
                return

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        result = rollscope(
            "run",
            "gsm8k-calculator",
            "--llm",
            f"http://127.0.0.1:{listener.getsockname()[1]}",
            "--model",
            str(model),
            "--trace-dir",
            str(tmp_path / "t"),
        )
    finally:
        listener.close()
    assert_one_line_error(result, 3, "cannot reach the server")
    assert not (tmp_path / "t").exists()


def test_server_answering_garbage_keeps_what_was_traced(tmp_path):
    """A server whose answers stop making sense mid-run: one error line, exit 3, and the
    trajectories finished before it are in the store."""
    from rollscope.testing import make_model_dir

    model = make_model_dir(tmp_path / "model")
    answered = []

    def answer(path, body):
        answered.append(body)
        if len(answered) > 2:
            return b"<html>502 Bad Gateway</html>"
        return {"choices": [{"text": "", "token_ids": [2], "logprobs": None, "finish_reason": "stop"}]}

    with StandInServer(answer) as server:
        result = rollscope(
            "run",
            "gsm8k-calculator",
            "--llm",
            server.url,
            "--model",
            str(model),
            "model_name=x",
            "--concurrency",
            "1",
            "--trace-dir",
            str(tmp_path / "t"),
            "--limit",
            "5",
        )
        assert_one_line_error(result, 2, "unknown config key 'model_name'")
        result = rollscope(
            "run",
            "gsm8k-calculator",
            "--llm",
            server.url,
            "--model",
            str(model),
            "--concurrency",
            "1",
            "--trace-dir",
            str(tmp_path / "t"),
            "--limit",
            "5",
        )
    assert_one_line_error(result, 3, "/v1/completions: answered with something that is not JSON")
    listed = json.loads(rollscope("traces", "ls", "--dir", str(tmp_path / "t"), "--json", "--status", "ok").stdout)
    assert len(listed) == 2


def test_user_agent_config_relative_paths(tmp_path, replies):
    repo = Path(__file__).parents[2]
    result = rollscope(
        "run",
        str(repo / "examples/custom_agent/config.yaml"),
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "2",
        "--trace-dir",
        str(tmp_path / "t"),
        "--quiet",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "2 of 2" in result.stdout and result.stderr.strip() == ""


def test_mistakes_are_reported_before_the_heavy_imports(tmp_path, replies):
    """A bad dataset, tool file, --llm or --model is one line with exit 2, and it is found before
    verl, torch or a model are imported: the process never loads them."""
    bad_tools = tmp_path / "tools.yaml"
    bad_tools.write_text("tools:\n  - config: {timeout: 3}\n")
    misspelled = tmp_path / "misspelled.yaml"
    misspelled.write_text("tools:\n  - class_name: rollscope.tools.builtin.calculator.CalculatorToll\n")
    wrong_module = tmp_path / "wrong_module.yaml"
    wrong_module.write_text("tools:\n  - class_name: my_tolls.WeatherTool\n")
    probe = IMPORT_PROBE
    cases = [
        (
            (f"dataset={tmp_path}/none.jsonl", "--llm", f"scripted:{replies}"),
            f"{tmp_path}/none.jsonl: dataset not found",
        ),
        ((f"tools={bad_tools}", "--llm", f"scripted:{replies}"), "tools[0]: needs 'class_name: package.module.Class'"),
        (("--llm", "foo:bar"), "--llm foo:bar: unknown kind"),
        (("--llm", "http://127.0.0.1:9"), "--llm http://127.0.0.1:9: needs --model DIR"),
        (
            ("--llm", "http://127.0.0.1:9", "--model", str(tmp_path / "nope")),
            f"--model {tmp_path / 'nope'}: no such directory",
        ),
        (("--llm", "scripted:/no/such/file"), "--llm scripted:/no/such/file: no replies file at /no/such/file"),
        (
            (f"tools={misspelled}", "--llm", f"scripted:{replies}"),
            "defines no 'CalculatorToll'; did you mean 'CalculatorTool'?",
        ),
        (
            (f"tools={wrong_module}", "--llm", f"scripted:{replies}"),
            "'my_tolls.WeatherTool': no module 'my_tolls' on the path",
        ),
        (
            ("reward=tests.runner.agents:missing_feld_reward", "--llm", f"scripted:{replies}"),
            "did you mean 'missing_field_reward'?",
        ),
    ]
    for args, fragment in cases:
        result = subprocess.run(
            [sys.executable, "-c", probe, "run", "gsm8k-calculator", *args],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=120,
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, result.stderr
        assert lines[-1] == "LIGHT", (args, result.stderr)
        assert lines[-2].startswith("rollscope: error: ") and fragment in lines[-2], (args, lines[-2])


def test_hostile_inputs_are_one_line_each_before_the_heavy_imports(tmp_path, replies):
    """A device, a FIFO (never opened), text that is not UTF-8, 2,000-deep YAML, a billion laughs
    in the run config: each one line naming the file, exit 2, nothing heavy imported; a module with a
    2,000-term sum runs, and a dataset read with ``--limit 1`` is read to its first row only (its
    second is no JSON)."""
    fifo = tmp_path / "tools.fifo"
    os.mkfifo(fifo)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("tools: []\n# caf\xe9\n".encode("latin-1"))
    deep = tmp_path / "deep.yaml"
    deep.write_text("tools: " + "[" * 2000 + "]" * 2000 + "\n")
    laughs = tmp_path / "laughs.yaml"
    laughs.write_text(
        "multi_turn:\n  a: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"  {c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    )
    probe = IMPORT_PROBE
    cases = [
        (("gsm8k-calculator", "tools=/dev/zero"), "/dev/zero: tool config is not a regular file"),
        (("gsm8k-calculator", f"tools={fifo}"), "tool config is not a regular file"),
        (("gsm8k-calculator", f"tools={latin}"), "tool config is not UTF-8 text (byte 0xe9 on line 2"),
        (("gsm8k-calculator", f"tools={deep}"), "nested more than 200 levels deep"),
        ((str(laughs),), "its aliases expand to"),
    ]
    for args, fragment in cases:
        result = subprocess.run(
            [sys.executable, "-c", probe, "run", *args, "--llm", f"scripted:{replies}"],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=60,
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and "Traceback" not in result.stderr, (args, result.stderr)
        assert lines[-1] == "LIGHT", (args, result.stderr)
        assert lines[-2].startswith("rollscope: error: ") and fragment in lines[-2], (args, lines[-2])
    (tmp_path / "deep_sum.py").write_text(
        "X = " + "+".join(["1"] * 2000) + "\n\n\ndef score(*args, **kwargs):\n    return 1.0\n"
    )
    bundled = Path(__file__).resolve().parent.parent.parent / "rollscope" / "bundled" / "data" / "arithmetic.jsonl"
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text(bundled.read_text().splitlines()[0] + "\n{not json\n")
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "1",
        "--quiet",
        f"dataset={dataset}",
        "reward=deep_sum:score",
        "--dir",
        str(tmp_path / "t"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr


def test_the_command_ends_after_its_exit_handlers_with_everything_printed_and_stored(tmp_path, replies):
    """``rollscope`` ends without the interpreter's teardown of verl's and torch's modules (1.6 s),
    never without what the teardown would keep: every exit handler runs, the output is whole, the
    trajectories are stored."""
    probe = (
        "import atexit, runpy, sys; sys.argv = ['rollscope', *sys.argv[1:]]\n"
        "atexit.register(lambda: print('exit handlers ran', file=sys.stderr))\n"
        "runpy.run_module('rollscope.cli', run_name='__main__')\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            probe,
            "run",
            "gsm8k-calculator",
            "--limit",
            "2",
            "--llm",
            f"scripted:{replies}",
            "--trace-dir",
            str(tmp_path / "t"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "exit handlers ran"
    assert "rollscope traces ls" in result.stdout and result.stdout.endswith("\n")
    with TraceStore(tmp_path / "t") as store:
        assert store.count(status="ok") == 2


def test_what_the_users_code_buffered_is_written_when_the_command_ends(tmp_path, replies):
    """A reward function of the user's writing to a file it opened at import and never closes:
    the command ends through the interpreter's own exit, so the file holds what was written."""
    (tmp_path / "my_reward.py").write_text(
        "LOG = open('rewards.log', 'w')\n\n\n"
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    LOG.write(f'{ground_truth}\\n')\n"
        "    return 1.0\n"
    )
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "2",
        "--quiet",
        "--dir",
        str(tmp_path / "t"),
        "reward=my_reward:score",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "rewards.log").read_text().splitlines()) == 2


def test_run_honours_the_trace_dir_environment_variable(tmp_path, replies):
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "1",
        "--quiet",
        cwd=tmp_path,
        env_extra={"ROLLSCOPE_TRACE_DIR": str(tmp_path / "from-env")},
    )
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "from-env") in result.stdout and not (tmp_path / "rollscope_traces").exists()


def test_one_error_span_is_counted_once_everywhere(tmp_path):
    """The progress line, the summary and `traces ls` count the same thing: error spans."""
    replies = tmp_path / "bad.yaml"
    replies.write_text(
        'replies:\n  - \'<tool_call>{"name": "calculator", "arguments": {"expression": '
        "\"61 * \"}}</tool_call>'\n  - 'The answer is 976.'\n"
    )
    traces = tmp_path / "t"
    result = rollscope("run", "gsm8k-calculator", "--llm", f"scripted:{replies}", "--limit", "1", "--dir", str(traces))
    assert result.returncode == 0, result.stderr
    assert "1 error spans · 0 failed" in result.stderr
    assert re.search(r"error spans\s*│\s*1\s", result.stdout), result.stdout
    [row] = json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)
    assert row["num_errors"] == 1 and row["num_tool_errors"] == 1
    listing = rollscope("traces", "ls", "--dir", str(traces)).stdout.splitlines()
    header, line = listing[0].split(), listing[1].split()
    assert line[header.index("errspans") - 1] == "1"  # (the empty val column takes no field)
    assert "calculator" in listing[1] and "Ava packs 61 boxes" in listing[1]  # first error, task


def test_a_run_whose_trajectories_all_fail_alike_stops_early_with_the_reason(tmp_path, replies):
    """A setting no trajectory can run with (here a reward function reading a field the rows lack)
    stops the run after the first few, exit 3, with the reason, the line of the user's code it
    came from, and the command that shows the trajectory and its traceback; what was traced is
    kept."""
    traces = tmp_path / "traces"
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "40",
        "--dir",
        str(traces),
        "reward=tests.runner.agents:missing_field_reward",
    )
    assert result.returncode == 3, result.stderr
    reason, where, show = result.stderr.strip().splitlines()[-3:]
    assert reason.startswith("rollscope: error: the first 4 trajectories failed the same way, so the run stopped: ")
    assert "KeyError: 'expected_answer'" in reason
    assert re.fullmatch(r"  at tests/runner/agents\.py:\d+, in missing_field_reward", where), where
    command = show.split(": ", 1)[1].split()
    assert command[:3] == ["rollscope", "traces", "show"] and "--full" in command, show
    shown = rollscope(*command[1:])
    assert shown.returncode == 0 and "Traceback (most recent call last)" in shown.stdout, shown.stdout[-2000:]
    assert "missing_field_reward" in shown.stdout and "KeyError" in shown.stdout
    listed = json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json").stdout)
    # the four that failed alike, and those still running when the run stopped: cancelled, not errors
    assert 4 <= len(listed) < 40 and {t["status"] for t in listed} <= {"error", "cancelled"}
    assert sum(t["status"] == "error" for t in listed) >= 4


def test_a_run_in_which_every_trajectory_failed_is_no_success(tmp_path, replies):
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--limit",
        "3",
        "--dir",
        str(tmp_path / "traces"),
        "agent=tests.runner.agents.BrokenAgent",
    )
    assert result.returncode == 3, result.stderr
    assert "every trajectory failed (3 of 3" in result.stderr.strip().splitlines()[-1]
