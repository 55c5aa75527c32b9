"""verl's training path on a CPU: verl's real ``LLMServerClient`` (its ``generate`` carries verl's
``@rollout_trace_op``) in front of Ray actors that stand where verl's load balancer and vLLM
server run. The server answers with ``ScriptedLLM`` (the test double for model weights)."""

from __future__ import annotations

import asyncio
import json

import numpy as np

QUESTIONS = ["What is 17 * 23?", "What is 12 * 12?", "What is 9 * 9?", "What is 6 * 7?"]
ANSWERS = ["391", "144", "81", "42"]


def call(name, **arguments):
    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def arithmetic_reply(tokenizer):
    """A calculator call, then (once the prompt holds a tool response) the answer. Read from the
    prompt: verl's client sends each turn under a fresh request id, so turns are not counted."""

    def reply(turn, prompt_ids):
        text = tokenizer.decode(prompt_ids)
        k = next(i for i, q in enumerate(QUESTIONS) if q in text)
        a, b = QUESTIONS[k].removeprefix("What is ").removesuffix("?").split(" * ")
        return f"The answer is {ANSWERS[k]}." if "tool_response" in text else call("calculator", expression=f"{a} * {b}")

    return reply


def verl_tools_reply(tokenizer):
    """verl's Gsm8kTool called with the answer, then a verl function tool, then the answer (turns
    read from the prompt: the tool responses it holds)."""

    def reply(turn, prompt_ids):
        text = tokenizer.decode(prompt_ids)
        k = next(i for i, q in enumerate(QUESTIONS) if q in text)
        calls = [call("calc_gsm8k_reward", answer=ANSWERS[k]), call("word_count", text=QUESTIONS[k])]
        answered = text.count("<|im_start|>tool")
        return calls[answered] if answered < len(calls) else f"The answer is {ANSWERS[k]}."

    return reply


REPLIES = {"arithmetic": arithmetic_reply, "verl_tools": verl_tools_reply}


def start_llm_servers(model_dir, replies="arithmetic"):
    """A load-balancer actor and a scripted server actor, as verl's client expects them, answering
    with ``REPLIES[replies]``; returns the load balancer's handle (call inside ``ray.init``)."""
    import ray

    @ray.remote(num_cpus=0)
    class ScriptedServer:  # where verl's vLLM server replica runs
        def __init__(self, model_dir, replies):
            from transformers import AutoTokenizer

            from rollscope.llm import ScriptedLLM

            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            self.llm = ScriptedLLM(tokenizer, REPLIES[replies](tokenizer))

        async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None,
                           **kwargs):  # fmt: skip
            return await self.llm.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)

    @ray.remote(num_cpus=0)
    class LoadBalancer:  # verl's global load balancer: one server here
        def __init__(self, server):
            self.server = server

        def require_acquire_fields(self):
            return []

        def require_release_fields(self):
            return []

        def acquire_server(self, request_id):
            return "server-0", self.server

        def release_server(self, server_id):
            return None

    return LoadBalancer.remote(ScriptedServer.remote(str(model_dir), replies))


def verl_llm_client(config, load_balancer):
    """verl's own client, decorated generate and all."""
    from verl.workers.rollout.llm_server import LLMServerClient

    return LLMServerClient(config, load_balancer)


def grpo_batch(n, step, samples=4, agent_name="user_agent"):
    """A GRPO batch as verl's trainer hands it to a worker: each prompt repeated n times."""
    from verl.protocol import DataProto

    rows = [i for i in range(samples) for _ in range(n)]
    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": QUESTIONS[i]}] for i in rows], dtype=object),
            "index": np.array(rows),
            "agent_name": np.array([agent_name] * len(rows), dtype=object),
            "data_source": np.array(["gsm8k"] * len(rows), dtype=object),
            "reward_model": np.array([{"ground_truth": ANSWERS[i]} for i in rows], dtype=object),
            "extra_info": np.array([{"index": i} for i in rows], dtype=object),
        },
        meta_info={"global_steps": step, "validate": False},
    )


def as_ray_actor_class(worker_cls):
    """``worker_cls`` with every method wrapped as Ray wraps an actor class's (``_resume_span`` in
    ``ray.util.tracing``): what verl's manager runs, in this process so the test reads its tracer."""
    from ray.util.tracing.tracing_helper import _inject_tracing_into_class

    return _inject_tracing_into_class(type(worker_cls.__name__, (worker_cls,), {}))


def run_worker(worker_cls, config, llm_client, batch, *args):
    """One batch through a verl worker, in its own event loop (as the worker's Ray actor runs it)."""

    async def main():
        worker = worker_cls(config, llm_client, *args)
        return await worker.generate_sequences(batch)

    return asyncio.run(main())
