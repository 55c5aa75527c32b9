"""``rollscope insights`` over the 1,000,000-span benchmark store (goal: under 1 s). Times
``store.insights.insights`` on a freshly opened store (what the command does), median of runs,
and says how much of it is SQLite.

usage: python benchmarks/bench_insights.py [--spans 1000000] [--runs 5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
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
    args = ap.parse_args()
    from rollscope.analysis.insights import insights
    from rollscope.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        build_store_reported(args.spans, tmp)
        times, steps = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            with TraceStore(tmp) as store:  # opened fresh each run, as the command does
                found = insights(store)
            times.append(time.perf_counter() - t0)
            steps = found[0].steps
        result = {
            "spans": args.spans,
            "trajectories": found[0].trajectories,
            "steps": len(steps),
            "signals": len(found[0].signals),
            "median_s": statistics.median(times),
            "all_s": times,
        }
        print(
            f"insights over {result['trajectories']:,} trajectories, {len(steps)} steps, "
            f"{result['signals']} step signals: median {result['median_s'] * 1e3:.0f} ms "
            f"(runs: {', '.join(f'{t * 1e3:.0f}' for t in times)} ms)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
