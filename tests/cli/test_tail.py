"""``rollscope traces tail`` on a run as it happens: a real writer process and the command in a
process of its own, each trajectory printed as it ends, a trajectory stuck in a tool flagged as
stalled while it is, with what it did last; on the default store and on a shared directory."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WRITER = textwrap.dedent("""
    import sys, time
    from rollscope import tracing
    options = {"local_dir": sys.argv[2], "publish_interval_s": 0.2} if len(sys.argv) > 2 else {}
    tracing.init_tracing(trace_dir=sys.argv[1], experiment="live", **options)
    for i in range(4):
        with tracing.rollout_trace_attr(step=0, sample_index=i, rollout_n=0):
            with tracing.trace_span("llm.generate", kind="llm") as s:
                s.outputs = {"response_text": "call the calculator"}
            tracing.flush_tracing(10)
            if i == 3:
                print("stuck", flush=True)
                with tracing.trace_span("calculator", kind="tool"):
                    sys.stdin.readline()  # in the tool until the test lets it go
            tracing.set_reward(float(i % 2))
        tracing.flush_tracing(10)
        time.sleep(0.3)
    tracing.shutdown_tracing(10)
    print("done", flush=True)
""")


def read_until(proc: subprocess.Popen, predicate, timeout: float = 60) -> list[str]:
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if predicate(lines):
            return lines
    raise AssertionError(f"not seen in time; got {lines}")


def _stalled(line: str, sample: int) -> bool:
    """A stall flag for ``sample``. (A loaded machine may also take more than ``--stall`` between
    an earlier trajectory's last span and its end: that is flagged too, and rightly.)"""
    return "STALLED" in line and f"sample {sample} " in line


def _as_from_a_terminal() -> None:
    """ctrl-c reaches the command, as in a terminal: a test run started in the background by a
    shell without job control has SIGINT ignored, and a process inherits that (Python then
    installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("layout", ["default", "shared"])
def test_tail_prints_each_trajectory_as_it_ends_and_flags_the_stuck_one(tmp_path, layout):
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    extra = [str(tmp_path / "local")] if layout == "shared" else []
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(trace_dir), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    if layout == "shared":
        while not (trace_dir / "live").exists():  # the layout is made as the writer starts
            time.sleep(0.05)
    tail = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rollscope.cli",
            "traces",
            "tail",
            "--dir",
            str(trace_dir),
            "--stall",
            "1",
            "--interval",
            "0.2",
            "--since",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        assert writer.stdout.readline().strip() == "stuck"
        lines = read_until(tail, lambda ls: any(_stalled(line, 3) for line in ls))
        ended = [line for line in lines if line[9:14].strip() == "ok"]
        assert [line.split("sample ")[1].split()[0] for line in ended] == ["0", "1", "2"]
        assert "reward 0 " in ended[0] and "reward 1 " in ended[1] and "turns 1" in ended[0]
        (stalled,) = [line for line in lines if _stalled(line, 3)]
        assert "last: llm.generate (llm) ended, after 1 llm turn" in stalled
        writer.stdin.write("\n")  # the tool returns: the trajectory ends
        writer.stdin.flush()
        lines = read_until(tail, lambda ls: any("sample 3" in line and " ok " in line for line in ls))
        assert not any(_stalled(line, 3) for line in lines)  # flagged once while it stayed stuck
        final = next(line for line in lines if "sample 3" in line)
        assert "tools 1" in final and "reward 1" in final
        assert writer.stdout.readline().strip() == "done"
    finally:
        writer.kill()
        tail.send_signal(signal.SIGINT)
        out, _ = tail.communicate(timeout=30)
    assert "0 running, 0 stalled" in out
