"""rollscope's ToolAgentLoop against verl 0.9.1's own, same ScriptedLLM and tokenizer, one run.

  verl_off   verl's ToolAgentLoop, no tracing
  rs_off     rollscope's ToolAgentLoop, tracing not initialised
  rs_local   rollscope's ToolAgentLoop, local backend (every trajectory, llm and tool span stored)

Each trajectory has 3 assistant turns (calculator call, calculator call, final answer), built the
way verl's worker builds loops (a fresh loop instance per trajectory), 64 at a time. Two LLM
settings: one that answers instantly (the loops' own CPU is all there is: the worst case for
tracing, which competes for the same cores), and one taking 200 ms per turn (still fast for a GPU
server generating a few hundred tokens), where the LLM is the bottleneck as in real training.
Each round is a fresh interpreter in which the variants run interleaved in blocks (each variant's
trajectories split into ``--blocks``, in the order A B C C B A ..., the first variant rotating
between rounds): this shared machine's speed drifts by ±20 % over tens of seconds, so variants
compared seconds apart, not a minute apart. Every block starts from the same garbage-collector
phase (a full collection first). Percentages: medians of per-round pairs, and pooled over all
rounds. A round has one tracer, started and warmed before any clock starts and detached during
untraced blocks; the flush after each traced block is reported apart: the trace sidecar stores
while the rollout leaves the CPU idle, so with an instant LLM it catches up after the block.

usage: python benchmarks/bench_agent_loop.py [--trajectories 1000] [--blocks 4] [--rounds 3]
                                             [--latency-ms 0,200] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from fresh import run_fresh

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

VARIANTS = ["verl_off", "rs_off", "rs_local"]
WARM_UP = 20  # traced trajectories run by each round's tracer before any clock starts
REPLIES = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "17 * 23"}}</tool_call>',
    '<tool_call>{"name": "calculator", "arguments": {"expression": "391 + 1"}}</tool_call>',
    "The answer is 392.",
]


def one_round(order: list[str], block: int, model_dir: str, latency_s: float = 0.0) -> dict:
    """Run the variants' blocks in ``order`` in this interpreter; per variant: time in its blocks,
    garbage-collection time inside them, and (traced) the store's catch-up after each block."""
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rollscope import tracing
    from rollscope.agentloops import ToolAgentLoop
    from rollscope.llm import ScriptedLLM
    from rollscope.store import TraceStore
    from rollscope.testing import compose_config
    from rollscope.tools.builtin import CalculatorTool
    from rollscope.tracing import _runtime as runtime

    cfg = compose_config(Path(model_dir), ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tools = [CalculatorTool()]

    async def run_all(cls: type, count: int) -> float:
        llm = ScriptedLLM(tokenizer, REPLIES, latency_s=latency_s)
        sem = asyncio.Semaphore(64)

        async def trajectory(i: int) -> int:
            async with sem:
                loop = cls(
                    trainer_config=DictConfigWrap(cfg),
                    server_manager=llm,
                    tokenizer=tokenizer,
                    processor=None,
                    dataset_cls=RLHFDataset,
                    data_config=DictConfigWrap(cfg.data),
                    tools=ToolListWrap(tools),
                )
                prompt = [{"role": "user", "content": f"What is 17 * 23 + 1? ({i})"}]
                out = await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=prompt, index=i)
                return out.num_turns

        t0 = time.perf_counter()
        turns = await asyncio.gather(*(trajectory(i) for i in range(count)))
        elapsed = time.perf_counter() - t0
        assert all(t == 6 for t in turns), set(turns)  # 3 assistant + 2 tool + the prompt
        return elapsed

    classes = {"verl_off": VerlToolAgentLoop, "rs_off": ToolAgentLoop, "rs_local": ToolAgentLoop}
    asyncio.run(run_all(VerlToolAgentLoop, 50))  # warm-up, each code path once
    asyncio.run(run_all(ToolAgentLoop, 50))

    gc_time = [0.0, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        now = time.perf_counter()
        gc_time[phase == "stop"] += now if phase == "stop" else -now

    # One tracer for the round, started and warmed (store opened, code paths run once) before any
    # clock starts, as the tracer of a training run is. Untraced blocks detach it: they see no
    # tracer at all, exactly as when tracing was never initialised. (A tracer per traced block
    # would charge each one a sidecar start, a fork of this large process, that training pays once.)
    trace_dir = tempfile.mkdtemp()
    tracer = tracing.init_tracing(project="bench", experiment="agent_loop", trace_dir=trace_dir)
    asyncio.run(run_all(ToolAgentLoop, WARM_UP))
    tracing.flush_tracing(60)

    gc.callbacks.append(on_gc)
    out = {v: {"elapsed_s": 0.0, "gc_s": 0.0, "catch_up_s": 0.0, "trajectories": 0, "blocks_s": []} for v in order}
    for variant in order:
        traced = variant == "rs_local"
        runtime.state.tracer = tracer if traced else None
        # Every block starts from the same garbage-collector phase. Otherwise whether a full
        # collection (~0.3 s over the torch/transformers/verl heap, one per ~2,000 trajectories
        # here, traced or not) falls inside a block decides it by ±10 %.
        gc.collect()
        gc_time[:] = [0.0, 0.0]
        elapsed = asyncio.run(run_all(classes[variant], block))
        res = out[variant]
        res["elapsed_s"] += elapsed
        res["blocks_s"].append(round(elapsed, 3))
        res["gc_s"] += gc_time[0] + gc_time[1]
        res["trajectories"] += block
        if traced:
            t0 = time.perf_counter()
            tracing.flush_tracing(300)  # the sidecar stores what it held back while the rollout ran
            res["catch_up_s"] += time.perf_counter() - t0
    runtime.state.tracer = tracer
    tracing.shutdown_tracing()
    stored = TraceStore(trace_dir).count(experiment="agent_loop")
    assert stored == out["rs_local"]["trajectories"] + WARM_UP, stored
    gc.callbacks.remove(on_gc)
    return out


def _order(round_index: int, blocks: int) -> list[str]:
    """Each round starts with a different variant and alternates direction (A B C C B A ...), so
    every variant runs early and late equally often and a drift of the machine's speed within a
    round cancels out."""
    shift = round_index % len(VARIANTS)
    forward = VARIANTS[shift:] + VARIANTS[:shift]
    return [v for b in range(blocks) for v in (forward if b % 2 == 0 else forward[::-1])]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000, help="per variant and round")
    ap.add_argument("--blocks", type=int, default=4, help="blocks each variant's trajectories are split into")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency-ms", default="0,200", help="LLM latency per turn, comma list")
    ap.add_argument("--json")
    ap.add_argument("--order", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--latency-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trajectories % args.blocks:
        ap.error(f"--trajectories {args.trajectories} is not a multiple of --blocks {args.blocks}")
    if args.order:
        block = args.trajectories // args.blocks
        print(json.dumps(one_round(args.order.split(","), block, args.model_dir, args.latency_s)))
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
    seconds = {v: 0.0 for v in VARIANTS}
    gc_s: dict[str, list[float]] = {v: [] for v in VARIANTS}
    catch_up_s: list[float] = []
    block_s: dict[str, list[list[float]]] = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        order = _order(r, args.blocks)
        out = run_fresh(
            __file__,
            "--order",
            ",".join(order),
            "--trajectories",
            str(args.trajectories),
            "--blocks",
            str(args.blocks),
            "--model-dir",
            model_dir,
            "--latency-s",
            str(latency_ms / 1000),
        )
        for v in VARIANTS:
            rates[v].append(out[v]["trajectories"] / out[v]["elapsed_s"])
            seconds[v] += out[v]["elapsed_s"]
            gc_s[v].append(out[v]["gc_s"])
            block_s[v].append(out[v]["blocks_s"])
        catch_up_s.append(out["rs_local"]["catch_up_s"])
        print(f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{v} {rates[v][-1]:.1f}" for v in VARIANTS), flush=True)
    med = {v: statistics.median(r) for v, r in rates.items()}
    # Paired per round (a round's variants interleave in one interpreter): steadier than a ratio
    # of medians when the machine's speed drifts between rounds.
    paired = [(1 - t / u) * 100 for t, u in zip(rates["rs_local"], rates["rs_off"], strict=True)]
    res = {
        "trajectories_per_round": args.trajectories,
        "blocks": args.blocks,
        "rounds": args.rounds,
        "llm_latency_ms": latency_ms,
        "trajectories_per_s": med,
        "all_rounds": rates,
        "tracing_cost_pct": statistics.median(paired),
        "tracing_cost_pct_rounds": paired,
        "tracing_cost_pct_pooled": (seconds["rs_local"] / seconds["rs_off"] - 1) * 100,
        "rs_off_vs_verl_off_pct": statistics.median(
            [(r / v - 1) * 100 for r, v in zip(rates["rs_off"], rates["verl_off"], strict=True)]
        ),
        "rs_off_vs_verl_off_pct_pooled": (seconds["verl_off"] / seconds["rs_off"] - 1) * 100,
        "gc_s_median": {v: statistics.median(g) for v, g in gc_s.items()},
        "store_catch_up_s_median": statistics.median(catch_up_s),
        "block_seconds": block_s,
    }
    n = args.trajectories
    print(
        f"LLM latency {latency_ms:g} ms per turn, {n} trajectories x 3 turns per variant and round"
        f" ({args.blocks} interleaved blocks), 64 concurrent:"
    )
    for v in VARIANTS:
        print(f"  {v:<9} {med[v]:8.1f} trajectories/s   rounds: " + ", ".join(f"{r:.1f}" for r in rates[v]))
    print(
        f"  tracing on (local) costs {res['tracing_cost_pct']:.1f}% of rollscope's untraced throughput, median of"
        f" rounds: "
        + ", ".join(f"{p:.1f}" for p in paired)
        + f"; pooled over all rounds {res['tracing_cost_pct_pooled']:.1f}% (goal <= 3%)"
    )
    print(
        "  garbage collection in the timed blocks, median s per round: "
        + ", ".join(f"{v} {g:.2f}" for v, g in res["gc_s_median"].items())
    )
    print(
        f"  the sidecar stored what it had held back in {res['store_catch_up_s_median']:.2f} s per round"
        " after the traced blocks"
    )
    print(
        f"  rollscope untraced vs verl untraced: {res['rs_off_vs_verl_off_pct']:+.1f}%, pooled"
        f" {res['rs_off_vs_verl_off_pct_pooled']:+.1f}% (goal >= 0)"
    )
    return res


if __name__ == "__main__":
    main()
