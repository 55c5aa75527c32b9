"""Where tracing's cost on the rollout's thread goes: the hooks, and the packing and sending.

One trajectory at a time (rollscope's ToolAgentLoop, ScriptedLLM answering instantly, 3 turns),
traced and untraced alternating trajectory by trajectory in one interpreter with one tracer,
detached for the untraced ones (they see no tracer at all, as when tracing was never
initialised). Pairs of neighbouring trajectories see the same machine speed, so the median of
their differences is steady where throughput rounds on this shared machine scatter by ±20 %.
Two runs, each in a fresh interpreter:

  hooks   the tracer's events are discarded where they are submitted: spans, trajectories,
          context variables, the wrappers' own work
  full    the local backend through the trace sidecar: hooks + packing each event + the
          sending thread (the sidecar stores while the process idles, so after the run)

usage: python benchmarks/bench_trace_breakdown.py [--pairs 1500] [--json OUT]
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
sys.path.insert(0, str(Path(__file__).parent))

from bench_agent_loop import REPLIES

MODES = ["hooks", "full"]


def one_mode(mode: str, pairs: int, model_dir: str) -> dict:
    import logging

    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rollscope import tracing
    from rollscope.agentloops import ToolAgentLoop
    from rollscope.llm import ScriptedLLM
    from rollscope.testing import compose_config
    from rollscope.tools.builtin import CalculatorTool
    from rollscope.tracing import runtime

    logging.disable(logging.WARNING)  # verl warns about the test model's type at every loop
    cfg = compose_config(Path(model_dir), ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tools = [CalculatorTool()]
    llm = ScriptedLLM(tokenizer, REPLIES, latency_s=0.0)
    tracer = tracing.init_tracing(project="bench", experiment="breakdown", trace_dir=tempfile.mkdtemp())
    if mode == "hooks":
        tracer.submit = lambda event: None

    async def trajectory(i: int) -> float:
        loop = ToolAgentLoop(
            trainer_config=DictConfigWrap(cfg), server_manager=llm, tokenizer=tokenizer, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), tools=ToolListWrap(tools),
        )  # fmt: skip
        t0 = time.perf_counter()
        await loop.run(
            {"temperature": 1.0, "logprobs": True}, raw_prompt=[{"role": "user", "content": f"{i}"}], index=i
        )
        return time.perf_counter() - t0

    async def run() -> dict[str, list[float]]:
        for i in range(100):  # warm-up, both ways
            runtime._tracer = tracer if i % 2 else None
            await trajectory(i)
        times: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(pairs):
            for setting in ("off", "on") if i % 2 else ("on", "off"):
                runtime._tracer = tracer if setting == "on" else None
                times[setting].append(await trajectory(i))
        runtime._tracer = tracer
        return times

    times = asyncio.run(run())
    tracing.shutdown_tracing()
    diffs = [(on - off) * 1e6 for off, on in zip(times["off"], times["on"], strict=True)]
    untraced = statistics.median(times["off"]) * 1e6
    return {
        "untraced_us": untraced,
        "added_us": statistics.median(diffs),
        "added_pct": statistics.median(diffs) / untraced * 100,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=1500)
    ap.add_argument("--json")
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        print(json.dumps(one_mode(args.mode, args.pairs, args.model_dir)))
        return
    from rollscope.testing import make_model_dir

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(make_model_dir(Path(tmp) / "model"))
        for mode in MODES:
            cmd = [sys.executable, __file__, "--mode", mode, "--pairs", str(args.pairs), "--model-dir", model_dir]
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
            r = results[mode]
            print(f"  {mode:<6} adds {r['added_us']:6.1f} us per trajectory = {r['added_pct']:.1f}% of an"
                  f" untraced one ({r['untraced_us']:.0f} us), median of {args.pairs} pairs", flush=True)  # fmt: skip
    h, f = results["hooks"], results["full"]
    print(f"  packing and sending: ~{f['added_us'] - h['added_us']:.0f} us per trajectory"
          f" (~{f['added_pct'] - h['added_pct']:.1f}%)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
