"""What a user writes: a TracedAgentLoop subclass with no tracing code, traced completely."""

import asyncio
from uuid import uuid4

import pytest
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop as VerlSingleTurn

from rollscope import tracing
from rollscope.agentloops import SingleTurnAgentLoop, ToolAgentLoop, TracedAgentLoop
from rollscope.llm import ScriptedLLM
from rollscope.tools.builtin import CalculatorTool
from tests.agentloops.conftest import build_loop, call


class EchoAgent(TracedAgentLoop):
    """A user's loop: one generate through self.server_manager, a reward it computes itself."""

    async def run(self, sampling_params, **kwargs):
        prompt_ids = self.tokenizer.apply_chat_template(
            kwargs["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        out = await self.server_manager.generate(uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params)
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            reward_score=float("391" in text),
            num_turns=2,
            metrics=AgentLoopMetrics(),
        )


class CheckedToolAgent(ToolAgentLoop):
    """Overrides run and calls super().run(): still one run span."""

    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        output.reward_score = 1.0 if output.num_turns > 2 else 0.0
        return output


class PlainVerlSingleTurn(TracedAgentLoop, VerlSingleTurn):
    """A verl loop mixed in with no run of its own: its inherited run is traced."""


PROMPT = [{"role": "user", "content": "What is 17 * 23?"}]


def _run(cls, config, tokenizer, replies, tools=(), **kwargs):
    async def main():
        loop = build_loop(cls, config, tokenizer, ScriptedLLM(tokenizer, replies), tools)
        return await loop.run({"temperature": 1.0}, raw_prompt=list(PROMPT), **kwargs)

    return asyncio.run(main())


def test_user_loop_without_decorators(verl_config, tokenizer, local_tracer, read_store):
    out = _run(EchoAgent, verl_config, tokenizer, ["The answer is 391."], extra_info={"index": 4}, validate=True)
    assert out.reward_score == 1.0
    [t] = read_store().trajectories()
    assert (t.sample_index, t.validate, t.agent_name, t.reward, t.status) == (4, True, "EchoAgent", 1.0, "ok")
    assert [(s.kind, s.name) for s in t.spans] == [("agent", "EchoAgent.run"), ("llm", "llm.generate")]
    assert t.spans[1].parent_id == t.spans[0].id
    code = EchoAgent.run.__wrapped__.__code__  # where the user's run is (the op's code in Weave)
    assert (t.spans[0].attributes["code.file.path"], t.spans[0].attributes["code.line.number"]) == (
        code.co_filename,
        code.co_firstlineno,
    )
    assert t.spans[0].attributes["code.function.name"] == "EchoAgent.run"


def test_super_run_chain_records_one_run_span(verl_config, tokenizer, local_tracer, read_store):
    _run(
        CheckedToolAgent,
        verl_config,
        tokenizer,
        [call("calculator", expression="1+1"), "2"],
        tools=[CalculatorTool()],
        index=8,
    )
    [t] = read_store().trajectories()
    runs = [s for s in t.spans if s.kind == "agent"]
    assert [s.name for s in runs] == ["CheckedToolAgent.run"]
    assert (t.sample_index, t.reward, t.num_llm_calls, t.num_tool_calls) == (8, 1.0, 2, 1)


def test_inherited_verl_run_and_bundled_single_turn(verl_config, tokenizer, local_tracer, read_store):
    _run(PlainVerlSingleTurn, verl_config, tokenizer, ["391"], index=1)
    _run(SingleTurnAgentLoop, verl_config, tokenizer, ["391"], index=2)
    by_sample = {t.sample_index: t for t in read_store().trajectories()}
    assert [s.name for s in by_sample[1].spans] == ["PlainVerlSingleTurn.run", "llm.generate"]
    assert [s.name for s in by_sample[2].spans] == ["SingleTurnAgentLoop.run", "llm.generate"]


def test_runs_untraced_when_tracing_is_off(verl_config, tokenizer):
    assert tracing.get_tracer() is None
    out = _run(EchoAgent, verl_config, tokenizer, ["391"])
    assert out.reward_score == 1.0


def test_the_runners_trajectory_is_joined_not_duplicated(verl_config, tokenizer, local_tracer, read_store):
    async def main():
        loop = build_loop(EchoAgent, verl_config, tokenizer, ScriptedLLM(tokenizer, ["391"]))
        with tracing.rollout_trace_attr(step=5, sample_index=9, rollout_n=3, name="runner"):
            await loop.run({}, raw_prompt=list(PROMPT), index=100)

    asyncio.run(main())
    [t] = read_store().trajectories()
    assert (t.step, t.sample_index, t.rollout_n, t.agent_name) == (5, 9, 3, "runner")


def test_llm_turns_are_leaf_spans_under_the_run_with_unset_arguments_dropped(
    verl_config, tokenizer, local_tracer, read_store
):
    out = _run(
        ToolAgentLoop,
        verl_config,
        tokenizer,
        [call("calculator", expression="2+2"), "4"],
        tools=[CalculatorTool()],
        index=3,
    )
    [t] = read_store().trajectories()
    [run] = t.tree()
    llms = [s for s in run.children if s.kind == "llm"]
    assert len(llms) == 2 and len({s.id for s in llms}) == 2  # ids given where the events are unpacked
    assert all(s.parent_id == run.id and s.status == "ok" for s in llms)
    # verl passes every media argument, None on a text-only turn: the span keeps only the set ones
    assert all(v is not None for s in llms for v in s.inputs["kwargs"].values())
    assert llms[1].outputs["token_ids"] == out.response_ids[-len(llms[1].outputs["token_ids"]) :]


def test_a_failing_llm_call_is_an_error_span_and_the_error_reaches_the_loop(
    verl_config, tokenizer, local_tracer, read_store
):
    def server_down(turn, prompt_ids):
        raise ConnectionError("server down")

    with pytest.raises(ConnectionError):
        _run(EchoAgent, verl_config, tokenizer, server_down, index=6)
    [t] = read_store().trajectories()
    assert (t.status, t.error_type) == ("error", "ConnectionError")
    run, llm = t.spans
    assert (llm.kind, llm.status, llm.error_type, llm.error_message) == (
        "llm",
        "error",
        "ConnectionError",
        "server down",
    )
    assert llm.parent_id == run.id and llm.inputs["prompt_ids"]


class FailingAgent(TracedAgentLoop):
    """A user's loop that breaks deep inside its own helper, with a secret in the message."""

    async def run(self, sampling_params, **kwargs):
        return self._parse_answer("sk-ant-api03-" + "x" * 40)

    def _parse_answer(self, token):
        raise RuntimeError(f"cannot parse the answer (key {token})")


def test_a_loop_exception_keeps_its_traceback_redacted(verl_config, tokenizer, local_tracer, read_store):
    with pytest.raises(RuntimeError):
        _run(FailingAgent, verl_config, tokenizer, ["unused"])
    [t] = read_store().trajectories()
    [run] = t.spans
    trace = run.attributes["exception.stacktrace"]
    assert run.status == "error" and "in _parse_answer" in trace and "raise RuntimeError" in trace
    key = "sk-ant-api03-" + "x" * 40
    assert key not in trace and key not in run.error_message and "[REDACTED]" in trace  # like any attribute
    assert t.status == "error" and t.num_errors == 1  # one error span: the run


def test_a_reply_cut_at_max_tokens_is_stored_as_length(verl_config, tokenizer, local_tracer, read_store):
    async def main():
        loop = build_loop(EchoAgent, verl_config, tokenizer, ScriptedLLM(tokenizer, ["The answer is 391."]))
        return await loop.run({"temperature": 1.0, "max_tokens": 3}, raw_prompt=list(PROMPT))

    asyncio.run(main())
    [t] = read_store().trajectories()
    llm = t.spans[1]
    assert llm.outputs["stop_reason"] == "length" and len(llm.outputs["token_ids"]) == 3
    assert llm.attributes["gen_ai.response.finish_reasons"] == ["length"]


def test_the_run_span_keeps_the_extra_fields_run_returned_while_verl_adds_to_them():
    """verl adds to the output's extra_fields after run (raw_prompt, reward_extra_info) while the
    exporter thread may still be reading the span (token2text shapes in process)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

    from rollscope.agentloops.traced_loop import RunOutput

    output = AgentLoopOutput(
        prompt_ids=[1, 2], response_ids=[3], response_mask=[1], num_turns=2, metrics={}, extra_fields={"stop": "eos"}
    )
    recorded = RunOutput(output)
    output.extra_fields["raw_prompt"] = [{"role": "user", "content": "q"}]
    output.extra_fields["reward_extra_info"] = {"acc": 1.0}
    view = recorded.__trace_view__()
    assert view["extra_fields"] == {"stop": "eos"} and view["response_ids"] == [3] and view["prompt_length"] == 2


class VersionedServer:
    """A recipe's server manager: ``generate_with_version`` answers token output and the policy
    version; ``queue_depth`` answers a plain value (test double: ScriptedLLM underneath)."""

    def __init__(self, llm):
        self.llm = llm

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        return await self.llm.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params)

    async def generate_with_version(self, request_id, *, prompt_ids, sampling_params):
        return await self.llm.generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params), 7

    def queue_depth(self):
        return 3


class VersionedOutput:
    """What ``generate_with_version`` returns, as token output (``token_ids``) with its version."""

    def __init__(self, out, version):
        self.token_ids, self.log_probs, self.stop_reason, self.version = (
            out.token_ids,
            out.log_probs,
            "completed",
            version,
        )


class RecipeAgent(TracedAgentLoop):
    """A recipe's loop: its turns through a server method other than ``generate``."""

    async def run(self, sampling_params, **kwargs):
        prompt_ids = self.tokenizer.apply_chat_template(
            kwargs["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert self.server_manager.queue_depth() == 3
        out, version = await self.server_manager.generate_with_version(
            uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),
            num_turns=2,
            metrics=AgentLoopMetrics(),
            extra_fields={"version": version},
        )


def test_every_call_through_the_server_manager_is_a_span(verl_config, tokenizer, local_tracer, read_store):
    """A turn made through another method than ``generate`` is an llm span (it returns token output);
    any other method is a span of its own; the loop gets what the method returned, unchanged."""

    class Server(VersionedServer):
        async def generate_with_version(self, request_id, *, prompt_ids, sampling_params):
            out, version = await super().generate_with_version(
                request_id, prompt_ids=prompt_ids, sampling_params=sampling_params
            )
            return VersionedOutput(out, version), version

    async def main():
        loop = build_loop(RecipeAgent, verl_config, tokenizer, Server(ScriptedLLM(tokenizer, ["The answer is 391."])))
        return await loop.run({"temperature": 1.0}, raw_prompt=list(PROMPT))

    out = asyncio.run(main())
    assert out.extra_fields["version"] == 7
    [t] = read_store().trajectories()
    assert [(s.kind, s.name) for s in t.spans] == [
        ("agent", "RecipeAgent.run"),
        ("custom", "llm.queue_depth"),
        ("custom", "llm.generate_with_version"),
    ]
    # (a tuple whose first item is token output: the span records it, the turn is not counted as llm)
    assert t.spans[2].inputs["prompt_ids"] == out.prompt_ids and t.spans[1].outputs == 3

    class TokenServer(VersionedServer):
        async def generate_with_version(self, request_id, *, prompt_ids, sampling_params):
            out, version = await super().generate_with_version(
                request_id, prompt_ids=prompt_ids, sampling_params=sampling_params
            )
            return VersionedOutput(out, version)

    class TokenAgent(RecipeAgent):
        async def run(self, sampling_params, **kwargs):
            prompt_ids = self.tokenizer.apply_chat_template(
                kwargs["raw_prompt"], add_generation_prompt=True, tokenize=True, return_dict=False
            )
            out = await self.server_manager.generate_with_version(
                uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
            )
            return AgentLoopOutput(
                prompt_ids=prompt_ids,
                response_ids=out.token_ids,
                num_turns=2,
                response_mask=[1] * len(out.token_ids),
                metrics=AgentLoopMetrics(),
            )

    async def token_main():
        loop = build_loop(TokenAgent, verl_config, tokenizer, TokenServer(ScriptedLLM(tokenizer, ["391"])))
        return await loop.run({"temperature": 1.0}, raw_prompt=list(PROMPT))

    asyncio.run(token_main())
    second = next(r for r in read_store().trajectories() if r.agent_name == "TokenAgent")
    [turn] = [s for s in second.spans if s.name == "llm.generate_with_version"]
    assert turn.kind == "llm" and second.num_llm_calls == 1
    assert turn.attributes["gen_ai.usage.output_tokens"] == len(turn.outputs["token_ids"])
