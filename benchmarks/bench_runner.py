"""`rollscope run`'s machinery against the same agent loops called directly, and the embedded model.

Runner overhead (goal: at most 2%). Both variants run rollscope's ToolAgentLoop from the
gsm8k-calculator example on the same rows, built the same way (Runner.new_loop, as verl's worker
builds them: a fresh loop per trajectory), 64 at a time, traced into the local store:
  direct   asyncio.gather over loop.run() calls (the loop opens its own trajectory)
  runner   Runner.run: the runner's trajectory, semaphore, per-trajectory counters, progress callback
The LLM is ScriptedLLM (a test double: calculator call, then the answer), instant or 200 ms per turn.
Each (setting, round, variant) runs in a fresh interpreter; medians over rounds.

Embedded model: gemma-3-270m on llama.cpp here. Decode and prompt-evaluation speed of the client
alone, then the gsm8k-calculator example through the runner at 1 and 4 concurrent trajectories.

usage: python benchmarks/bench_runner.py [--trajectories 1000] [--rounds 3] [--embedded-limit 8] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fresh import run_fresh

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

VARIANTS = ["direct", "runner"]
REPLIES = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>',
    "The answer is 976.",
]


def scripted_runner(n: int, latency_s: float) -> tuple:
    """(runner, its first n jobs, trace dir): the gsm8k-calculator loop over 40 rows, 64 at a time,
    ScriptedLLM (a test double: calculator call, then the answer) as the model. Shared with
    bench_faults.py."""
    from rollscope.llm import ScriptedLLM
    from rollscope.llm.factory import _scripted
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner

    tmp = tempfile.mkdtemp()
    replies = Path(tmp) / "replies.json"
    replies.write_text(json.dumps(REPLIES))
    _, tokenizer = _scripted(str(replies), None, None, 512, 0)
    config = load_config(
        "gsm8k-calculator", ["limit=40", f"n={-(-n // 40)}", "concurrency=64", "reward=null", f"trace_dir={tmp}/traces"]
    )
    runner = Runner(config, llm=ScriptedLLM(tokenizer, REPLIES, latency_s=latency_s), tokenizer=tokenizer)
    runner.setup()
    return runner, runner.jobs()[:n], f"{tmp}/traces"


def run_rounds(script: str, variants: list[str], args: argparse.Namespace, latency_ms: float) -> tuple[dict, dict]:
    """Every (round, variant) of ``script`` in a fresh interpreter: (trajectories/s, raw outputs) per variant."""
    rates: dict[str, list[float]] = {v: [] for v in variants}
    outputs: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            out = run_fresh(
                script, "--variant", v, "--trajectories", str(args.trajectories), "--latency-s", str(latency_ms / 1000)
            )
            rates[v].append(args.trajectories / out["elapsed_s"])
            outputs[v].append(out)
    return rates, outputs


def variant_cli(one_variant: Any, extra: dict[str, Any] | None = None) -> argparse.Namespace | None:
    """The command line both benchmarks share; runs one variant and returns None when asked to."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", default="0,200")
    for flag, default in (extra or {}).items():
        ap.add_argument(flag, type=type(default), default=default)
    ap.add_argument("--json")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--latency-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(one_variant(args.variant, args.trajectories, args.latency_s)))
        return None
    return args


def one_variant(variant: str, n: int, latency_s: float) -> dict:
    from rollscope.runner.dataset import loop_kwargs
    from rollscope.store import TraceStore
    from rollscope.tracing import flush_tracing, shutdown_tracing

    runner, jobs, trace_dir = scripted_runner(n, latency_s)
    config = runner.config
    runner.start_tracing()

    async def direct() -> None:
        limit = asyncio.Semaphore(config.concurrency)

        async def one(job) -> None:
            async with limit:
                kwargs = loop_kwargs(job.row, job.position)
                await runner.new_loop(runner.agent_entry).run(
                    dict(runner.sampling_params), **kwargs, step=config.step, rollout_n=job.rollout_n
                )

        await asyncio.gather(*(one(job) for job in jobs))

    async def through_runner() -> None:
        await runner.run(jobs, on_outcome=lambda outcome: None)
        assert runner.stats.failed == 0

    t0 = time.perf_counter()
    asyncio.run(direct() if variant == "direct" else through_runner())
    elapsed = time.perf_counter() - t0
    flush_tracing(300)
    stored = TraceStore(trace_dir).count()
    shutdown_tracing()
    assert stored == n, stored
    return {"elapsed_s": elapsed}


def overhead(args: argparse.Namespace, latency_ms: float) -> dict:
    rates, _ = run_rounds(__file__, VARIANTS, args, latency_ms)
    med = {v: statistics.median(r) for v, r in rates.items()}
    cost = (1 - med["runner"] / med["direct"]) * 100
    print(
        f"runner overhead, LLM latency {latency_ms:g} ms/turn, {args.trajectories} trajectories x 2 turns, "
        "64 concurrent:"
    )
    for v in VARIANTS:
        print(f"  {v:<7} {med[v]:8.1f} trajectories/s   rounds: " + ", ".join(f"{r:.1f}" for r in rates[v]))
    print(f"  the runner costs {cost:.1f}% of direct asyncio.gather throughput (goal <= 2%)")
    return {"llm_latency_ms": latency_ms, "trajectories_per_s": med, "all_rounds": rates, "runner_cost_pct": cost}


def embedded(limit: int) -> dict:
    from rollscope.llm.embedded import EmbeddedLLM
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner
    from rollscope.tracing import shutdown_tracing

    t0 = time.perf_counter()
    llm = EmbeddedLLM()
    load_s = time.perf_counter() - t0
    tok = llm.tokenizer
    messages = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
    prompt = list(tok.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])
    long_prompt = list(tok.apply_chat_template([{"role": "user", "content": "word " * 500}])["input_ids"])
    llm._llama.reset()
    t0 = time.perf_counter()
    llm.generate_sync(long_prompt, {"max_tokens": 1})
    prefill = len(long_prompt) / (time.perf_counter() - t0)
    llm.generate_sync(prompt, {"max_tokens": 1})
    t0 = time.perf_counter()
    out = llm.generate_sync(prompt, {"temperature": 0.0, "max_tokens": 128})  # prompt cached: decode only
    decode = len(out.token_ids) / (time.perf_counter() - t0)
    print(
        f"embedded gemma-3-270m (llama.cpp, 2 threads): load {load_s:.1f} s, prompt evaluation "
        f"{prefill:.0f} tokens/s ({len(long_prompt)}-token prompt), decode {decode:.1f} tokens/s"
    )
    result = {"load_s": load_s, "prefill_tokens_per_s": prefill, "decode_tokens_per_s": decode, "example": {}}
    for concurrency in (1, 4):
        with tempfile.TemporaryDirectory() as tmp:
            overrides = [f"limit={limit}", f"concurrency={concurrency}", f"trace_dir={tmp}"]
            config = load_config("gsm8k-calculator", overrides)
            runner = Runner(config, llm=llm, tokenizer=tok)
            runner.setup()
            runner.start_tracing()
            asyncio.run(runner.run())
            shutdown_tracing()
        s = runner.stats
        row = {
            "trajectories_per_min": 60 * s.done / s.elapsed,
            "model_tokens_per_s": s.tokens / s.elapsed,
            "mean_reward": s.mean_reward,
            "tool_calls": s.tool_calls,
        }
        result["example"][f"concurrency_{concurrency}"] = row
        print(
            f"  gsm8k-calculator, {limit} trajectories, {concurrency} concurrent: "
            f"{row['trajectories_per_min']:.1f} trajectories/min, {row['model_tokens_per_s']:.1f} model tokens/s, "
            f"mean reward {s.mean_reward:.2f}, {s.tool_calls} tool calls"
        )
    return result


def main() -> None:
    args = variant_cli(one_variant, {"--embedded-limit": 8})
    if args is None:
        return
    results = {f"overhead_{ms}ms": overhead(args, float(ms)) for ms in args.latency_ms.split(",")}
    results["embedded"] = embedded(args.embedded_limit)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
