"""User agent loops, loaded by verl's worker through agent_loop_config_path (no tracing code)."""

import json
import re
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope.agentloops import ToolAgentLoop, TracedAgentLoop
from rollscope.tools import TracedTool


class GSM8KAgent(ToolAgentLoop):
    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        output.reward_score = max(output.extra_fields.get("tool_rewards") or [0.0])
        return output


class PortedToolAgentLoop(TracedAgentLoop, VerlToolAgentLoop):
    """verl's own ToolAgentLoop, ported as a user would: TracedAgentLoop as its base."""


# ---- a loop and a tool written from scratch, as a user new to rollscope would: no tracing code ----


MULTIPLY_SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Multiply two numbers: 'a * b'.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
)


class Multiply(TracedTool):
    async def create(self, instance_id=None, **kwargs):
        return instance_id or str(uuid4()), ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        a, b = (int(x) for x in parameters["expression"].split("*"))
        return ToolResponse(text=str(a * b)), 0.0, {}

    async def release(self, instance_id, **kwargs):
        return None


class ScratchAgent(TracedAgentLoop):
    """Its own turns, verl's client through ``self.server_manager``, a tool called by hand."""

    async def run(self, sampling_params, **kwargs):
        messages = list(kwargs["raw_prompt"])
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        tool = Multiply({}, MULTIPLY_SCHEMA)
        instance_id, _ = await tool.create()
        request_id, ids, mask, reward = uuid4().hex, list(prompt_ids), [], 0.0
        for _turn in range(3):
            out = await self.server_manager.generate(request_id, prompt_ids=ids, sampling_params=sampling_params)
            ids += out.token_ids
            mask += [1] * len(out.token_ids)
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            found = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
            if not found:
                truth = kwargs["reward_model"]["ground_truth"]
                reward = 1.0 if truth in text else 0.0
                break
            call = json.loads(found.group(1))
            response, _, _ = await tool.execute(instance_id, call["arguments"])
            observation = self.tokenizer.encode(f"\n<tool_response>{response.text}</tool_response>\n")
            ids += observation
            mask += [0] * len(observation)
        await tool.release(instance_id)
        response_ids = ids[len(prompt_ids) :]
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            response_mask=mask,
            reward_score=reward,
            num_turns=_turn + 1,
            metrics=AgentLoopMetrics(),
        )
