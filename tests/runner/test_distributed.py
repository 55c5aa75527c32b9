"""`--workers W`: the run spread over Ray actors, each writing its own trace shard."""

import json

import pytest

from tests.cli.test_run_cli import REPLIES, rollscope

pytestmark = pytest.mark.slow


def test_two_ray_workers_record_every_trajectory_once(tmp_path):
    replies = tmp_path / "replies.yaml"
    replies.write_text(REPLIES)
    traces = tmp_path / "traces"
    result = rollscope(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"scripted:{replies}",
        "--workers",
        "2",
        "--limit",
        "5",
        "--n",
        "2",
        "--trace-dir",
        str(traces),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "10 of 10" in result.stdout and "0.200 over 10" in result.stdout
    listed = json.loads(rollscope("traces", "ls", "--dir", str(traces), "--json", "--limit", "100").stdout)
    assert sorted((t["sample_index"], t["rollout_n"]) for t in listed) == [(i, k) for i in range(5) for k in range(2)]
    assert len(list(traces.glob("*.rstrace"))) == 2  # one shard per worker process


def test_a_worker_config_error_is_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("replies: 5\n")  # found by the pre-flight check, refused in the workers
    result = rollscope("run", "gsm8k-calculator", "--llm", f"scripted:{tmp_path}/bad.yaml", "--workers", "2")
    assert result.returncode == 3, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("rollscope: error: scripted:")
    assert "Traceback" not in result.stderr
