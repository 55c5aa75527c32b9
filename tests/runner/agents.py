"""Agent classes and reward functions the runner tests name by dotted path."""

from typing import Any

from rollscope.agentloops import TracedAgentLoop


class BrokenAgent(TracedAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        raise RuntimeError(f"broken on sample {kwargs['index']}")


def missing_field_reward(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None) -> float:
    """A reward function that fails the same way on every trajectory (a field the rows lack)."""
    return float(extra_info["expected_answer"])
