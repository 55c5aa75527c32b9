"""Server time of the web viewer's pages over a 1,000,000-span store (goal: a page of 100
trajectories in under 300 ms; the trajectory page, with its chat and token views, under 50 ms).
Times ``Viewer.handle`` (query + render, what the Server-Timing header reports), median of
repeated requests with varied parameters, each request on a thread of its own as the HTTP server
runs them. ``--segments N``: the same spans in N sealed segments of the shared-filesystem layout
(goal: every page under 50 ms warm over 1,000 segments).

``--baseline REV`` also times the viewer of git revision REV (checked out into a temporary
worktree) on the same store, in alternating rounds, and prints both side by side with the ratio.

usage: python benchmarks/bench_viewer.py [--spans 1000000] [--segments N] [--baseline REV] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_segments import build_segments  # sibling scripts, not a package
from bench_store import build_store_reported


def median_ms(fn, requests: list[str]) -> float:
    times = []

    def one(target: str) -> None:
        t0 = time.perf_counter()
        status, _, body = fn(target)
        times.append((time.perf_counter() - t0) * 1e3)
        assert status == 200, (target, body[:300])

    for target in requests:  # a thread per request, as ThreadingHTTPServer serves them
        thread = threading.Thread(target=one, args=(target,))
        thread.start()
        thread.join()
    assert len(times) == len(requests), "a request failed (its traceback is above)"
    return statistics.median(times)


def pages(store_dir: str) -> dict[str, list[str]]:
    from rollscope.store import TraceStore

    rng = random.Random(0)
    with TraceStore(store_dir) as store:
        records = store.trajectories(step=rng.randrange(100), limit=50)
    some, groups = [r.id for r in records], [(r.step, r.sample_index) for r in records]
    return {
        "table, first page of 100 (by step)": ["/"] * 10,
        "table, page of 100 sorted by reward, descending": [
            f"/?sort=reward&desc=1&page={rng.randrange(1, 50)}" for _ in range(10)
        ],
        "table, one step": [f"/?step={rng.randrange(100)}" for _ in range(10)],
        "table, deep page (offset 50,000)": ["/?page=501"] * 5,
        "table, filtered: reward >= 1, tool errors no": ["/?min_reward=1&tool_errors=no"] * 10,
        "trajectory page (chat and token views)": [f"/t/{rng.choice(some)}" for _ in range(10)],
        "GRPO group page": ["/group?step={}&sample={}".format(*rng.choice(groups)) for _ in range(10)],
        "compare 4": ["/compare?" + "&".join(f"id={i}" for i in rng.sample(some, 4)) for _ in range(10)],
        "per-step charts (100 steps)": ["/steps"] * 5,
    }


def measure(store_dir: str) -> dict[str, float]:
    """Median server ms per page, with the viewer this interpreter imports."""
    from rollscope.viewer.server import Viewer

    viewer = Viewer(store_dir)
    viewer.handle("/")  # warm: connections opened, templates compiled
    return {name: median_ms(viewer.handle, requests) for name, requests in pages(store_dir).items()}


def in_child(tree: str, store_dir: str) -> dict[str, float]:
    """``measure`` with the code of checkout ``tree``, in a fresh interpreter."""
    code = (
        f"import json, sys; sys.path[:0] = [{tree!r}, {str(Path(__file__).parent)!r}]; "
        f"import bench_viewer; print(json.dumps(bench_viewer.measure({store_dir!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tree)
    if out.returncode != 0:
        raise SystemExit(f"the viewer of {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def side_by_side(rev: str | None, store_dir: str, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """(this checkout, revision ``rev``): each page's best median over ``rounds`` alternating
    rounds, so background load on the machine falls on both alike."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tree:
        if rev:
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "add", "--detach", tree, rev], check=True, capture_output=True
            )
        try:
            now: dict[str, float] = {}
            before: dict[str, float] = {}
            for _ in range(rounds):
                for best, checkout in ((before, tree), (now, str(repo))) if rev else ((now, str(repo)),):
                    for name, ms in in_child(checkout, store_dir).items():
                        best[name] = min(ms, best.get(name, ms))
            return now, before
        finally:
            if rev:
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", tree], capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--segments", type=int, help="lay the spans out as this many sealed segments")
    ap.add_argument("--baseline", help="a git revision to time side by side (e.g. HEAD~5)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; each page's best median is kept")
    ap.add_argument("--json")
    args = ap.parse_args()
    from rollscope.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        if args.segments:
            build_segments(Path(tmp), args.spans, args.segments)
        else:
            build_store_reported(args.spans, tmp)
        with TraceStore(tmp) as store:
            count = store.count()
        now, before = side_by_side(args.baseline, tmp, args.rounds)
        results = {
            "spans": args.spans,
            "segments": args.segments,
            "trajectories": count,
            "server_ms": now,
            "baseline": args.baseline,
            "baseline_ms": before,
        }
        layout = f"{args.segments:,} segments" if args.segments else "shards"
        print(f"viewer server time over {count:,} trajectories / {args.spans:,} spans in {layout} (median ms):")
        for name, ms in now.items():
            old = before.get(name) or before.get(name.replace(" (chat and token views)", ""))
            side = f"   {args.baseline}: {old:8.1f} ms   ratio {ms / old:5.2f}" if old else ""
            print(f"  {name:<48} {ms:8.1f} ms{side}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
