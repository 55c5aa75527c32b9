"""Rollout throughput with a trace backend that is down, slow (5 s a call) or raising, beside the
local store, against tracing off and the local store alone (goal: within 5 % of tracing off; the
local store must still get every trajectory).

The runner runs the gsm8k-calculator loop (calculator call, answer) over 1,000 trajectories, 64 at
a time, with ScriptedLLM (a test double) answering instantly or after 200 ms per turn. The faulty
backends are the test doubles from ``rollscope.testing.register_fault_backends``. Each (setting,
round, variant) in a fresh interpreter; medians over rounds.

usage: python benchmarks/bench_faults.py [--trajectories 1000] [--rounds 3] [--latency-ms 0,200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

VARIANTS = ["off", "local", "local,fault-down", "local,fault-slow", "local,fault-raising"]
REPLIES = ['<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>',
           "The answer is 976."]


def one_variant(variant: str, n: int, latency_s: float) -> dict:
    from rollscope import tracing
    from rollscope.llm import ScriptedLLM
    from rollscope.llm.factory import _scripted
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner
    from rollscope.store import TraceStore
    from rollscope.testing import register_fault_backends

    register_fault_backends(delay_s=5.0)
    tmp = tempfile.mkdtemp()
    replies = Path(tmp) / "replies.json"
    replies.write_text(json.dumps(REPLIES))
    _, tokenizer = _scripted(str(replies), None, None, 512, 0)
    config = load_config("gsm8k-calculator", ["limit=40", f"n={-(-n // 40)}", "concurrency=64", "reward=null",
                                              f"trace_dir={tmp}/traces"])  # fmt: skip
    runner = Runner(config, llm=ScriptedLLM(tokenizer, REPLIES, latency_s=latency_s), tokenizer=tokenizer)
    runner.setup()
    if variant != "off":
        tracing.init_tracing(backend=variant, trace_dir=f"{tmp}/traces", token2text=True, tokenizer=tokenizer)
    jobs = runner.jobs()[:n]
    t0 = time.perf_counter()
    asyncio.run(runner.run(jobs))
    elapsed = time.perf_counter() - t0
    stored = None
    if variant != "off":
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the local store, whatever the other backend does
            tracing.flush_tracing(timeout=1)
            if TraceStore(f"{tmp}/traces").count(status="ok") == n:
                break
        stored = TraceStore(f"{tmp}/traces").count(status="ok")
        tracing.shutdown_tracing(timeout=2)
    return {"elapsed_s": elapsed, "stored": stored}


def setting(args: argparse.Namespace, latency_ms: float) -> dict:
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    stored: dict[str, list] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for v in VARIANTS:
            cmd = [sys.executable, __file__, "--variant", v, "--trajectories", str(args.trajectories),
                   "--latency-s", str(latency_ms / 1000)]  # fmt: skip
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            rates[v].append(args.trajectories / out["elapsed_s"])
            stored[v].append(out["stored"])
    med = {v: statistics.median(r) for v, r in rates.items()}
    print(f"LLM latency {latency_ms:g} ms/turn, {args.trajectories} trajectories, 64 concurrent:")
    for v in VARIANTS:
        vs_off = (1 - med[v] / med["off"]) * 100
        vs_local = (1 - med[v] / med["local"]) * 100
        print(f"  {v:<20} {med[v]:8.1f} traj/s  cost vs off {vs_off:5.1f}%  vs local {vs_local:5.1f}%  "
              f"local store: {stored[v]}")  # fmt: skip
    return {"llm_latency_ms": latency_ms, "trajectories_per_s": med, "all_rounds": rates, "stored": stored}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", default="0,200")
    ap.add_argument("--json")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--latency-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(one_variant(args.variant, args.trajectories, args.latency_s)))
        return
    results = {f"latency_{ms}ms": setting(args, float(ms)) for ms in args.latency_ms.split(",")}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
