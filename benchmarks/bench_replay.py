"""What a replay costs beyond its LLM calls (goal: under 1 s for a 3-turn trajectory). Records
3-turn trajectories with the runner and a scripted LLM, then times ``replay(..., check=True)``
(every model turn from the record, so no LLM call at all) in one process, as a test suite that
replays stored trajectories runs it: the first replay pays the imports (verl, the tokenizer), the
others are what each further one costs. Median of the later ones.

usage: python benchmarks/bench_replay.py [--replays 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

REPLIES = """replies:
  - '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>'
  - '<tool_call>{"name": "calculator", "arguments": {"expression": "976 + 0"}}</tool_call>'
  - 'The answer is 976.'
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--json")
    args = ap.parse_args()
    t_start = time.perf_counter()
    from rollscope.runner.config import load_config
    from rollscope.runner.replay import replay
    from rollscope.runner.runner import Runner
    from rollscope.store import TraceStore
    from rollscope.tracing import shutdown_tracing

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "r.yaml").write_text(REPLIES)
        config = load_config(
            "gsm8k-calculator", [f"llm=scripted:{tmp}/r.yaml", f"limit={args.replays + 1}", f"trace_dir={tmp}/t"]
        )
        runner = Runner(config)
        runner.setup()
        runner.start_tracing()
        asyncio.run(runner.run())
        shutdown_tracing()
        with TraceStore(f"{tmp}/t") as store:
            ids = [t.id for t in store.trajectories()]
            assert all(t.num_llm_calls == 3 for t in store.trajectories())
        recorded_s = time.perf_counter() - t_start
        times = []
        for tid in ids:
            t0 = time.perf_counter()
            outcome = replay(tid, store=f"{tmp}/t", check=True)
            times.append(time.perf_counter() - t0)
            assert outcome.ok, outcome.differences
    result = {
        "first_s": times[0],
        "median_s": statistics.median(times[1:]),
        "replays": len(times),
        "setup_and_record_s": recorded_s,
    }
    print(
        f"replay --check of a 3-turn trajectory: first {times[0] * 1e3:.0f} ms (imports included), "
        f"then median {result['median_s'] * 1e3:.0f} ms over {len(times) - 1} (no LLM call: every turn recorded)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
