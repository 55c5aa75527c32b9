"""rollscope's multi-turn tool loop: verl's ToolAgentLoop, traced, and strict about bad calls.

verl's state machine (generate -> parse -> tools in parallel up to ``max_parallel_calls`` ->
append responses -> repeat, within ``max_assistant_turns``, ``max_user_turns``,
``response_length``, ``max_tool_response_length`` with its truncation side) and its Continuous
Token bookkeeping (exact ``response_mask`` and aligned logprobs) are reused unchanged. What
changes: a malformed call — invalid JSON, no name, an unknown tool, arguments that are not an
object, of the wrong type or missing — gets an error tool message the model can recover from
and an error span, where verl drops or only logs it.
"""

from __future__ import annotations

import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import register
from verl.experimental.agent_loop.tool_agent_loop import AgentState
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop
from verl.experimental.agent_loop.tool_parser import FunctionCall
from verl.tools.schemas import ToolResponse

from rollscope.agentloops.tool_parser import (
    MALFORMED_CALL,
    Llama3JsonToolParser,
    RollscopeToolParser,
    WrittenCall,
    written_back,
)
from rollscope.agentloops.traced_loop import TracedAgentLoop
from rollscope.semconv import CONSTRAIN, TOOL_SCHEMAS, TURN_LIMIT
from rollscope.tools.schema import check_arguments

_STRICT_FORMATS = {"hermes": RollscopeToolParser, "rollscope": RollscopeToolParser, "llama3_json": Llama3JsonToolParser}


@register("rollscope_tool_agent")
class ToolAgentLoop(TracedAgentLoop, VerlToolAgentLoop):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.tool_parser_name in _STRICT_FORMATS:
            self.tool_parser = _STRICT_FORMATS[self.tool_parser_name](self.tokenizer)

    async def _handle_pending_state(self, agent_data: Any, sampling_params: dict[str, Any]) -> Any:
        self._agent_data = agent_data  # the run's state: its messages and tokens, for traced_conversation
        return await super()._handle_pending_state(agent_data, sampling_params)

    def traced_conversation(self) -> tuple[list[dict[str, Any]], Any, list[int]] | None:
        data = getattr(self, "_agent_data", None)
        if data is None:
            return None
        return data.messages, getattr(data, "_active_tool_schemas", self.tool_schemas), data.prompt_ids

    def _build_assistant_message(self, content: str, agent_data: Any) -> dict[str, Any]:
        """verl's, with each call's ``text`` and ``at`` (``WrittenCall``): a chat template can then
        render the reply exactly as the model wrote it, text after a call and calls that did not
        parse included (the training demo's does). Calls past ``max_parallel_calls``, which verl
        leaves out of the message and never runs, stay in its content as the text they were."""
        calls = agent_data.tool_calls
        beyond = calls[self.max_parallel_calls :] if self.max_parallel_calls else []
        if beyond and all(isinstance(c, WrittenCall) for c in beyond):
            content = written_back(content, beyond)
        message = super()._build_assistant_message(content, agent_data)
        for entry, call in zip(message.get("tool_calls", ()), agent_data.tool_calls, strict=False):
            if isinstance(call, WrittenCall):
                entry["text"], entry["at"] = call.text, call.at
        return message

    async def _call_tool(self, tool_call: FunctionCall, tools_kwargs: dict[str, Any], agent_data: Any) -> Any:
        found = self._call_problem(tool_call, agent_data)
        if found is None:
            return await super()._call_tool(tool_call, tools_kwargs, agent_data)
        kind, problem = found
        told = self.record_tool_error(tool_call.name, tool_call.arguments, problem, kind)
        return ToolResponse(text=told), 0.0, {"error": problem}

    def _call_problem(self, call: FunctionCall, agent_data: Any) -> tuple[str, str] | None:
        """(error kind, what the model is told) for a call that cannot run, else None."""
        if call.name == MALFORMED_CALL:
            detail = json.loads(call.arguments)
            return "malformed_call", (
                f'{detail["problem"]}. Write tool calls as <tool_call>{{"name": "<tool>", '
                f'"arguments": {{...}}}}</tool_call>.'
            )
        tools = getattr(agent_data, "_active_tools", self.tools)
        tool = tools.get(call.name)
        if tool is None:
            return "unknown_tool", f"unknown tool {call.name!r}; available tools: {', '.join(sorted(tools)) or 'none'}"
        try:
            arguments = json.loads(call.arguments)
        except (ValueError, TypeError, RecursionError) as exc:  # (ValueError: JSON errors, huge integers)
            return "malformed_call", (
                f"arguments for {call.name!r} are not valid JSON: {type(exc).__name__}: {str(exc)[:200]}"
            )
        problems = check_arguments(tool.tool_schema, arguments)
        if problems:
            return "bad_arguments", f"invalid arguments for {call.name!r}: " + "; ".join(problems)
        return None

    async def _handle_generating_state(
        self, agent_data: Any, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> Any:
        """verl's, noting in the output's extra fields when the loop stopped because every
        assistant turn was used (``stop: max_assistant_turns``, what insights count). With
        ``constrain_tool_calls`` in the sampling parameters, the reply is sampled held to this
        turn's tool schemas, in the LLM engine's own form (``llm.constrained``)."""
        if CONSTRAIN in sampling_params:  # the loop's key, not the LLM's: never passed on
            constrain = sampling_params[CONSTRAIN]
            sampling_params = {k: v for k, v in sampling_params.items() if k != CONSTRAIN}
            schemas = getattr(agent_data, "_active_tool_schemas", self.tool_schemas)
            if constrain and schemas:
                sampling_params[TOOL_SCHEMAS] = list(schemas)
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        if (
            state == AgentState.TERMINATED
            and self.max_assistant_turns
            and agent_data.assistant_turns >= self.max_assistant_turns
        ):
            agent_data.extra_fields["stop"] = TURN_LIMIT
            self.record_turn_limit()
        return state
