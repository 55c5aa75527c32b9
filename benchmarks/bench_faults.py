"""Rollout throughput with a trace backend that is down, slow (5 s a call) or raising, beside the
local store, against tracing off and the local store alone (goal: within 5 % of tracing off; the
local store must still get every trajectory).

The runner runs the gsm8k-calculator loop (calculator call, answer) over 1,000 trajectories, 64 at
a time, with ScriptedLLM (a test double) answering instantly or after 200 ms per turn. The faulty
backends are the test doubles from ``tests.doubles.fault_backends.register_fault_backends``. Each (setting,
round, variant) in a fresh interpreter; medians over rounds.

usage: python benchmarks/bench_faults.py [--trajectories 1000] [--rounds 3] [--latency-ms 0,200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its test doubles (tests/doubles)
from bench_runner import run_rounds, scripted_runner, variant_cli  # a sibling script, not a package

VARIANTS = ["off", "local", "local,fault-down", "local,fault-slow", "local,fault-raising"]


def one_variant(variant: str, n: int, latency_s: float) -> dict:
    from rollscope import tracing
    from rollscope.store import TraceStore
    from tests.doubles.fault_backends import register_fault_backends

    register_fault_backends(delay_s=5.0)
    runner, jobs, trace_dir = scripted_runner(n, latency_s)
    if variant != "off":
        tracing.init_tracing(backend=variant, trace_dir=trace_dir, token2text=True, tokenizer=runner.tokenizer)
    t0 = time.perf_counter()
    asyncio.run(runner.run(jobs))
    elapsed = time.perf_counter() - t0
    stored = None
    if variant != "off":
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the local store, whatever the other backend does
            tracing.flush_tracing(timeout=1)
            if TraceStore(trace_dir).count(status="ok") == n:
                break
        stored = TraceStore(trace_dir).count(status="ok")
        tracing.shutdown_tracing(timeout=2)
    return {"elapsed_s": elapsed, "stored": stored}


def setting(args: argparse.Namespace, latency_ms: float) -> dict:
    rates, outputs = run_rounds(__file__, VARIANTS, args, latency_ms)
    stored = {v: [out["stored"] for out in outs] for v, outs in outputs.items()}
    med = {v: statistics.median(r) for v, r in rates.items()}
    print(f"LLM latency {latency_ms:g} ms/turn, {args.trajectories} trajectories, 64 concurrent:")
    for v in VARIANTS:
        vs_off = (1 - med[v] / med["off"]) * 100
        vs_local = (1 - med[v] / med["local"]) * 100
        print(
            f"  {v:<20} {med[v]:8.1f} traj/s  cost vs off {vs_off:5.1f}%  vs local {vs_local:5.1f}%  "
            f"local store: {stored[v]}"
        )
    return {"llm_latency_ms": latency_ms, "trajectories_per_s": med, "all_rounds": rates, "stored": stored}


def main() -> None:
    args = variant_cli(one_variant)
    if args is None:
        return
    results = {f"latency_{ms}ms": setting(args, float(ms)) for ms in args.latency_ms.split(",")}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
