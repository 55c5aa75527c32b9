"""The shared-filesystem layout (``store.segments``): what publishing costs a writer, how queries
fare over 1,000 segments holding 1,000,000 spans, how fast compaction merges them.

- ingest: trajectories through the tracing API (in the traced process, no sidecar, so the writer's
  own work is what is timed), into a live shard vs a local database publishing segments every
  0.5 s; each variant in its own interpreter, alternating, best of the rounds.
- queries: ``trajectories(step=S)`` and ``group(step, sample)`` medians over 1,000 segments (goals
  100 ms and 20 ms), warm connections.
- compaction: ``compact`` of those 1,000 segments into 64 MB ones.

usage: python benchmarks/bench_segments.py [--trajectories 3000] [--spans 1000000] [--segments 1000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import SPANS_PER_TRAJECTORY, _synthetic_rows, median_ms  # a sibling script, not a package

INGEST = """
import sys, time
from rollscope import tracing
n, shared, local = int(sys.argv[1]), sys.argv[2], sys.argv[3]
options = {"local_dir": local, "publish_interval_s": 0.5} if local != "-" else {}
tracing.init_tracing(trace_dir=shared, sidecar=False, **options)
payload = {"prompt_ids": list(range(300))}
t0 = time.perf_counter()
for i in range(n):
    with tracing.rollout_trace_attr(step=i // 64, sample_index=i % 64, rollout_n=0):
        for turn in range(3):
            with tracing.trace_span("llm.generate", kind="llm", inputs=payload) as s:
                s.outputs = {"token_ids": list(range(100)), "response_text": "x" * 200}
            with tracing.trace_span("calculator", kind="tool", inputs={"expression": "1+1"}) as s:
                s.outputs = {"text": "2"}
        tracing.set_reward(1.0)
tracing.shutdown_tracing(120)
print(n / (time.perf_counter() - t0))
"""


def ingest(n: int, rounds: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(rounds):
        for variant in ("live shard", "publishing segments"):
            with tempfile.TemporaryDirectory() as tmp:
                local = f"{tmp}/local" if variant == "publishing segments" else "-"
                out = subprocess.run(
                    [sys.executable, "-c", INGEST, str(n), f"{tmp}/shared", local],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                rate = float(out.stdout.strip().splitlines()[-1])
                best[variant] = max(rate, best.get(variant, 0.0))
    return best


def build_segments(directory: Path, total_spans: int, segments: int) -> int:
    """``segments`` sealed segments of a run, in step order as writers publish them."""
    from rollscope.store.segments import SEGMENTS, write_segment

    n = total_spans // SPANS_PER_TRAJECTORY
    rows_t, rows_s = _synthetic_rows(n, seed=0)
    per = -(-len(rows_t) // segments)
    for k in range(segments):
        chunk = rows_t[k * per : (k + 1) * per]
        if not chunk:
            break
        spans = rows_s[k * per * SPANS_PER_TRAJECTORY : (k + 1) * per * SPANS_PER_TRAJECTORY]
        lo, hi = min(r[3] for r in chunk), max(r[3] for r in chunk)
        target = directory / SEGMENTS / f"bench-{k % 8}~{k // 8 + 1:08d}~{lo}~{hi}.rstrace"

        def fill(db, chunk=chunk, spans=spans):
            marks_t, marks_s = ",".join("?" * len(chunk[0])), ",".join("?" * len(spans[0]))
            db.executemany(f"INSERT INTO trajectories VALUES ({marks_t})", chunk)
            db.executemany(f"INSERT INTO spans VALUES ({marks_s})", spans)

        write_segment(target, fill)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--segments", type=int, default=1000)
    ap.add_argument("--json")
    args = ap.parse_args()
    from rollscope.store import TraceStore
    from rollscope.store.compaction import compact
    from rollscope.store.segments import SEGMENTS

    rates = ingest(args.trajectories, args.rounds)
    ratio = rates["publishing segments"] / rates["live shard"]
    print(
        f"ingest ({args.trajectories} trajectories of 7 spans, best of {args.rounds}): "
        + ", ".join(f"{k} {v:.0f}/s" for k, v in rates.items())
        + f"; publishing at {ratio:.2f}x"
    )
    result: dict = {"ingest_per_s": rates, "ingest_ratio": ratio}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        t0 = time.perf_counter()
        n = build_segments(directory, args.spans, args.segments)
        print(
            f"{args.segments} segments, {n:,} trajectories, {args.spans:,} spans built in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        rng = random.Random(0)
        store = TraceStore(directory)
        t0 = time.perf_counter()
        store.count()
        cold_ms = (time.perf_counter() - t0) * 1e3
        steps = [rng.randrange(100) for _ in range(20)]
        it = iter(steps * 3)
        result.update(
            segments=args.segments,
            trajectories=n,
            first_query_ms=cold_ms,
            trajectories_step_ms=median_ms(lambda: store.trajectories(step=next(it)), 20),
            group_ms=median_ms(lambda: store.group(rng.randrange(100), rng.randrange(10)), 20),
        )
        store.close()
        size = sum(p.stat().st_size for p in (directory / SEGMENTS).glob("*.rstrace"))
        t0 = time.perf_counter()
        made = compact(directory)
        seconds = time.perf_counter() - t0
        result.update(compact_s=seconds, compact_mb_per_s=size / 2**20 / seconds, compacted_into=len(made))
        with TraceStore(directory) as store:
            assert store.count() == n
            result["group_ms_after_compaction"] = median_ms(
                lambda: store.group(rng.randrange(100), rng.randrange(10)), 20
            )
    print(
        f"over {args.segments} segments: first query (opening them) {result['first_query_ms']:.0f} ms, "
        f"trajectories(step) {result['trajectories_step_ms']:.1f} ms, group {result['group_ms']:.1f} ms; "
        f"compaction {size / 2**20:.0f} MB in {seconds:.1f} s ({result['compact_mb_per_s']:.0f} MB/s) into "
        f"{len(made)}; group after it {result['group_ms_after_compaction']:.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
