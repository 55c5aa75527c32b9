"""``--source weave:`` at scale: the same run read from W&B's own Weave trace server (weave's
ClickHouseTraceServer on in-process ClickHouse, ``tests/engines``) and from the local store, side
by side in one run, at each size asked for (default 10,000 and 100,000 trajectories).

Each size is a synthetic run (``bench_store``'s rows: reward, counts, tool errors, log-probs)
of 96 trajectories a step (12 samples x 8 rollouts), so 100,000 trajectories are ~1,040 steps:
a step holds the same at every size, the run grows. It is written to a local store, and to Weave
as the weave backend writes a stored trajectory (``complete_calls`` of its record: the root call
with its row in the summary), roots only but for the first 200 trajectories, written whole
(7 spans each) so that ``show`` is measured too. Timed, each a fresh reader as the command opens:
  ls --step S   open the source with the step's filter, list the step (50), count it
  insights      open the source, every signal for the run
  show          one trajectory with its spans

usage: python benchmarks/bench_weave_source.py [--sizes 10000,100000] [--runs 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tests.engines: where Weave's server is started
from bench_store import _synthetic_rows  # a sibling script, not a package

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("WANDB_SILENT", "true")
PER_STEP, ROLLOUTS, WHOLE = 96, 8, 200


def build(n: int, directory: Path) -> None:
    from rollscope.store.writer import ShardWriter

    trajectories, spans = _synthetic_rows(n, seed=n, steps=max(1, n // PER_STEP), rollouts=ROLLOUTS)
    writer = ShardWriter(directory)
    for i in range(0, len(trajectories), 5000):
        writer.write(trajectories[i : i + 5000], spans[i * 7 : (i + 5000) * 7])
    writer.close()


def to_weave(directory: Path, project: str) -> float:
    """The stored run into Weave, as the weave backend writes it; returns calls a second."""
    import weave

    from rollscope.store import TraceStore
    from rollscope.tracing.backends.weave import complete_calls, send_calls, trajectory_view

    client = weave.init(project)
    ops: dict[str, str] = {}
    t0, sent, batch = time.perf_counter(), 0, []
    with TraceStore(directory) as store:
        records = store.trajectories(order_by="start")
        for i, record in enumerate(records):
            spans = record.spans if i < WHOLE else []
            batch += complete_calls(client, trajectory_view(record, None, spans), spans, ops)
            if len(batch) >= 2000 or i == len(records) - 1:
                assert not send_calls(client.server, batch)
                sent += len(batch)
                batch = []
    return sent / (time.perf_counter() - t0)


def timed(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def measure(n: int, runs: int, tmp: Path) -> dict:
    from rollscope.analysis.insights import insights
    from rollscope.sources import open_source

    directory, project = tmp / f"store-{n}", f"bench/run-{n}"
    build(n, directory)
    calls_per_s = to_weave(directory, project)
    with open_source(None, directory) as store:
        step = store.steps()[len(store.steps()) // 2].step
        whole = store.trajectories(order_by="start", limit=1)[0].id
    sources = {"local": (None, directory), "weave": (f"weave:{project}", None)}

    def listing(name):
        source, where = sources[name]
        with open_source(source, where, step=step) as s:
            assert len(s.trajectories(step=step, limit=50)) == 50 and s.count(step=step) >= PER_STEP - ROLLOUTS

    def run_insights(name):
        source, where = sources[name]
        with open_source(source, where) as s:
            assert insights(s)[0].trajectories == n

    def show(name):
        source, where = sources[name]
        with open_source(source, where, ids=[whole]) as s:
            assert len(s.get(whole).spans) == 7

    out = {"trajectories": n, "steps": n // PER_STEP, "weave_write_calls_per_s": calls_per_s}
    for label, fn in (("ls_step_ms", listing), ("insights_ms", run_insights), ("show_ms", show)):
        for name in sources:
            out[f"{name}_{label}"] = timed(lambda name=name, fn=fn: fn(name), runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    from tests.engines import WeaveTraceServer

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        server = WeaveTraceServer(Path(tmp))
        os.environ.update(server.environment())
        try:
            for n in map(int, args.sizes.split(",")):
                r = measure(n, args.runs, Path(tmp))
                results.append(r)
                print(
                    f"{n:,} trajectories ({r['steps']:,} steps; written to Weave at "
                    f"{r['weave_write_calls_per_s']:,.0f} calls/s), median of {args.runs}:",
                    flush=True,
                )
                for label in ("ls_step", "insights", "show"):
                    local, weave = r[f"local_{label}_ms"], r[f"weave_{label}_ms"]
                    print(f"  {label:<9} local {local:8.1f} ms   weave {weave:8.1f} ms", flush=True)
        except Exception:
            print(server.log.read_text()[-4000:], file=sys.stderr)
            raise
        finally:
            server.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
