"""Tracing demo: a small calculator agent, traced with no tracing code inside the agent.

Runs 2 steps x 3 questions x a GRPO group of 4 rollouts against ScriptedLLM (a deterministic test
double standing in for a model: the embedded model and `rollscope run` arrive with the runner),
records every trajectory into the local store, then reads it back: a listing, one GRPO group with
advantages, and a turn-by-turn diff of the best and worst rollout.

usage: python examples/tracing_demo.py [--dir rollscope_traces]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import operator
import os
import random
import re
import statistics
import sys
from pathlib import Path

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.store.schema import resolve_dir

QUESTIONS = [("What is 17 * 23?", 391), ("What is 1234 + 4321?", 5555), ("What is 96 / 8?", 12)]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


class ScriptedLLM:
    """Test double for an LLM server: replies chosen by a seeded RNG, so some rollouts go wrong."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    @tracing.rollout_trace_op(kind="llm")
    async def generate(self, messages: list[dict], sampling_params: dict) -> dict:
        await asyncio.sleep(0.001)
        question = messages[0]["content"]
        if messages[-1]["role"] == "tool":
            answer = messages[-1]["content"]
            if self.rng.random() < 0.25:
                answer = str(int(float(answer)) + 1) if answer.replace(".", "").isdigit() else answer
            return {"text": f"The answer is {answer}.", "finish_reason": "stop", "completion_tokens": 6}
        expr = re.search(r"What is (.+)\?", question).group(1)
        if self.rng.random() < 0.2:
            expr = expr.replace("*", "x")  # a malformed tool call: the tool will fail on it
        return {"text": f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expr}"}}}}</tool_call>',
                "finish_reason": "tool_calls", "completion_tokens": 18}  # fmt: skip


class Calculator:
    @tracing.rollout_trace_op(kind="tool")
    async def execute(self, expression: str) -> str:
        return _format(_eval(ast.parse(expression, mode="eval").body))


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:40]}")


def _format(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


class CalculatorAgent:
    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm, self.tool = llm, Calculator()

    @tracing.rollout_trace_op
    async def run(self, question: str, answer: int) -> dict:
        messages = [{"role": "user", "content": question}]
        for _ in range(3):
            reply = await self.llm.generate(messages, {"temperature": 1.0})
            messages.append({"role": "assistant", "content": reply["text"]})
            call = re.search(r'"expression": "(.+?)"', reply["text"])
            if not call:
                break
            try:
                result = await self.tool.execute(call.group(1))
            except (SyntaxError, ValueError) as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "content": result})
        said = re.search(r"answer is (\S+?)\.?$", messages[-1]["content"])
        reward = float(said is not None and said.group(1) == str(answer))
        tracing.set_reward(reward)
        return {"messages": messages, "reward": reward}


async def rollouts(step: int, n: int) -> None:
    async def one(sample_index: int, rollout_n: int) -> None:
        question, answer = QUESTIONS[sample_index]
        with tracing.rollout_trace_attr(step=step, sample_index=sample_index, rollout_n=rollout_n,
                                        name="calculator_agent"):  # fmt: skip
            await CalculatorAgent(ScriptedLLM(seed=step * 100 + sample_index * 10 + rollout_n)).run(question, answer)

    await asyncio.gather(*(one(s, r) for s in range(len(QUESTIONS)) for r in range(n)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)")
    args = ap.parse_args()
    tracing.init_tracing(project="demo", experiment="calculator", trace_dir=args.dir)
    for step in range(2):
        asyncio.run(rollouts(step, n=4))
    tracing.flush_tracing()
    directory = resolve_dir(args.dir)  # where the local backend writes (the trace sidecar, by default)

    store = TraceStore(directory)
    print(f"trajectories in {directory}: {store.count()}  (this run: experiment 'calculator')\n")
    print(f"{'step':>4} {'sample':>6} {'rollout':>7} {'status':<7} {'reward':>6} {'turns':>5} {'tools':>5} "
          f"{'errors':>6}")  # fmt: skip
    for t in store.trajectories(experiment="calculator", order_by="step")[-24:]:
        print(f"{t.step:>4} {t.sample_index:>6} {t.rollout_n:>7} {t.status:<7} {t.reward:>6.1f} "
              f"{t.num_llm_calls:>5} {t.num_tool_calls:>5} {t.num_errors:>6}")  # fmt: skip

    group = store.group(step=1, sample_index=0, experiment="calculator")
    mean = statistics.fmean(t.reward for t in group)
    print(f"\nGRPO group step=1 sample=0 (mean reward {mean:.2f}):")
    for t in group:
        print(f"  rollout {t.rollout_n}: reward {t.reward:.1f}  advantage {t.reward - mean:+.2f}  id {t.id}")
    best, worst = max(group, key=lambda t: t.reward), min(group, key=lambda t: t.reward)
    d = store.diff(best, worst)
    print(f"\ndiff rollout {best.rollout_n} vs {worst.rollout_n}: fields {d.fields or 'same'}; "
          f"first divergence at turn {d.first_divergence}")
    cli = Path(sys.executable).with_name("rollscope")
    cli_name = os.path.relpath(cli) if cli.exists() else "rollscope"
    print(f"\nlist them again with:  {cli_name} traces ls --dir {directory} --experiment calculator")


if __name__ == "__main__":
    main()
