"""A user's own agent loop, run by naming it in a config: no decorator, no registration.

    rollscope run examples/custom_agent/config.yaml --limit 4

It is rollscope's ToolAgentLoop with a system prompt in front of every conversation; the run, each
LLM turn and each tool call are traced because ToolAgentLoop is a TracedAgentLoop.
"""

from typing import Any

from rollscope.agentloops import ToolAgentLoop


class SystemPromptAgent(ToolAgentLoop):
    system_prompt = "Use the calculator for every multiplication, then state the final number."

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        kwargs["raw_prompt"] = [{"role": "system", "content": self.system_prompt}, *kwargs["raw_prompt"]]
        return await super().run(sampling_params, **kwargs)
