"""Agent classes the runner tests name by dotted path."""

from typing import Any

from rollscope.agentloops import TracedAgentLoop


class BrokenAgent(TracedAgentLoop):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        raise RuntimeError(f"broken on sample {kwargs['index']}")
