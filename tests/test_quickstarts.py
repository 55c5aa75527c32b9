"""README's first two quickstarts as a user who installed rollscope runs them: from an empty
directory (no checkout around it), each command in a subprocess, each exiting 0."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from tests.test_docs import REPO, _env, blocks, commands

pytestmark = pytest.mark.slow


def quickstart(n: int):
    [block] = [b for b in blocks(REPO / "README.md") if f"## Quickstart {n}:" in _heading_before(b)]
    return block


def _heading_before(block) -> str:
    text = (REPO / "README.md").read_text().splitlines()[: block.line]
    return next(line for line in reversed(text) if line.startswith("## "))


def test_quickstart_1_runs_from_an_empty_directory(tmp_path):
    for command in commands(quickstart(1).code):
        argv = shlex.split(command)
        assert argv[0] == "rollscope"
        done = subprocess.run(
            [sys.executable, "-m", "rollscope.cli", *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
        assert done.returncode == 0, (command, done.stderr[-3000:])
    assert (tmp_path / "rollscope_traces").is_dir() and sorted(p.name for p in tmp_path.iterdir()) == [
        "rollscope_traces"
    ]


def test_quickstart_2_runs_from_an_empty_directory(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart(2).code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, env=_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    from rollscope.store import TraceStore

    [t] = TraceStore(tmp_path / "rollscope_traces").trajectories()
    assert (t.step, t.sample_index, t.rollout_n) == (3, 17, 0)
