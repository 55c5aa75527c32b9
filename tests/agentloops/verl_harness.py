"""verl's training path on a CPU: verl's real ``LLMServerClient`` (its ``generate`` carries verl's
``@rollout_trace_op``) in front of Ray actors that stand where verl's load balancer and vLLM
server run. The server answers with ``ScriptedLLM`` (the test double for model weights)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np

QUESTIONS = ["What is 17 * 23?", "What is 12 * 12?", "What is 9 * 9?", "What is 6 * 7?"]
ANSWERS = ["391", "144", "81", "42"]


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def arithmetic_reply(tokenizer):
    """A calculator call, then (once the prompt holds a tool response) the answer. Read from the
    prompt: verl's client sends each turn under a fresh request id, so turns are not counted."""

    def reply(turn, prompt_ids):
        text = tokenizer.decode(prompt_ids)
        k = next(i for i, q in enumerate(QUESTIONS) if q in text)
        a, b = QUESTIONS[k].removeprefix("What is ").removesuffix("?").split(" * ")
        return (
            f"The answer is {ANSWERS[k]}." if "tool_response" in text else call("calculator", expression=f"{a} * {b}")
        )

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

        async def generate(
            self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None, **kwargs
        ):
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


VERL_TOOLS = Path(__file__).resolve().parent.parent / "fixtures" / "verl_tools"


def loop_config(model_dir, tmp_path, name, target, overrides):
    """verl's trainer config with the one agent loop ``name`` (class ``target``) in its
    agent_loop_config_path, and ``overrides``; verl's trace config reset so it is read anew."""
    from verl.utils.rollout_trace import RolloutTraceConfig

    from rollscope.testing import compose_config

    loops = tmp_path / "agent_loops.yaml"
    loops.write_text(f"- name: {name}\n  _target_: {target}\n")
    RolloutTraceConfig.reset()
    return compose_config(model_dir, [f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}", *overrides])


def users_tools_config(model_dir, tmp_path, *overrides):
    """verl's config for what users bring: verl's ToolAgentLoop ported to TracedAgentLoop (agent
    ``ported_tool_agent``), verl's Gsm8kTool from verl's tool YAML and verl function tools from
    ``function_tool_path``, tracing set by verl's ``trace.*`` keys alone (the store's place comes
    from the environment: set ``ROLLSCOPE_TRACE_DIR``)."""
    return loop_config(
        model_dir,
        tmp_path,
        "ported_tool_agent",
        "tests.agentloops.user_loops.PortedToolAgentLoop",
        [
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={VERL_TOOLS / 'gsm8k_tool_config.yaml'}",
            f"actor_rollout_ref.rollout.multi_turn.function_tool_path={VERL_TOOLS / 'function_tools.py'}",
            "actor_rollout_ref.rollout.trace.backend=local",
            *overrides,
        ],
    )


def assert_users_tools_traced(trajectory):
    """One trajectory of ``users_tools_config``'s loop answering as ``verl_tools_reply`` does: each
    tool call a tool span (the counts are the calls), Gsm8kTool's other methods spans of their own.
    Returns the tool spans."""
    assert (trajectory.num_llm_calls, trajectory.num_tool_calls, trajectory.num_errors) == (3, 2, 0)
    [run] = trajectory.tree()
    assert run.name == "PortedToolAgentLoop.run"
    tools = [c for c in run.children if c.kind == "tool"]
    assert [(c.name, c.attributes["tool.name"]) for c in tools] == [
        ("Gsm8kTool.execute", "calc_gsm8k_reward"),
        ("word_count", "word_count"),
    ]
    assert tools[0].outputs["text"].endswith("reward=1.0")
    assert [c.name for c in run.children if c.kind == "custom"] == ["Gsm8kTool.create", "Gsm8kTool.release"]
    return tools
