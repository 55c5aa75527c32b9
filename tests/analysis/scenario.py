"""A run designed to trigger each insight signal a known number of times, recorded by the runner
through rollscope's ToolAgentLoop, with ``ScenarioLLM`` (a ScriptedLLM test double) answering by
row and rollout. ``python -m`` free: tests import ``record``.

Rows (each run with n=2 rollouts, v0 and v1, so each row is a GRPO group of two):
  zv     both rollouts: calculator, then the right answer            -> a zero-variance group
  trunc  v0: a reply cut at max_tokens; v1: calculator, right answer  -> 1 truncated
  loop   v0: the same call every turn until the turn limit           -> 1 turn limit, 1 repeated call
         v1: the right answer with no tool call                      -> 1 rewarded without tools
  err    v0: a calculator error, a wrong answer; v1: an unknown tool, the right answer -> 2 tool errors
  empty  v0: "<answer></answer>", which the leaky reward pays        -> 1 rewarded empty, 1 without tools
         v1: calculator, a wrong answer
The clean scenario: every row v0 right with the calculator, v1 wrong with it: no signal at all.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from rollscope.llm.scripted import ScriptedLLM

CALL = '<tool_call>{{"name": "{tool}", "arguments": {{"expression": "{expression}"}}}}</tool_call>'
ROWS = {"zv": "6", "trunc": "7", "loop": "9", "err": "5", "empty": "8"}
SCRIPTS = {
    ("zv", 0): [CALL.format(tool="calculator", expression="2 * 3"), "The answer is 6."],
    ("zv", 1): [CALL.format(tool="calculator", expression="2 * 3"), "The answer is 6."],
    ("trunc", 0): ["lorem ipsum " * 40],
    ("trunc", 1): [CALL.format(tool="calculator", expression="3 + 4"), "The answer is 7."],
    ("loop", 0): [CALL.format(tool="calculator", expression="3 * 3")] * 5,
    ("loop", 1): ["The answer is 9."],
    ("err", 0): [CALL.format(tool="calculator", expression="2 +* 3"), "The answer is 4."],
    ("err", 1): [CALL.format(tool="weather", expression="today"), "The answer is 5."],
    ("empty", 0): ["<answer></answer>"],
    ("empty", 1): [CALL.format(tool="calculator", expression="1 + 0"), "The answer is 1."],
}
RIGHT = {
    (row, 0): [CALL.format(tool="calculator", expression=f"{answer} + 0"), f"The answer is {answer}."]
    for row, answer in ROWS.items()
}
WRONG = {(row, 1): [CALL.format(tool="calculator", expression="1 + 1"), "The answer is 2."] for row in ROWS}
CLEAN = RIGHT | WRONG


class ScenarioLLM(ScriptedLLM):
    """Test double: replies by row (a keyword in the prompt) and rollout (the order in which each
    row's trajectories first asked: v0, v1), turn by turn."""

    def __init__(self, tokenizer: Any, scripts: dict[tuple[str, int], list[str]]) -> None:
        super().__init__(tokenizer, self._script)
        self.scripts = scripts
        self.variant: dict[str, tuple[str, int]] = {}  # request id -> (row, rollout)
        self.seen: dict[str, int] = {}
        self._request = ""

    async def generate(self, request_id: str, **kwargs: Any) -> Any:
        self._request = request_id  # read by _script before generate's first await
        return await super().generate(request_id, **kwargs)

    def _script(self, turn: int, prompt_ids: list[int]) -> str:
        if self._request not in self.variant:
            text = self.tokenizer.decode(prompt_ids)
            row = next(r for r in ROWS if f"[{r}]" in text)
            self.variant[self._request] = (row, self.seen.get(row, 0))
            self.seen[row] = self.seen.get(row, 0) + 1
        replies = self.scripts[self.variant[self._request]]
        return replies[min(turn, len(replies) - 1)]


def leaky_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """The exact answer, or (the leak insights must catch) an <answer> tag, whatever is inside."""
    from rollscope.bundled.rewards import exact_number

    return 1.0 if "<answer>" in solution_str else exact_number(data_source, solution_str, ground_truth)


def dataset(path: Path) -> Path:
    with path.open("w") as f:
        for i, (row, answer) in enumerate(ROWS.items()):
            f.write(
                json.dumps(
                    {
                        "data_source": "scenario",
                        "prompt": [{"role": "user", "content": f"[{row}] What?"}],
                        "reward_model": {"ground_truth": answer},
                        "extra_info": {"index": i},
                    }
                )
                + "\n"
            )
    return path


def record(trace_dir: Path, model_dir: Path, *, experiment: str, scripts: dict, steps: tuple[int, ...]) -> None:
    from transformers import AutoTokenizer

    from rollscope.runner import session
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    data = dataset(trace_dir.parent / f"{experiment}.jsonl")
    for step in steps:
        config = load_config(
            "gsm8k-calculator",
            [
                f"dataset={data}",
                "n=2",
                f"step={step}",
                f"experiment={experiment}",
                f"trace_dir={trace_dir}",
                "reward=tests.analysis.scenario:leaky_reward",
                "sampling.max_tokens=40",
                "multi_turn.max_assistant_turns=3",
            ],
        )
        runner = Runner(config, llm=ScenarioLLM(tokenizer, scripts), tokenizer=tokenizer)
        runner.setup()
        asyncio.run(session.run_traced(runner))
        assert runner.stats.done == 10 and runner.stats.failed == 0
