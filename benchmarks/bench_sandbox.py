"""The Python sandbox's cost per call: bubblewrap's kernel isolation against the plain child process
it replaced (rlimits and the audit hook only; what ``allow_unsandboxed: true`` still runs), calls
alternating one by one in one process so both see the same machine.

usage: python benchmarks/bench_sandbox.py [--calls 40] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from rollscope.tools.builtin.python_sandbox import run_sandboxed

SOLUTION = """
import math
from collections import Counter, defaultdict


def primes(n):
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\\x00\\x00"
    for i in range(2, int(math.isqrt(n)) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return [i for i, p in enumerate(sieve) if p]


def word_counts(text):
    return Counter(w.strip(".,!?").lower() for w in text.split())


def group_by_length(words):
    groups = defaultdict(list)
    for w in words:
        groups[len(w)].append(w)
    return dict(groups)


def fib(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def digits(n):
    total = 0
    while n:
        n, d = divmod(n, 10)
        total += d
    return total


def solve():
    ps = primes(10_000)
    text = "the quick brown fox jumps over the lazy dog. The dog sleeps!"
    counts = word_counts(text)
    groups = group_by_length(counts)
    with open("result.txt", "w") as f:
        f.write(str(len(ps)))
    with open("result.txt") as f:
        n = int(f.read())
    return n, counts["the"], sorted(groups), fib(90), digits(fib(90))


if __name__ == "__main__":
    print(solve())
"""
PROGRAMS = {"print(1)": "print(1)", "50-line solution": SOLUTION}


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def timed(code: str, unsandboxed: bool) -> float:
    t0 = time.perf_counter()
    result = await run_sandboxed(code, wall_s=30, unsandboxed=unsandboxed)
    assert result["status"] == "ok", result
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()
    assert len(SOLUTION.strip().splitlines()) >= 50
    results = {}
    for name, code in PROGRAMS.items():
        times: dict[str, list[float]] = {"bubblewrap": [], "plain child": []}
        for _ in range(3):  # warm the page cache and the sandbox's first-use check
            asyncio.run(timed(code, False))
            asyncio.run(timed(code, True))
        for i in range(args.calls):
            order = (False, True) if i % 2 else (True, False)
            for unsandboxed in order:
                times["plain child" if unsandboxed else "bubblewrap"].append(asyncio.run(timed(code, unsandboxed)))
        row = {k: {"p50_ms": 1e3 * statistics.median(v), "p95_ms": 1e3 * pct(v, 0.95)} for k, v in times.items()}
        added = [b - p for b, p in zip(times["bubblewrap"], times["plain child"], strict=True)]
        row["added_p50_ms"] = 1e3 * statistics.median(added)
        results[name] = row
        cells = [f"{k} p50 {row[k]['p50_ms']:6.1f} ms p95 {row[k]['p95_ms']:6.1f} ms" for k in times]
        print(f"{name:<17} {' | '.join(cells)} | added p50 {row['added_p50_ms']:+6.1f} ms", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
