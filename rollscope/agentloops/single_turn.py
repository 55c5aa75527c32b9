"""verl's single-turn loop, traced (verl#5276: its own run lacked the trace decorator)."""

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop as VerlSingleTurnAgentLoop

from rollscope.agentloops.traced_loop import TracedAgentLoop


@register("rollscope_single_turn")
class SingleTurnAgentLoop(TracedAgentLoop, VerlSingleTurnAgentLoop):
    pass
