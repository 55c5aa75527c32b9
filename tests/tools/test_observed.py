"""Tools users bring from verl — verl's own BaseTool classes from verl's YAML, verl's @function_tool
functions — each call a tool span in rollscope's loop and in verl's ToolAgentLoop ported to
TracedAgentLoop. The tools are verl's (tests/fixtures/verl_tools, see SOURCE.md); only the model is
a test double (ScriptedLLM)."""

import asyncio
import json
from pathlib import Path

import pytest
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop as VerlToolAgentLoop

from rollscope import tracing
from rollscope.agentloops import ToolAgentLoop, TracedAgentLoop
from rollscope.llm import ScriptedLLM
from rollscope.testing import compose_config, make_model_dir
from rollscope.tools import ToolConfigError, load_tools
from rollscope.tools.observed import observe_tools
from rollscope.tools.registry import load_function_tools
from tests.agentloops.conftest import build_loop, call
from tests.agentloops.user_loops import PortedToolAgentLoop
from tests.fixtures.verl_tools.gsm8k_tool import Gsm8kTool
from tests.tools.tool_shapes import REFUSE_A_SUBCLASS, SCHEMA, SHAPES

VERL_TOOLS = Path(__file__).resolve().parent.parent / "fixtures" / "verl_tools"
PROMPT = [{"role": "user", "content": "Janet has 3 apples and buys 4 more. How many?"}]
REPLIES = [
    call("get_current_temperature", location="Paris, France"),
    call("calc_gsm8k_reward", answer="7"),
    call("word_count", text="three little words"),
    call("lookup_capital", country="Spain"),  # raises inside the function: verl's loop tells the model
    "The answer is 7.",
]
TOOL_NAMES = ["get_current_temperature", "calc_gsm8k_reward", "word_count", "lookup_capital"]


class OwnToolsLoop(TracedAgentLoop, VerlToolAgentLoop):
    """A loop that builds its own tools in ``__init__`` (verl's older loops did), ignoring the argument."""

    def __init__(self, *args, tools=None, **kwargs):
        super().__init__(*args, **kwargs)
        own = load_tools(VERL_TOOLS / "gsm8k_tool_config.yaml")
        self.tools = {t.name: t for t in own}
        self.tool_schemas = [t.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for t in own]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def verl_config(model_dir):
    return compose_config(model_dir, ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=6"])


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def users_tools():
    tools = load_tools(VERL_TOOLS / "gsm8k_tool_config.yaml") + load_tools(VERL_TOOLS / "weather_tool_config.yaml")
    return tools + load_function_tools(VERL_TOOLS / "function_tools.py", taken=[t.name for t in tools])


def run(loop_class, config, tokenizer, tools, replies=REPLIES):
    async def main():
        loop = build_loop(loop_class, config, tokenizer, ScriptedLLM(tokenizer, replies), tools)
        return await loop.run(
            {"temperature": 1.0, "logprobs": True},
            raw_prompt=list(PROMPT),
            tools_kwargs={"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "7"}}},
        )

    return asyncio.run(main())


def walk(span):
    yield span
    for child in span.children:
        yield from walk(child)


def tool_spans(trajectory):
    [root] = trajectory.tree()
    return [s for s in walk(root) if s.kind == "tool"]


@pytest.mark.parametrize("loop_class", [ToolAgentLoop, PortedToolAgentLoop], ids=["rollscope_loop", "verl_loop_ported"])
def test_every_call_to_verls_tools_is_a_tool_span(loop_class, verl_config, tokenizer, trace_dir, read_store):
    tracing.init_tracing(trace_dir=str(trace_dir))
    try:
        out = run(loop_class, verl_config, tokenizer, users_tools())
        [t] = read_store().trajectories()
    finally:
        tracing.shutdown_tracing()
    assert out.extra_fields["tool_rewards"] == [0, 0.0, 0.0, 0.0]  # (verl scores a call that raised 0.0)
    spans = tool_spans(t)
    assert [s.attributes["tool.name"] for s in spans] == TOOL_NAMES
    assert t.num_tool_calls == len(TOOL_NAMES)
    weather, gsm8k, words, capital = spans
    assert weather.name == "WeatherTool.execute" and weather.inputs["parameters"] == {"location": "Paris, France"}
    assert json.loads(weather.outputs["text"])["temperature"] == 26.1
    assert gsm8k.name == "Gsm8kTool.execute"
    assert gsm8k.outputs == {"text": "Current parsed answer='7' reward=1.0", "reward": 0.0, "metrics": {}}
    assert [c.name for c in gsm8k.children] == ["Gsm8kTool.calc_reward"]  # called from inside its execute
    assert gsm8k.children[0].kind == "reward" and gsm8k.children[0].outputs == 1.0
    assert words.name == "word_count" and words.outputs["text"] == "3"
    assert capital.status == "error" and capital.error_type == "KeyError"
    assert capital.attributes["tool.error_kind"] == "exception"
    [root] = t.tree()
    lifecycle = [s.name for s in walk(root) if s.kind == "custom"]
    assert lifecycle == ["Gsm8kTool.create", "Gsm8kTool.release"]  # WeatherTool defines neither: no spans


def test_a_loop_that_builds_its_own_tools_has_them_traced(verl_config, tokenizer, trace_dir, read_store):
    tracing.init_tracing(trace_dir=str(trace_dir))
    try:
        run(OwnToolsLoop, verl_config, tokenizer, [], [call("calc_gsm8k_reward", answer="7"), "7"])
        [t] = read_store().trajectories()
    finally:
        tracing.shutdown_tracing()
    assert [s.name for s in tool_spans(t)] == ["Gsm8kTool.execute"] and t.num_tool_calls == 1


def test_a_tool_keeps_its_class_and_records_nothing_outside_a_trajectory(trace_dir, read_store):
    [tool] = load_tools(VERL_TOOLS / "gsm8k_tool_config.yaml")
    observe_tools([tool])
    observe_tools([tool])  # once is enough: the same class stays
    assert type(tool).__name__ == "Gsm8kTool" and isinstance(tool, Gsm8kTool) and type(tool) is not Gsm8kTool
    assert not getattr(Gsm8kTool, "__rollscope_tool_traced__", False)  # verl's class itself untouched
    tracing.init_tracing(trace_dir=str(trace_dir))

    async def bare():
        instance_id, _ = await tool.create(ground_truth="7")
        result = await tool.execute(instance_id, {"answer": "7"})
        await tool.release(instance_id)
        return result

    try:
        response, reward, _ = asyncio.run(bare())
        assert response.text == "Current parsed answer='7' reward=1.0" and reward == 0.0
        assert read_store().trajectories() == []  # verl's own decorator's to record, outside rollscope's loops
    finally:
        tracing.shutdown_tracing()


def test_a_tool_class_whose_optional_package_is_missing_is_one_error(tmp_path):
    module = tmp_path / "needs_pkg_tools.py"
    module.write_text(
        "from verl.tools.base_tool import BaseTool\n\n"
        "class NeedsPackage(BaseTool):\n"
        "    def __init__(self, config, tool_schema):\n"
        "        import faiss_not_installed_here  # noqa: F401\n"
    )
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - class_name: needs_pkg_tools.NeedsPackage\n    config: {type: native}\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ToolConfigError) as err:
            load_tools(config)
    finally:
        sys.path.remove(str(tmp_path))
    message = str(err.value)
    assert message.startswith(f"{config}: tools[0] (needs_pkg_tools.NeedsPackage): ")
    assert "'faiss_not_installed_here', which is not installed (pip install faiss_not_installed_here)" in message


def test_a_function_tool_file_that_fails_or_clashes_is_one_error(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import nothing_by_this_name\n")
    with pytest.raises(
        ToolConfigError,
        match=r"broken.py: function_tool_path: needs the package providing "
        r"'nothing_by_this_name'",
    ):
        load_function_tools(broken)
    with pytest.raises(ToolConfigError, match=r"function_tool_path: tool name\(s\) \['word_count'\] are also"):
        load_function_tools(VERL_TOOLS / "function_tools.py", taken=["word_count"])
    with pytest.raises(ToolConfigError, match="no such file"):
        load_function_tools(tmp_path / "absent.py")


class SwitchWitness(Gsm8kTool):
    """verl's Gsm8kTool, noting whether verl's own decorators would record (verl's switch, the first
    thing its ``rollout_trace_op`` reads) while its decorated ``execute`` runs."""

    seen: list = []

    async def execute(self, instance_id, parameters, **kwargs):
        from verl.utils.rollout_trace import _trace_enabled

        self.seen.append(_trace_enabled.get())
        return await super().execute(instance_id, parameters, **kwargs)


def test_verls_own_decorator_records_nothing_where_rollscope_records_the_call(
    verl_config, tokenizer, trace_dir, read_store
):
    [gsm8k] = load_tools(VERL_TOOLS / "gsm8k_tool_config.yaml")
    witness = SwitchWitness(gsm8k.config, gsm8k.tool_schema)
    tracing.init_tracing(trace_dir=str(trace_dir))
    try:
        run(ToolAgentLoop, verl_config, tokenizer, [witness], [call("calc_gsm8k_reward", answer="7"), "7"])
        [t] = read_store().trajectories()
    finally:
        tracing.shutdown_tracing()
    assert SwitchWitness.seen == [False] and t.num_tool_calls == 1  # recorded once: by rollscope


def test_a_tool_that_cannot_be_traced_is_said_once(caplog):
    class Duck:  # neither a BaseTool nor a FunctionTool: what could it run?
        name = "duck"

    with caplog.at_level("WARNING", logger="rollscope.tools"):
        observe_tools([Duck(), Duck()])
    said = [r.getMessage() for r in caplog.records if "cannot trace its calls" in r.getMessage()]
    assert len(said) == 1 and "Duck" in said[0]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda c: c.__name__)
def test_a_tool_of_any_shape_behaves_under_rollscope_as_under_verl(
    shape, verl_config, tokenizer, trace_dir, read_store, caplog
):
    """The same tool class, a fresh instance each: verl's own ToolAgentLoop (untraced) and
    rollscope's give the model the same answer; rollscope records the call, or, for a class that
    refuses a subclass, runs it untraced and says so once."""
    replies = [call("echo", text="hi"), "done."]
    plain = run(VerlToolAgentLoop, verl_config, tokenizer, [shape({}, SCHEMA)], replies)
    tracing.init_tracing(trace_dir=str(trace_dir))
    try:
        with caplog.at_level("WARNING", logger="rollscope.tools"):
            traced = run(ToolAgentLoop, verl_config, tokenizer, [shape({}, SCHEMA)], replies)
        [t] = read_store().trajectories()
    finally:
        tracing.shutdown_tracing()
    assert traced.response_ids == plain.response_ids
    assert ": hi" in tokenizer.decode(plain.response_ids)  # (the tool answered, under verl)
    assert t.status == "ok" and t.num_errors == 0
    if shape in REFUSE_A_SUBCLASS:
        assert t.num_tool_calls == 0 and "refuses a subclass" in caplog.text
    else:
        [span] = tool_spans(t)
        assert span.name == f"{shape.__name__}.execute" and span.outputs["text"].endswith(": hi")
