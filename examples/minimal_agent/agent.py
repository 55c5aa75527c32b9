"""A complete agent loop and tool, written from scratch: everything a loop must build and return.

    rollscope run examples/minimal_agent/config.yaml --limit 2

docs/agent-loops.md shows this file; tests/examples/test_minimal_agent.py runs it.
"""

from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.tools.schemas import ToolResponse

from rollscope.agentloops import TracedAgentLoop
from rollscope.tools import TracedTool


class AskOnceAgent(TracedAgentLoop):  # verl's AgentLoopBase: write run(), nothing else
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        # The prompt: the row's chat messages through the tokenizer's chat template, as token ids.
        prompt_ids = self.tokenizer.apply_chat_template(kwargs["raw_prompt"], add_generation_prompt=True,
                                                        tokenize=True, return_dict=False)  # fmt: skip
        # One llm span per generate: prompt and response tokens, log-probs, latency, stop reason.
        out = await self.server_manager.generate(uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params)
        response_ids = out.token_ids[: self.rollout_config.response_length]  # verl pads to this length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),  # 1: the model wrote this token (0: a tool did)
            response_logprobs=out.log_probs[: len(response_ids)] if out.log_probs else None,
            num_turns=2,  # the user's message and the model's reply
            metrics=AgentLoopMetrics(),  # verl fills in its timings; required
        )


class WordCountTool(TracedTool):  # verl's BaseTool: execute traced (create, calc_reward, release where defined)
    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        text = parameters.get("text", "")
        if not isinstance(text, str):
            # An exception (or a timeout: config.timeout, default 30 s) becomes "Error: ..." for the
            # model and an error span; the rollout goes on.
            raise TypeError("text must be a string")
        if kwargs.get("with_reward"):
            return ToolResponse(text=str(len(text.split()))), 0.1, {"words": len(text.split())}
        return str(len(text.split()))  # a str is the text the model sees (reward 0, no metrics)
