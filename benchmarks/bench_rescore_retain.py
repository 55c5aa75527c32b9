"""``rollscope rescore`` and ``traces compact --retain`` on bench_store's synthetic store (groups
of 8, random 0/1 rewards, 10 % of trajectories with a failed tool call, 5 % truncated, 3 % at the
turn limit): rescoring's trajectories/s with 1 worker process and with 2, side by side in one run;
retention's kept groups, bytes before and after, and time.

usage: python benchmarks/bench_rescore_retain.py [--spans 100000] [--policy anomalous,sample=0.1] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import build_store  # a sibling script, not a package

from rollscope.datasets.rescore import rescore
from rollscope.store import TraceStore
from rollscope.store.retention import parse_policy, retain

REWARD = '''
def by_length(data_source, solution_str, ground_truth, extra_info=None):
    """A reward that disagrees with the stored one about half the time."""
    return float(len(solution_str) % 2)

def costly(data_source, solution_str, ground_truth, extra_info=None):
    """The same, after ~2 ms of CPU (a verifier, a parser): where worker processes pay off."""
    sum(i * i for i in range(60_000))
    return float(len(solution_str) % 2)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=100_000)
    ap.add_argument("--policy", default="anomalous,sample=0.1")
    ap.add_argument("--json")
    args = ap.parse_args()
    results: dict = {"spans": args.spans}
    with tempfile.TemporaryDirectory() as tmp:
        store_dir = Path(tmp) / "store"
        t0 = time.perf_counter()
        build_store(args.spans, str(store_dir), shards=1)  # one writer: GRPO groups of 8
        print(f"store of {args.spans:,} spans built in {time.perf_counter() - t0:.1f} s", flush=True)
        reward = Path(tmp) / "bench_reward.py"
        reward.write_text(REWARD)
        for fn in ("by_length", "costly"):
            for workers in (1, 2):
                with TraceStore(store_dir) as store:
                    t0 = time.perf_counter()
                    report = rescore(store, f"{reward}:{fn}", name=f"{fn}-{workers}", workers=workers)
                    elapsed = time.perf_counter() - t0
                totals = report.totals()
                results[f"rescore_{fn}_{workers}"] = {
                    "trajectories": report.trajectories,
                    "s": elapsed,
                    "per_s": report.trajectories / elapsed,
                    **totals,
                }
                print(
                    f"rescore {fn}, {workers} worker(s): {report.trajectories:,} trajectories in {elapsed:.1f} s = "
                    f"{report.trajectories / elapsed:,.0f}/s; {totals['flipped']:,} of {totals['groups']:,} groups "
                    f"flipped, {totals['became_zero_variance']:,} became zero-variance",
                    flush=True,
                )
            ratio = results[f"rescore_{fn}_2"]["per_s"] / results[f"rescore_{fn}_1"]["per_s"]
            results[f"rescore_{fn}_speedup_2_vs_1"] = ratio
            print(f"rescore {fn}: 2 workers / 1 worker = {ratio:.2f}x", flush=True)
        copy = Path(tmp) / "retained"
        shutil.copytree(store_dir, copy)
        t0 = time.perf_counter()
        done = retain(copy, parse_policy(args.policy))
        elapsed = time.perf_counter() - t0
        s = done.summary
        results["retain"] = {**done.to_dict(), "s": elapsed}
        results["retain"].pop("anomalous")
        print(
            f"retain {args.policy}: {s['kept_groups']:,} of {s['groups']:,} groups kept ({s['anomalous_groups']:,} "
            f"anomalous: {s['by_anomaly']}, {s['sampled_groups']:,} sampled); {done.bytes_before / 2**20:.1f} MB -> "
            f"{done.bytes_after / 2**20:.1f} MB in {elapsed:.1f} s"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
