"""Server time of the web viewer's pages over a 1,000,000-span store (goal: a page of 100
trajectories in under 300 ms). Times ``Viewer.handle`` (query + render, what the Server-Timing
header reports), median of repeated requests with varied parameters.

usage: python benchmarks/bench_viewer.py [--spans 1000000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import build_store  # a sibling script, not a package


def median_ms(fn, requests: list[str]) -> float:
    times = []
    for target in requests:
        t0 = time.perf_counter()
        status, _, body = fn(target)
        times.append((time.perf_counter() - t0) * 1e3)
        assert status == 200, (target, body[:300])
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--json")
    args = ap.parse_args()
    from rollscope.store import TraceStore
    from rollscope.viewer.server import Viewer

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_store(args.spans, tmp)
        print(f"store of {args.spans:,} spans built in {time.perf_counter() - t0:.1f} s")
        viewer = Viewer(tmp)
        rng = random.Random(0)
        with TraceStore(tmp) as store:
            count = store.count()
            some = [r.id for r in store.trajectories(step=rng.randrange(100), limit=50)]
        pages = {
            "table, first page of 100 (by step)": ["/"] * 10,
            "table, page of 100 sorted by reward, descending": [
                f"/?sort=reward&desc=1&page={rng.randrange(1, 50)}" for _ in range(10)],
            "table, one step": [f"/?step={rng.randrange(100)}" for _ in range(10)],
            "table, deep page (offset 50,000)": ["/?page=501"] * 5,
            "table, filtered: reward >= 1, tool errors no": ["/?min_reward=1&tool_errors=no"] * 10,
            "trajectory page": [f"/t/{rng.choice(some)}" for _ in range(10)],
            "GRPO group page": [f"/group?step={rng.randrange(100)}&sample={rng.randrange(10)}" for _ in range(10)],
            "compare 4": ["/compare?" + "&".join(f"id={i}" for i in rng.sample(some, 4)) for _ in range(10)],
            "per-step charts (100 steps)": ["/steps"] * 5,
        }  # fmt: skip
        viewer.handle("/")  # warm: connections opened, templates compiled
        results = {"spans": args.spans, "trajectories": count, "server_ms": {}}
        print(f"viewer server time over {count:,} trajectories / {args.spans:,} spans (median ms):")
        for name, requests in pages.items():
            ms = median_ms(viewer.handle, requests)
            results["server_ms"][name] = ms
            print(f"  {name:<48} {ms:8.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
