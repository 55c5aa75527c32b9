"""Caller cost of a traced async method, side by side in one run.

Variants, interleaved round by round so machine noise hits all alike:
  plain            the method, no decorator
  rs_off           rollscope's rollout_trace_op, tracing not initialised
  rs_none          rollscope, backend "none" (whole pipeline, nothing stored)
  rs_local         rollscope, backend "local" (the embedded store)
  verl_off         verl 0.9.1's rollout_trace_op, no backend
  verl_weave       verl 0.9.1's rollout_trace_op, weave backend, real WeaveClient into an in-process server

Each figure is the median over rounds of (time for N awaited calls inside one trajectory) / N.
"End to end" adds the time to flush everything to the backend. Every (round, variant) runs in a
fresh interpreter, so one variant's background threads (weave's, ours) cannot tax another's.

usage: python benchmarks/bench_trace_op.py [--calls N] [--rounds R] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its test doubles (tests/doubles)

from fresh import run_fresh

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

from verl.utils import rollout_trace as vt

from rollscope import tracing
from tests.doubles.weave_server import InMemoryTraceServer, make_client


class Plain:
    async def step(self, x, params=None):
        return x + 1


class Rollscope:
    @tracing.rollout_trace_op
    async def step(self, x, params=None):
        return x + 1


class Verl:
    @vt.rollout_trace_op
    async def step(self, x, params=None):
        return x + 1


PARAMS = {"temperature": 1.0, "top_p": 1.0}


async def _loop(obj, n):
    t0 = time.perf_counter()
    for i in range(n):
        await obj.step(i, PARAMS)
    return time.perf_counter() - t0


def run_variant(name, n, tmp, weave_client):
    """Returns (caller seconds, end-to-end seconds)."""
    if name.startswith("rs_"):
        obj = Rollscope()
        if name == "rs_none":
            tracing.init_tracing(backend="none")
        elif name == "rs_local":
            tracing.init_tracing(backend="local", trace_dir=os.path.join(tmp, name))

        async def main():
            with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0):
                return await _loop(obj, n)

        t0 = time.perf_counter()
        caller = asyncio.run(main())
        tracing.shutdown_tracing()
        return caller, time.perf_counter() - t0
    if name.startswith("verl_"):
        obj = Verl()
        cfg = vt.RolloutTraceConfig.get_instance()
        cfg.backend, cfg.client, cfg._initialized = (None, None, True)
        if name == "verl_weave":
            cfg.backend, cfg.client = "weave", weave_client

        async def main():
            with vt.rollout_trace_attr(step=0, sample_index=0, rollout_n=0):
                return await _loop(obj, n)

        t0 = time.perf_counter()
        caller = asyncio.run(main())
        if name == "verl_weave":
            weave_client.flush()
        total = time.perf_counter() - t0
        vt.RolloutTraceConfig.reset()
        return caller, total
    caller = asyncio.run(_loop(Plain(), n))
    return caller, caller


VARIANTS = ["plain", "rs_off", "verl_off", "rs_none", "rs_local", "verl_weave"]


def one_variant(variant: str, n: int) -> None:
    """Child process: run one variant twice (the first warms up), print the second as JSON."""
    server = InMemoryTraceServer()
    weave_client = make_client(server) if variant == "verl_weave" else None
    with tempfile.TemporaryDirectory() as tmp:
        run_variant(variant, n, tmp, weave_client)
        c, t = run_variant(variant, n, tmp, weave_client)
    if weave_client is not None:
        assert len(server.ends) == 2 * n, "weave did not receive every call"
    print(json.dumps({"caller": c, "total": t}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--weave-calls", type=int, default=2_000, help="weave is slow: fewer calls")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        return one_variant(args.variant, args.calls)
    caller: dict[str, list[float]] = {v: [] for v in VARIANTS}
    e2e: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for v in VARIANTS:
            n = args.weave_calls if v == "verl_weave" else args.calls
            out = run_fresh(__file__, "--variant", v, "--calls", str(n))
            caller[v].append(out["caller"] / n * 1e6)
            e2e[v].append(out["total"] / n * 1e6)
    med = {v: statistics.median(caller[v]) for v in VARIANTS}
    med_e2e = {v: statistics.median(e2e[v]) for v in VARIANTS}
    res = {
        "calls": args.calls,
        "rounds": args.rounds,
        "caller_us": med,
        "end_to_end_us": med_e2e,
        "added_us_disabled": med["rs_off"] - med["plain"],
        "added_us_local": med["rs_local"] - med["plain"],
        "verl_weave_over_rs_local": (med["verl_weave"] - med["plain"]) / (med["rs_local"] - med["plain"]),
    }
    print(f"{'variant':<12} {'caller us/call':>15} {'end-to-end us/call':>19}")
    for v in VARIANTS:
        print(f"{v:<12} {med[v]:>15.2f} {med_e2e[v]:>19.2f}")
    print(f"added by decorator, tracing off:   {res['added_us_disabled']:.2f} us (goal <= 1)")
    print(f"added by decorator, local backend: {res['added_us_local']:.2f} us (goal <= 20)")
    print(f"verl+weave added cost / rollscope local added cost: {res['verl_weave_over_rs_local']:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
