"""A user's agent loop, loaded by verl's worker through agent_loop_config_path (no decorators)."""

from rollscope.agentloops import ToolAgentLoop


class GSM8KAgent(ToolAgentLoop):
    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        output.reward_score = max(output.extra_fields.get("tool_rewards") or [0.0])
        return output
