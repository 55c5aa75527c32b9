"""Property: whatever the turn sequence, response_mask marks exactly the model's tokens and the
log-probabilities line up with it (rollscope's loop on verl's Continuous Token bookkeeping)."""

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollscope.agentloops import ToolAgentLoop
from rollscope.llm import ScriptedLLM
from rollscope.tools.builtin import CalculatorTool
from tests.agentloops.conftest import build_loop, call, with_overrides

TURNS = st.one_of(
    st.builds(lambda a, b: call("calculator", expression=f"{a} * {b}"), st.integers(0, 999), st.integers(0, 99)),
    st.sampled_from(
        [
            call("calc", expression="1"),
            call("calculator"),
            '<tool_call>{"name": oops}</tool_call>',
            call("calculator", expression="1/0"),
            '<tool_call>{"name": "calculator", "arguments": {"expression": "7"}}',
        ]
    ),
    st.text(alphabet="abcdefghij 0123456789.,", min_size=1, max_size=40).map(lambda s: f"thinking {s}"),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURNS, min_size=1, max_size=5))
def test_mask_marks_exactly_the_model_tokens(verl_config, tokenizer, turns):
    cfg = with_overrides(verl_config, max_assistant_turns=len(turns), max_parallel_calls=2)
    llm = ScriptedLLM(tokenizer, [*turns, "final answer"])
    generated: list[list[int]] = []
    original = llm.generate

    async def recording_generate(*args, **kwargs):
        out = await original(*args, **kwargs)
        generated.append(list(out.token_ids))
        return out

    llm.generate = recording_generate

    async def main():
        loop = build_loop(ToolAgentLoop, cfg, tokenizer, llm, [CalculatorTool()])
        return await loop.run({"logprobs": True}, raw_prompt=[{"role": "user", "content": "compute"}])

    out = asyncio.run(main())
    mask, ids, logprobs = out.response_mask, out.response_ids, out.response_logprobs
    assert len(mask) == len(ids) == len(logprobs)
    model_tokens = [t for t, m in zip(ids, mask, strict=True) if m == 1]
    assert model_tokens == [t for turn in generated for t in turn]
    model_logprobs = [lp for lp, m in zip(logprobs, mask, strict=True) if m == 1]
    expected = [-0.01 * (i + 1) for turn in generated for i in range(len(turn))]
    assert model_logprobs == expected
    assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if m == 0)
