"""Where tracing's cost on the rollout's thread goes (the hooks; packing and sending), and what
rollscope's loop costs against verl's, untraced: paired, trajectory by trajectory.

One trajectory at a time (rollscope's ToolAgentLoop, ScriptedLLM answering instantly, 3 turns),
traced and untraced alternating trajectory by trajectory in one interpreter with one tracer,
detached for the untraced ones (they see no tracer at all, as when tracing was never
initialised). Pairs of neighbouring trajectories see the same machine speed, so the median of
their differences is steady where throughput rounds on this shared machine scatter by ±20 %.
Three runs, each in a fresh interpreter:

  hooks   the tracer's events are discarded where they are submitted: spans, trajectories,
          context variables, the wrappers' own work
  full    the local backend through the trace sidecar: hooks + packing each event + the
          sending thread (the sidecar stores on the other core when one is spare)
  verl    no tracer: rollscope's ToolAgentLoop against verl 0.9.1's, alternating

usage: python benchmarks/bench_trace_breakdown.py [--pairs 1500] [--json OUT]
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
sys.path.insert(0, str(Path(__file__).parent))

from bench_agent_loop import REPLIES
from fresh import run_fresh

MODES = ["hooks", "full", "verl"]


def one_mode(mode: str, pairs: int, model_dir: str) -> dict:
    import logging

    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rollscope import tracing
    from rollscope.agentloops import ToolAgentLoop
    from rollscope.llm import ScriptedLLM
    from rollscope.testing import compose_config
    from rollscope.tools.builtin import CalculatorTool
    from rollscope.tracing import _runtime as runtime

    logging.disable(logging.WARNING)  # verl warns about the test model's type at every loop
    cfg = compose_config(Path(model_dir), ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tools = [CalculatorTool()]
    llm = ScriptedLLM(tokenizer, REPLIES, latency_s=0.0)
    tracer = None
    if mode != "verl":
        tracer = tracing.init_tracing(project="bench", experiment="breakdown", trace_dir=tempfile.mkdtemp())
    if mode == "hooks":
        tracer.submit = lambda event: None

    async def trajectory(cls: type, i: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        loop = cls(
            trainer_config=DictConfigWrap(cfg),
            server_manager=llm,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap(tools),
        )
        t1 = time.perf_counter()
        prompt = [{"role": "user", "content": f"What is 17 * 23 + 1? ({i})"}]
        await loop.run({"temperature": 1.0, "logprobs": True}, raw_prompt=prompt, index=i)
        return t1 - t0, time.perf_counter() - t1

    # name -> (loop class, tracer): "a" is the reference, "b" what is compared with it
    if mode == "verl":
        settings = {"a": (VerlToolAgentLoop, None), "b": (ToolAgentLoop, None)}
    else:
        settings = {"a": (ToolAgentLoop, None), "b": (ToolAgentLoop, tracer)}

    async def run() -> dict[str, list[tuple[float, float]]]:
        times: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
        for i in range(100 + pairs):  # the first 100 pairs warm up
            for name in ("a", "b") if i % 2 else ("b", "a"):
                cls, runtime.state.tracer = settings[name]
                took = await trajectory(cls, i)
                if i >= 100:
                    times[name].append(took)
        runtime.state.tracer = tracer
        return times

    times = asyncio.run(run())
    calls = {name: asyncio.run(count_calls(traced, trajectory, cls)) for name, (cls, traced) in settings.items()}
    runtime.state.tracer = tracer
    if tracer is not None:
        tracing.shutdown_tracing()
    whole = {k: [build + run for build, run in v] for k, v in times.items()}
    diffs = [(b - a) * 1e6 for a, b in zip(whole["a"], whole["b"], strict=True)]
    reference = statistics.median(whole["a"]) * 1e6
    return {
        "reference_us": reference,
        "added_us": statistics.median(diffs),
        "added_pct": statistics.median(diffs) / reference * 100,
        "added_building_us": statistics.median(
            [(b[0] - a[0]) * 1e6 for a, b in zip(times["a"], times["b"], strict=True)]
        ),
        "calls": calls["a"],
        "added_calls": {k: calls["b"][k] - calls["a"][k] for k in calls["a"]},
    }


async def count_calls(tracer: object, trajectory: Callable[..., Any], cls: type, rounds: int = 9) -> dict[str, int]:
    """Function calls in one trajectory (``sys.setprofile``, while it runs in an event loop already
    going): Python functions, and built-in ones; the median of ``rounds`` trajectories, since a
    first call's lazy setup or a collection can land in any one of them. Unlike time, a count does
    not drift with the machine: what tracing adds shows within a few calls."""
    from rollscope.tracing import _runtime as runtime

    runs: list[dict[str, int]] = []
    for i in range(rounds):
        counts = {"python": 0, "builtin": 0}

        def profile(frame: object, event: str, arg: object, counts: dict[str, int] = counts) -> None:
            if event == "call":
                counts["python"] += 1
            elif event == "c_call":
                counts["builtin"] += 1

        runtime.state.tracer = tracer
        sys.setprofile(profile)
        try:
            await trajectory(cls, i)
        finally:
            sys.setprofile(None)
        runs.append(counts)
    return {kind: int(statistics.median(r[kind] for r in runs)) for kind in ("python", "builtin")}


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
            results[mode] = r = run_fresh(
                __file__, "--mode", mode, "--pairs", str(args.pairs), "--model-dir", model_dir
            )
            what = "rollscope's loop, untraced, costs" if mode == "verl" else f"tracing ({mode}) adds"
            than = "verl's" if mode == "verl" else "an untraced trajectory"
            print(
                f"  {mode:<6} {what} {r['added_us']:+6.1f} us per trajectory = {r['added_pct']:+.1f}% of {than}"
                f" ({r['reference_us']:.0f} us; building the loop {r['added_building_us']:+.1f} us),"
                f" median of {args.pairs} pairs",
                flush=True,
            )
            added = r["added_calls"]
            print(
                f"         calls per trajectory: {added['python']:+d} Python, {added['builtin']:+d} built-in"
                f" (of {r['calls']['python']} and {r['calls']['builtin']})",
                flush=True,
            )
    h, f = results["hooks"], results["full"]
    print(
        f"  packing and sending: ~{f['added_us'] - h['added_us']:.0f} us per trajectory"
        f" (~{f['added_pct'] - h['added_pct']:.1f}%)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
