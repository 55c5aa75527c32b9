"""Benchmarks time each variant in an interpreter of its own; this runs one and reads its result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_fresh(script: str, *args: str) -> dict:
    """Run ``python script args`` and return the JSON object it printed last (its result). A
    failing run raises with the end of its stderr, so a broken variant says why."""
    proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{Path(script).name} {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])
