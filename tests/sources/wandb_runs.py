"""A W&B run made by wandb itself, offline (``WANDB_MODE=offline``: its own record files, no server),
in a process of its own: ``offline_run(directory, rows)`` logs each row at its step, as verl's
``Tracking`` does, and returns the run's id."""

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
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(directory), "WANDB_SILENT": "true",
           "WANDB_ERROR_REPORTING": "false"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(rows)], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return done.stdout.strip().splitlines()[-1]
