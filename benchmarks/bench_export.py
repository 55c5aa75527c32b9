"""``rollscope export``: rows per second, and peak memory against store size (it streams one
step's groups at a time, so memory should stay flat from 100,000 to 1,000,000 spans).

Each export runs in a fresh interpreter (its peak RSS is the child's own ``ru_maxrss``).

usage: python benchmarks/bench_export.py [--spans 100000 1000000] [--formats parquet dpo] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import build_store_reported  # a sibling script, not a package

CHILD = """
import json, resource, sys, time
from rollscope.datasets import export
from rollscope.store import TraceStore
store_dir, out, fmt = sys.argv[1:4]
t0 = time.perf_counter()
with TraceStore(store_dir) as store:
    done = export(store, out, fmt)
elapsed = time.perf_counter() - t0
print(json.dumps({"rows": done.rows, "trajectories": done.trajectories, "groups": done.groups, "s": elapsed,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def one(store_dir: str, out: str, fmt: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, store_dir, out, fmt], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"export --format {fmt} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--formats", nargs="+", default=["parquet", "dpo"])
    ap.add_argument("--json")
    args = ap.parse_args()
    results = []
    for spans in args.spans:
        with tempfile.TemporaryDirectory() as tmp:
            build_store_reported(spans, tmp)
            for fmt in args.formats:
                r = {"spans": spans, "format": fmt, **one(tmp, str(Path(tmp) / f"out.{fmt}"), fmt)}
                r["trajectories_per_s"] = r["trajectories"] / r["s"]
                results.append(r)
                print(
                    f"{spans:>9,} spans  {fmt:<8} {r['rows']:>8,} rows from {r['trajectories']:>8,} trajectories "
                    f"in {r['s']:6.1f} s = {r['trajectories_per_s']:7,.0f} trajectories/s, "
                    f"peak RSS {r['max_rss_mb']:6.1f} MB",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
