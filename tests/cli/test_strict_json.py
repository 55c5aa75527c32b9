"""``--json`` is strict JSON, as every parser reads it: a reward of inf (a reward function's
overflow) stored as recorded reaches the JSON as null, with a word on stderr, never as the bare
``Infinity`` Python's json writes by default."""

import json
import subprocess
import sys

from rollscope import tracing


def strict(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_null_and_said(tmp_path):
    tracing.init_tracing(project="p", experiment="inf", trace_dir=str(tmp_path))
    for step in range(2):
        for rollout, reward in enumerate((float("inf"), 1.0)):
            with tracing.rollout_trace_attr(step=step, sample_index=0, rollout_n=rollout), tracing.trace_span("run"):
                tracing.set_reward(reward)
    tracing.shutdown_tracing()
    for command in (["insights"], ["traces", "ls"]):
        done = subprocess.run(
            [sys.executable, "-m", "rollscope.cli", *command, "--dir", str(tmp_path), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        data = strict(done.stdout)  # (insights: its figures of such a run, whatever they are, as JSON)
        if command == ["traces", "ls"]:
            assert sorted(row["reward"] is None for row in data) == [False, False, True, True]
            assert "2 non-finite number(s) (inf, -inf, nan) written as null" in done.stderr
