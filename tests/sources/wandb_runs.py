"""A W&B run made by wandb itself, offline (``WANDB_MODE=offline``: its own record files, no server),
in a process of its own: ``offline_run(directory, rows)`` logs each row at its step, as verl's
``Tracking`` does, and returns the run's id. ``traced_runs``: a store whose trajectories belong
to W&B runs, as verl's trainer gives them theirs."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
import wandb
run = wandb.init(project="proj", name="demo-train")
for step, row in json.loads(sys.argv[1]):
    run.log(row, step=step)
print(run.id)
run.finish()
"""


def offline_run(directory: Path, rows: list[tuple[int, dict]]) -> str:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(directory),
        "WANDB_SILENT": "true",
        "WANDB_ERROR_REPORTING": "false",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(rows)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def traced_runs(trace_dir: Path, runs: list[str | None]) -> None:
    """One trajectory a run path (None: a trajectory of no run), as rollouts 0, 1, … of step 1."""
    from rollscope import tracing
    from rollscope.semconv import WANDB_RUN

    tracing.init_tracing(project="p", experiment="runs", trace_dir=str(trace_dir))
    for n, run in enumerate(runs):
        attributes = {WANDB_RUN: run} if run else {}
        with (
            tracing.rollout_trace_attr(step=1, sample_index=0, rollout_n=n, **attributes),
            tracing.trace_span("generate", kind="llm"),
        ):
            pass
    tracing.shutdown_tracing()
