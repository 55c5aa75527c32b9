"""GSM8K-style final-answer checking: the model submits an answer, the tool scores it.

The ground truth comes per trajectory through verl's ``tools_kwargs``
(``{"submit_answer": {"create_kwargs": {"ground_truth": "391"}}}``); GSM8K's ``#### 391`` form is
accepted too. The reward is 1.0 for a numerically equal final answer, else 0.0.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import uuid4

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.tools.traced_tool import ExecuteResult, ToolError, TracedTool

SCHEMA = {
    "type": "function",
    "function": {
        "name": "submit_answer",
        "description": "Submit the final numeric answer to the problem. Call it once, at the end.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "the final answer, a number"}},
            "required": ["answer"],
        },
    },
}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def numbers(text: str) -> list[float]:
    """Every number in ``text``, in order (thousands separators read as such)."""
    found = []
    for raw in _NUMBER.findall(text.replace("$", "")):
        try:
            found.append(float(raw.replace(",", "")))
        except ValueError:
            continue
    return found


def final_number(text: str) -> float | None:
    """The last number in a text ('#### 1,234' -> 1234.0), or None."""
    text = text.split("####")[-1]
    found = _NUMBER.findall(text.replace("$", ""))
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def score(answer: str, ground_truth: str) -> float:
    got, want = final_number(answer), final_number(ground_truth)
    return float(got is not None and want is not None and abs(got - want) < 1e-6)


class AnswerCheckerTool(TracedTool):
    def __init__(self, config: dict | None = None, tool_schema: OpenAIFunctionToolSchema | None = None) -> None:
        super().__init__(config, tool_schema or OpenAIFunctionToolSchema.model_validate(SCHEMA))
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id or uuid4().hex
        create_kwargs = kwargs.get("create_kwargs") or {}
        truth = ground_truth if ground_truth is not None else create_kwargs.get("ground_truth")
        self._instances[instance_id] = {"ground_truth": None if truth is None else str(truth), "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> ExecuteResult:
        state = self._instances.get(instance_id)
        if state is None or state["ground_truth"] is None:
            raise ToolError("no ground truth for this problem (tools_kwargs.submit_answer.create_kwargs)")
        answer = str(parameters.get("answer", ""))
        reward = score(answer, state["ground_truth"])
        state["reward"] = reward
        verdict = "Correct." if reward == 1.0 else "Incorrect."
        return ToolResponse(text=f"{verdict} You answered {answer}."), reward, {"correct": reward == 1.0}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return self._instances.get(instance_id, {}).get("reward", 0.0)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
