"""rollscope's ToolAgentLoop against verl 0.9.1's own, same ScriptedLLM and tokenizer, one run.

  verl_off   verl's ToolAgentLoop, no tracing
  rs_off     rollscope's ToolAgentLoop, tracing not initialised
  rs_local   rollscope's ToolAgentLoop, local backend (every trajectory, llm and tool span stored)

Each trajectory has 3 assistant turns (calculator call, calculator call, final answer), built the
way verl's worker builds loops (a fresh loop instance per trajectory), 64 at a time. Two LLM
settings: one that answers instantly (the loops' own CPU is all there is: the worst case for
tracing, which competes for the same cores), and one taking 200 ms per turn (still fast for a GPU
server generating a few hundred tokens), where the LLM is the bottleneck as in real training.
Each (setting, round, variant) runs in a fresh interpreter, timed from the same garbage-collector
phase (a full collection first); percentages are medians of per-round pairs. The traced variant's
flush afterwards is reported apart: the trace sidecar stores while the rollout leaves the CPU idle,
so with an instant LLM it catches up after the rollouts.

usage: python benchmarks/bench_agent_loop.py [--trajectories 1000] [--rounds 3] [--latency-ms 0,200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

VARIANTS = ["verl_off", "rs_off", "rs_local"]
REPLIES = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "391 + 1"}}</tool_call>',
    "The answer is 392.",
]


def one_variant(variant: str, n: int, model_dir: str, latency_s: float = 0.0) -> dict:
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rollscope import tracing
    from rollscope.agentloops import ToolAgentLoop
    from rollscope.llm import ScriptedLLM
    from rollscope.testing import compose_config
    from rollscope.tools.builtin import CalculatorTool

    cfg = compose_config(Path(model_dir), ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tools = [CalculatorTool()]
    cls = VerlToolAgentLoop if variant == "verl_off" else ToolAgentLoop
    tmp = tempfile.mkdtemp()
    if variant == "rs_local":
        tracing.init_tracing(project="bench", experiment="agent_loop", trace_dir=tmp)

    async def trajectory(llm: ScriptedLLM, i: int) -> int:
        loop = cls(
            trainer_config=DictConfigWrap(cfg), server_manager=llm, tokenizer=tokenizer, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), tools=ToolListWrap(tools),
        )  # fmt: skip
        prompt = [{"role": "user", "content": f"What is 17 * 23 + 1? ({i})"}]
        out = await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=prompt, index=i)
        return out.num_turns

    async def run_all(count: int) -> float:
        llm = ScriptedLLM(tokenizer, REPLIES, latency_s=latency_s)
        sem = asyncio.Semaphore(64)

        async def bounded(i: int) -> int:
            async with sem:
                return await trajectory(llm, i)

        t0 = time.perf_counter()
        turns = await asyncio.gather(*(bounded(i) for i in range(count)))
        elapsed = time.perf_counter() - t0
        assert all(t == 6 for t in turns), set(turns)  # 3 assistant + 2 tool + the prompt
        return elapsed

    asyncio.run(run_all(50))  # warm-up
    # Every variant starts its timed run from the same garbage-collector phase. Otherwise whether
    # a full collection (~0.3 s over the torch/transformers/verl heap, one per ~2,000 trajectories
    # here, traced or not) falls inside a ~3 s window decides a round by ±10 %.
    gc.collect()
    gc_time = [0.0, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        now = time.perf_counter()
        gc_time[phase == "stop"] += now if phase == "stop" else -now

    gc.callbacks.append(on_gc)
    elapsed = asyncio.run(run_all(n))
    gc.callbacks.remove(on_gc)
    stored = None
    flush_s = 0.0
    if variant == "rs_local":
        t0 = time.perf_counter()
        tracing.flush_tracing(300)  # the sidecar stores what it held back while the rollout ran
        flush_s = time.perf_counter() - t0
        from rollscope.store import TraceStore

        stored = TraceStore(tmp).count(experiment="agent_loop")
        assert stored == n + 50, stored
        tracing.shutdown_tracing()
    return {"elapsed_s": elapsed, "flush_s": flush_s, "gc_s": gc_time[0] + gc_time[1], "stored": stored}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", default="0,200", help="LLM latency per turn, comma list")
    ap.add_argument("--json")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--latency-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(one_variant(args.variant, args.trajectories, args.model_dir, args.latency_s)))
        return
    from rollscope.testing import make_model_dir

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(make_model_dir(Path(tmp) / "model"))
        for latency_ms in [float(x) for x in args.latency_ms.split(",")]:
            results[f"latency_{latency_ms:g}ms"] = _setting(args, model_dir, latency_ms)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def _setting(args: argparse.Namespace, model_dir: str, latency_ms: float) -> dict:
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    gc_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    catch_up_s: list[float] = []
    for _ in range(args.rounds):
        for v in VARIANTS:
            cmd = [sys.executable, __file__, "--variant", v, "--trajectories", str(args.trajectories),
                   "--model-dir", model_dir, "--latency-s", str(latency_ms / 1000)]  # fmt: skip
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            rates[v].append(args.trajectories / out["elapsed_s"])
            gc_s[v].append(out["gc_s"])
            if v == "rs_local":
                catch_up_s.append(out["flush_s"])
    med = {v: statistics.median(r) for v, r in rates.items()}
    # Paired per round (variants of a round run back to back): steadier than a ratio of medians
    # when the machine's speed drifts between rounds.
    paired = [(1 - t / u) * 100 for t, u in zip(rates["rs_local"], rates["rs_off"], strict=True)]
    res = {
        "trajectories": args.trajectories,
        "rounds": args.rounds,
        "llm_latency_ms": latency_ms,
        "trajectories_per_s": med,
        "all_rounds": rates,
        "tracing_cost_pct": statistics.median(paired),
        "tracing_cost_pct_rounds": paired,
        "rs_off_vs_verl_off_pct": statistics.median(
            [(r / v - 1) * 100 for r, v in zip(rates["rs_off"], rates["verl_off"], strict=True)]
        ),
        "gc_s_median": {v: statistics.median(g) for v, g in gc_s.items()},
        "store_catch_up_s_median": statistics.median(catch_up_s),
    }
    print(f"LLM latency {latency_ms:g} ms per turn, {args.trajectories} trajectories x 3 turns, 64 concurrent:")
    for v in VARIANTS:
        print(f"  {v:<9} {med[v]:8.1f} trajectories/s   rounds: " + ", ".join(f"{r:.1f}" for r in rates[v]))
    print(
        f"  tracing on (local) costs {res['tracing_cost_pct']:.1f}% of rollscope's untraced throughput, median of"
        f" rounds: " + ", ".join(f"{p:.1f}" for p in paired) + " (goal <= 3%)"
    )
    print(
        "  garbage collection in the timed run, median s: "
        + ", ".join(f"{v} {g:.2f}" for v, g in res["gc_s_median"].items())
    )
    print(f"  the sidecar stored what it had held back in {res['store_catch_up_s_median']:.2f} s after the rollouts")
    print(f"  rollscope untraced vs verl untraced: {res['rs_off_vs_verl_off_pct']:+.1f}% (goal >= 0)")
    return res


if __name__ == "__main__":
    main()
