"""Fuzzing (hypothesis) of what the model writes, the arguments it passes and what tools return.

Every example runs rollscope's ToolAgentLoop on verl's classes with a ScriptedLLM (a test double
whose first reply is the fuzzed text) and tracing on. Whatever comes in, the rollout finishes, its
response mask and log-probabilities stay aligned, each failed call is an error span plus an error
message the model sees, and the trace is stored. Counts of cases tried are written to
test-artifacts/fuzz_counts.json (see tests/RELIABILITY.md).
"""

import asyncio
import contextlib
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollscope import tracing
from rollscope.agentloops import ToolAgentLoop
from rollscope.llm import ScriptedLLM
from rollscope.store import TraceStore
from rollscope.tools import tool
from rollscope.tools.builtin import CalculatorTool, LocalSearchTool
from tests.agentloops.conftest import build_loop, with_overrides

pytestmark = pytest.mark.slow
COUNTS: Counter = Counter()
REPORT = Path(__file__).parents[2] / "test-artifacts" / "fuzz_counts.json"
RESULT: list = [None]  # what the `echo_result` tool returns in the current example


@tool
def echo_result(key: str, times: int = 1) -> str:
    """Return the fuzzed result of this example.

    Args:
        key: anything.
        times: how many times.
    """
    return RESULT[0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
tool_names = st.sampled_from(["calculator", "search", "echo_result", "missing_tool", "", "calc ulator"])
arguments = st.one_of(
    json_values,
    st.fixed_dictionaries({"expression": st.text(max_size=40) | st.integers() | json_values}),
    st.fixed_dictionaries({"query": st.text(max_size=80)}, optional={"top_k": json_values}),
    st.fixed_dictionaries({"key": st.text(max_size=10)}, optional={"times": json_values}),
)
well_formed = st.builds(
    lambda n, a: "<tool_call>" + json.dumps({"name": n, "arguments": a}) + "</tool_call>", tool_names, arguments
)
replies = st.one_of(
    well_formed,
    st.text(max_size=300),
    st.builds(lambda t: f"<tool_call>{t}</tool_call>", st.text(max_size=200)),
    st.builds(lambda t: f"<tool_call>{t}", st.text(max_size=100)),  # cut off before the closing tag
    st.builds(lambda d: "<tool_call>" + "[" * d + "1" + "]" * d + "</tool_call>", st.integers(1, 3000)),
    st.builds(
        lambda n: f"<tool_call>{json.dumps({'name': 'calculator', 'arguments': {'expression': '9' * n}})}</tool_call>",
        st.integers(1, 20_000),
    ),
    st.lists(well_formed, min_size=2, max_size=6).map("\n".join),  # parallel calls
    # hostile shapes: ids that are not strings, nesting past the interpreter's limit, integers past its
    # digit limit, dozens of calls in one turn
    st.builds(
        lambda i, a: "<tool_call>" + json.dumps({"name": "calculator", "arguments": a, "id": i}) + "</tool_call>",
        json_values.filter(lambda v: v is not None and not isinstance(v, str)),
        arguments,
    ),
    st.builds(
        lambda d: '<tool_call>{"name": "calculator", "arguments": ' + "[" * d + "]" * d + "}</tool_call>",
        st.integers(1, 100_000),
    ),
    st.builds(
        lambda n: '<tool_call>{"name": "calculator", "arguments": {"expression": ' + "7" * n + "}}</tool_call>",
        st.integers(4_000, 20_000),
    ),
    st.lists(well_formed, min_size=20, max_size=60).map("".join),
)


class Unprintable:
    def __repr__(self):
        raise RuntimeError("no repr for you")

    __str__ = __repr__


deep = [1]
for _ in range(500):
    deep = [deep]
results = st.one_of(
    st.text(max_size=2000),
    st.just("x" * 2_000_000),
    st.sampled_from(
        [
            math.nan,
            math.inf,
            -math.inf,
            deep,
            {1, 2},
            b"\xff\xfe bytes",
            Unprintable(),
            object(),
            {"nested": {"nan": math.nan, "set": {3}}},
            "\ud800 lone surrogate",
            "\x00 nul \u202e rtl",
        ]
    ),
    json_values,
)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "traces"


@contextlib.contextmanager
def tracing_into(store):
    """Tracing into the module's store (the suite shuts tracing down between tests); every event
    reached it, none failed or dropped."""
    tracing.init_tracing(trace_dir=str(store), token2text=True)
    yield store
    assert tracing.flush_tracing(60)
    stats = tracing.stats()
    COUNTS["shape errors"] += stats["shape_errors"]
    assert all(b["errors"] == 0 and b["dropped"] == 0 for b in stats["backends"].values()), stats


@pytest.fixture
def traced(fuzz_store):
    with tracing_into(fuzz_store):
        yield fuzz_store


def run_once(config, tokenizer, first_reply):
    llm = ScriptedLLM(tokenizer, [first_reply, "The answer is 4."])
    tools = [CalculatorTool(), LocalSearchTool(), echo_result]

    async def main():
        loop = build_loop(ToolAgentLoop, config, tokenizer, llm, tools)
        return await loop.run(
            {"temperature": 1.0, "logprobs": True},
            raw_prompt=[{"role": "user", "content": "q"}],
            index=COUNTS["model text and arguments"] + COUNTS["tool results"],
        )

    out = asyncio.run(main())
    assert len(out.response_mask) == len(out.response_ids) == len(out.response_logprobs)
    assert out.num_turns >= 2
    return out


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(reply=replies)
def test_any_model_text_and_arguments(verl_config, tokenizer, traced, reply):
    config = with_overrides(verl_config, max_assistant_turns=2, max_tool_response_length=200)
    RESULT[0] = "ok"
    run_once(config, tokenizer, reply)
    COUNTS["model text and arguments"] += 1


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(result=results)
def test_any_tool_result(verl_config, tokenizer, traced, result):
    config = with_overrides(verl_config, max_assistant_turns=2, max_tool_response_length=200)
    RESULT[0] = result
    run_once(config, tokenizer, '<tool_call>{"name": "echo_result", "arguments": {"key": "k"}}</tool_call>')
    COUNTS["tool results"] += 1


def test_every_fuzzed_rollout_is_in_the_store_and_errors_are_spans(verl_config, tokenizer, fuzz_store):
    if not COUNTS["model text and arguments"]:  # run on its own: it fuzzes first, then checks
        with tracing_into(fuzz_store):
            test_any_model_text_and_arguments(verl_config, tokenizer, fuzz_store)
    if not COUNTS["tool results"]:
        with tracing_into(fuzz_store):
            test_any_tool_result(verl_config, tokenizer, fuzz_store)
    tried = COUNTS["model text and arguments"] + COUNTS["tool results"]
    assert tried > 0  # not an empty store passing for a full one
    with TraceStore(fuzz_store) as store:
        total = store.count()
        errors = store.trajectories(tool_error=True)
        assert {r.sample_index for r in store.trajectories()} == set(range(tried))
        assert store.count(status="error") == 0  # no rollout failed, whatever came in
        for record in errors[:50]:
            failed = [s for s in store.get(record.id).spans if s.kind == "tool" and s.status == "error"]
            assert failed and all(s.error_message for s in failed)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({**COUNTS, "stored": total, "with_tool_errors": len(errors)}, indent=1))
    print(f"fuzz: {dict(COUNTS)} -> {total} rollouts stored, {len(errors)} with failed tool calls")
