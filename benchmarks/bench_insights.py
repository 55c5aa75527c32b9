"""``rollscope insights`` over the 1,000,000-span benchmark store (goal: under 1 s). Times
``store.insights.insights`` on a freshly opened store (what the command does), median of runs,
and says how much of it is SQLite.

usage: python benchmarks/bench_insights.py [--spans 1000000] [--runs 5] [--baseline REV] [--json OUT]

``--baseline REV``: the same store read by that commit's ``insights`` too (a git worktree of it, in
a process of its own, timed inside it), alternating with this tree's, run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import build_store_reported  # a sibling script, not a package


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--baseline", metavar="REV", help="a commit to time beside this tree, on the same store")
    args = ap.parse_args()
    from rollscope.analysis.insights import insights
    from rollscope.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        build_store_reported(args.spans, tmp)
        times, steps, baseline = [], [], []
        tree = _worktree(args.baseline, Path(tempfile.mkdtemp()) / "tree") if args.baseline else None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            with TraceStore(tmp) as store:  # opened fresh each run, as the command does
                found = insights(store)
            times.append(time.perf_counter() - t0)
            steps = found[0].steps
            if tree is not None:
                baseline.append(_time_in(tree, tmp))
        if tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], check=True)
        result = {
            "spans": args.spans,
            "trajectories": found[0].trajectories,
            "steps": len(steps),
            "signals": len(found[0].signals),
            "median_s": statistics.median(times),
            "all_s": times,
            **({"baseline": args.baseline, "baseline_median_s": statistics.median(baseline)} if baseline else {}),
        }
        print(
            f"insights over {result['trajectories']:,} trajectories, {len(steps)} steps, "
            f"{result['signals']} step signals: median {result['median_s'] * 1e3:.0f} ms "
            f"(runs: {', '.join(f'{t * 1e3:.0f}' for t in times)} ms)"
        )
        if baseline:
            print(
                f"{args.baseline} on the same store: median {result['baseline_median_s'] * 1e3:.0f} ms "
                f"(runs: {', '.join(f'{t * 1e3:.0f}' for t in baseline)} ms)"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


def _worktree(rev: str, path: Path) -> Path:
    subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], check=True, capture_output=True)
    return path


def _time_in(tree: Path, store_dir: str) -> float:
    """``insights`` of the commit checked out at ``tree`` over ``store_dir``, timed in its process."""
    code = (
        "import time, rollscope\nfrom rollscope.analysis.insights import insights\n"
        "from rollscope.store import TraceStore\n"
        f"assert rollscope.__file__.startswith({str(tree)!r}), rollscope.__file__\n"
        f"t0 = time.perf_counter()\nwith TraceStore({store_dir!r}) as s: insights(s)\n"
        "print(time.perf_counter() - t0)"
    )
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
