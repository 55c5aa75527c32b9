"""SGLang's server stopping in the middle of ``rollscope run`` (a module of its own: the test ends
its engine). The server is killed by the reward of the first trajectory to finish, so that others
are still to be generated, whatever the machine's speed: the run stops at once with one line naming
SGLang and what happened, exit 3, and the trajectories finished before are in the store, complete."""

import json
import os
import signal

import pytest

from rollscope.store import TraceStore
from tests.llm.engine_runs import run_cli

pytestmark = pytest.mark.slow
KILL_ENV = "ROLLSCOPE_TEST_KILL_PGID"


def kill_the_server_then_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """A reward (verl's signature) that kills SGLang's process group the first time it is called."""
    pgid = os.environ.pop(KILL_ENV, None)
    if pgid is not None:
        os.killpg(int(pgid), signal.SIGKILL)
    return 0.0


def test_a_server_that_dies_mid_run_stops_it_at_once_and_what_finished_is_kept(sglang_server, tmp_path):
    from rollscope.cpu import demo_task

    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in demo_task.dataset_rows(demo_task.problems(), "test")))
    traces = tmp_path / "traces"
    os.environ[KILL_ENV] = str(sglang_server.process.pid)
    try:  # (run_cli's timeout is the bound: the client's own request timeout is 600 s)
        result = run_cli(
            "run",
            "gsm8k-calculator",
            "--llm",
            f"sglang:{sglang_server.url}",
            "--model",
            str(sglang_server.model),
            "--limit",
            "16",
            "--n",
            "2",
            "--dir",
            str(traces),
            f"dataset={data}",
            "concurrency=2",
            f"reward={__name__}:kill_the_server_then_score",
            "sampling.max_tokens=64",
        )
    finally:
        os.environ.pop(KILL_ENV, None)
    assert result.returncode == 3, result.stderr
    [line] = result.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"rollscope: error: SGLang at {sglang_server.url}/generate: "), result.stderr
    assert "closed the connection" in line or "cannot reach the server" in line
    with TraceStore(traces) as store:
        stored = store.trajectories(limit=None)
    finished = [t for t in stored if t.status == "ok"]
    assert finished and len(stored) < 32
    assert all(t.num_llm_calls >= 1 and t.reward == 0.0 for t in finished)
