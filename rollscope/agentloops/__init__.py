"""Agent loops with tracing built in: subclass ``TracedAgentLoop``; or use the registered
``rollscope_tool_agent`` (``ToolAgentLoop``) and ``rollscope_single_turn`` loops."""

from rollscope.agentloops.llm_client import TracedLLMClient
from rollscope.agentloops.single_turn import SingleTurnAgentLoop
from rollscope.agentloops.tool_agent_loop import ToolAgentLoop
from rollscope.agentloops.tool_parser import RollscopeToolParser
from rollscope.agentloops.traced_loop import TracedAgentLoop

__all__ = [
    "RollscopeToolParser",
    "SingleTurnAgentLoop",
    "ToolAgentLoop",
    "TracedAgentLoop",
    "TracedLLMClient",
]
