"""What ingest costs per span, in machine instructions, side by side with a baseline commit: a
figure this shared machine's speed does not move (its throughput moves by a third between runs).

bench_store's ingest (``--child ingest``: 3-turn trajectories of 7 spans through the whole tracing
pipeline into the local store, one trace sidecar) runs under valgrind's callgrind, which counts the
instructions each process executes, children included. Each tree runs it twice, at ``--small`` and
``--large`` trajectories; the difference, divided by the spans between them, is the cost of a span
with every start-up cost (imports, the secret rules' load) cancelled out: for the traced process
(the rollout's side: hooks, packing, sending) and for the sidecar (unpacking, shaping, redaction,
encoding, SQLite). Instructions are not time (a cache miss costs more than an add), but on one
machine they move with the work done, and only with it.

Needs valgrind (``apt-get install valgrind``); each run takes minutes (callgrind slows a process
about fifty times).

usage: python benchmarks/bench_ingest_instructions.py [--baseline REV] [--small 500] [--large 1500] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_budget import worktree  # noqa: E402
from bench_store import SPANS_PER_TRAJECTORY  # noqa: E402

SIDECAR = "rollscope.tracing._sidecar.child"


def instructions(tree: Path, trajectories: int, tmp: Path) -> dict[str, int]:
    """Instructions executed by the traced process and by its sidecar, for one ingest run."""
    out = Path(tempfile.mkdtemp(dir=tmp))
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_ERROR_REPORTING": "false", "ROLLSCOPE_TRACE_SIDECAR": "1"}
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--trace-children=yes",
            f"--callgrind-out-file={out}/cg.%p",
            sys.executable,
            str(HERE / "bench_store.py"),
            "--child",
            "ingest",
            "--trajectories",
            str(trajectories),
            "--dir",
            str(out / "store"),
        ],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        timeout=3600,
    )
    found: dict[str, int] = {}
    for f in out.glob("cg.*"):
        command, total = _header(f)
        if SIDECAR in command:
            found["sidecar"] = found.get("sidecar", 0) + total
        elif "bench_store.py" in command:
            found["traced"] = total
    shutil.rmtree(out)
    return found


def _header(path: Path) -> tuple[str, int]:
    """A callgrind file's command line and its total instructions (both in its first lines)."""
    command, total = "", 0
    with path.open(errors="replace") as f:
        for line in f:
            if line.startswith("cmd:"):
                command = line
            elif line.startswith("summary:"):
                total = int(line.split()[1])
                break
    return command, total


def per_span(tree: Path, args: argparse.Namespace, tmp: Path) -> dict[str, float]:
    small, large = instructions(tree, args.small, tmp), instructions(tree, args.large, tmp)
    spans = (args.large - args.small) * SPANS_PER_TRAJECTORY
    return {side: (large[side] - small[side]) / spans for side in ("traced", "sidecar")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="6e7f0bf", help="the commit to compare with (a worktree of it)")
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--large", type=int, default=1500)
    ap.add_argument("--json")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench_ingest_instructions: needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = worktree(args.baseline, tmp)
        try:
            results = {"baseline": per_span(base, args, tmp), "head": per_span(HERE.parent, args, tmp)}
        finally:
            subprocess.run(
                ["git", "-C", str(HERE.parent), "worktree", "remove", "--force", str(base)], capture_output=True
            )
    print(
        f"instructions per span (ingest, one sidecar; {args.large} - {args.small} trajectories), "
        f"this tree beside {args.baseline}"
    )
    for side in ("traced", "sidecar"):
        before, now = results["baseline"][side], results["head"][side]
        print(f"{side:8s} {before:>10,.0f} {now:>10,.0f}  {100 * (now - before) / before:+.1f} %")
    if args.json:
        Path(args.json).write_text(json.dumps({"baseline_rev": args.baseline, **results}, indent=2))


if __name__ == "__main__":
    main()
