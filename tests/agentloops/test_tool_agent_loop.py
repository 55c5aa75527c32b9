"""rollscope's ToolAgentLoop on verl's real classes, a real tokenizer and a ScriptedLLM test double."""

import asyncio
import copy
import re

import pytest

from rollscope import tracing
from rollscope.agentloops import ToolAgentLoop
from rollscope.llm import ScriptedLLM
from rollscope.tools.builtin import AnswerCheckerTool, CalculatorTool
from tests.agentloops.conftest import build_loop, call, with_overrides

PROMPT = [{"role": "user", "content": "What is 17 * 23?"}]
SAMPLING = {"temperature": 1.0, "logprobs": True}


def run_loop(config, tokenizer, replies, tools=None, **kwargs):
    llm = ScriptedLLM(tokenizer, replies)

    async def main():
        loop = build_loop(ToolAgentLoop, config, tokenizer, llm, tools if tools is not None else [CalculatorTool()])
        return await loop.run(SAMPLING, raw_prompt=list(PROMPT), **kwargs)

    return asyncio.run(main())


def tool_messages(tokenizer, output):
    text = tokenizer.decode(output.response_ids)
    return [part.split("<|im_end|>")[0] for part in text.split("<|im_start|>tool\n")[1:]]


def test_conversation_is_traced_turn_by_turn(verl_config, tokenizer, trace_dir, read_store):
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)
    out = run_loop(
        verl_config,
        tokenizer,
        [call("calculator", expression="17 * 23"), "The answer is 391."],
        extra_info={"index": 12},
        step=3,
        rollout_n=1,
    )
    assert tool_messages(tokenizer, out) == ["391"]
    [t] = read_store().trajectories()
    assert (t.sample_index, t.step, t.rollout_n, t.agent_name) == (12, 3, 1, "ToolAgentLoop")
    assert (t.num_llm_calls, t.num_tool_calls, t.num_errors) == (2, 1, 0)
    [run] = t.tree()
    assert run.name == "ToolAgentLoop.run" and run.kind == "agent"
    assert [c.kind for c in run.children] == ["llm", "tool", "llm"]
    first = run.children[0]
    assert first.attributes["gen_ai.usage.input_tokens"] == len(first.inputs["prompt_ids"])
    assert first.attributes["gen_ai.usage.output_tokens"] == len(first.outputs["token_ids"])
    assert first.attributes["gen_ai.response.finish_reasons"] == ["completed"]
    assert "What is 17 * 23?" in first.inputs["prompt_text"]  # token2text through the loop's tokenizer
    assert first.outputs["response_text"].startswith('<tool_call>{"name": "calculator"')
    assert run.children[1].outputs["text"] == "391"
    # the run span keeps what was trained on and leaves out what the llm spans already hold
    assert run.outputs["response_ids"] == out.response_ids and run.outputs["response_mask"] == out.response_mask
    assert "prompt_ids" not in run.outputs and "response_logprobs" not in run.outputs
    assert run.outputs["prompt_length"] == len(out.prompt_ids)


MALFORMED = [
    (
        '<tool_call>{"name": "calculator", "arguments": {expression: 1}}</tool_call>',
        "Error: the tool call is not valid JSON",
    ),
    (call("calc", expression="1+1"), "Error: unknown tool 'calc'; available tools: calculator"),
    (
        call("calculator", expression=5),
        "Error: invalid arguments for 'calculator': argument 'expression' must be string",
    ),
    (call("calculator"), "Error: invalid arguments for 'calculator': missing required argument 'expression'"),
    (
        '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>',
        "Error: invalid arguments for 'calculator': arguments must be a JSON object, got list",
    ),
    ('<tool_call>{"arguments": {"expression": "1"}}</tool_call>', "Error: the tool call has no 'name' string"),
    (
        '<tool_call>{"name": "calculator", "arguments": "{not json"}</tool_call>',
        "Error: arguments for 'calculator' are not valid JSON",
    ),
    (call("calculator", expression="1/0"), "Error: division by zero"),
    # hostile shapes: each raised out of the parser before, failing the rollout (and verl's whole batch)
    (
        '<tool_call>{"name": "calculator", "arguments": ' + "[" * 2000 + "]" * 2000 + "}</tool_call>",
        "Error: the tool call's JSON is nested too deeply",
    ),
    (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}, "id": 5}</tool_call>',
        "Error: the tool call's 'id' must be a string",
    ),
    (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}, "id": {"a": 1}}</tool_call>',
        "Error: the tool call's 'id' must be a string",
    ),
    (
        '<tool_call>{"name": "calculator", "arguments": {"expression": ' + "9" * 5000 + "}}</tool_call>",
        "Error: the tool call's JSON has a value Python cannot read",
    ),
    (
        '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": ' + "9" * 5000 + '}"}</tool_call>',
        "Error: the tool call's arguments hold JSON Python cannot read (ValueError)",
    ),
    (
        '<tool_call>{"name": "calculator", "arguments": "' + "[" * 2000 + '"}</tool_call>',
        "Error: the tool call's arguments hold JSON Python cannot read (RecursionError)",
    ),
]


@pytest.mark.parametrize(("reply", "message"), MALFORMED)
def test_malformed_calls_are_answered_and_traced(verl_config, tokenizer, local_tracer, read_store, reply, message):
    config = verl_config
    if len(reply) > 1000:  # room in the response for the hostile shapes
        config = copy.deepcopy(verl_config)
        config.actor_rollout_ref.rollout.response_length = 32_768
    out = run_loop(config, tokenizer, [reply, call("calculator", expression="2+2"), "Done: 4."])
    [bad, good] = tool_messages(tokenizer, out)
    assert bad.startswith(message)
    assert good == "4"  # the model recovered and the loop went on
    [t] = read_store().trajectories()
    errors = [s for s in t.spans if s.status == "error"]
    assert len(errors) == 1 and errors[0].kind == "tool"
    assert message.removeprefix("Error: ") in errors[0].error_message
    assert t.status == "ok" and t.num_llm_calls == 3


def test_unterminated_call_from_a_stop_string_is_parsed(verl_config, tokenizer, local_tracer):
    out = run_loop(
        verl_config, tokenizer, ['<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}', "42"]
    )
    assert tool_messages(tokenizer, out) == ["42"]


def test_parallel_calls_up_to_the_limit(verl_config, tokenizer, local_tracer, read_store):
    cfg = with_overrides(verl_config, max_parallel_calls=2)
    reply = (
        call("calculator", expression="1+1")
        + call("calculator", expression="2+2")
        + call("calculator", expression="3+3")
    )
    out = run_loop(cfg, tokenizer, [reply, "done"])
    assert tool_messages(tokenizer, out) == ["2", "4"]  # the third call is beyond max_parallel_calls
    assert read_store().trajectories()[0].num_tool_calls == 2


def test_turn_limit_and_tool_rewards(verl_config, tokenizer, local_tracer, read_store):
    cfg = with_overrides(verl_config, max_assistant_turns=2)
    checker = AnswerCheckerTool()
    out = run_loop(
        cfg,
        tokenizer,
        [call("submit_answer", answer="391")],
        tools=[CalculatorTool(), checker],
        tools_kwargs={"submit_answer": {"create_kwargs": {"ground_truth": "391"}}},
    )
    assert out.extra_fields["tool_rewards"] == [1.0]
    [t] = read_store().trajectories()
    assert t.num_llm_calls == 2  # stopped by max_assistant_turns although the model kept calling
    assert t.attributes["reward_details"] == {"tool_rewards": [1.0]}


def test_parsing_stays_bounded_on_hostile_output():
    """50 MB of model output, 1,000 calls in one turn, 100,000 nesting levels, invalid UTF-8: every
    one parses to calls or clear malformed calls; nothing raises (sizes, not timings, asserted)."""
    from rollscope.agentloops.tool_parser import MALFORMED_CALL, MAX_CALL_CHARS, extract_from_text

    text, calls = extract_from_text("x" * 50_000_000 + "<tool_call>" + "[" * 50_000_000)
    assert len(text) == 50_000_000 and [c.name for c in calls] == [MALFORMED_CALL]
    assert str(MAX_CALL_CHARS) in calls[0].arguments.replace(",", "")
    _, calls = extract_from_text(call("calculator", expression="1+1") * 1000)
    assert len(calls) == 1000 and {c.name for c in calls} == {"calculator"}
    _, calls = extract_from_text("<tool_call>" + "{" * 100_000 + "</tool_call>")
    assert "nested too deeply" in calls[0].arguments or "not valid JSON" in calls[0].arguments
    _, calls = extract_from_text(
        b'<tool_call>{"name": "calc\xff\xfe", "arguments": {}}</tool_call>'.decode("utf-8", "replace")
    )
    assert calls[0].name == "calc\ufffd\ufffd"  # decoded with replacement characters: an unknown tool, told so


def _retokenization(read_store):
    [t] = read_store().trajectories()
    [run] = t.tree()
    return t, run.attributes["rollscope.retokenization"]


def test_the_chat_template_renders_the_conversation_as_the_model_saw_it(
    verl_config, tokenizer, local_tracer, read_store
):
    run_loop(verl_config, tokenizer, ["The answer is 391."], tools=[])
    t, check = _retokenization(read_store)
    assert check["match"] is True and "retokenization_drift" not in t.attributes


# replies as a policy early in training writes them (the first two: the training demo's model)
WRITTEN = [
    "<tool_call> 115325.",  # not JSON, a space first
    '<tool_call>{"name": "calculator", "arguments": {"expression": "25 * 13"}}</toolexpression": 25 * 13',
    ' Let me see. <tool_call>{"name":"calculator","arguments":{"expression":"6*7"}} </tool_call> so 42 ',
    call("calculator", expression="1+1") + "\nand\n" + call("calculator", expression="2+2") + "\n",
]


@pytest.fixture(scope="module")
def demo_template_tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from rollscope.cpu.demo_task import CHAT_TEMPLATE
    from rollscope.llm.tokenizer_dir import make_model_dir

    return AutoTokenizer.from_pretrained(
        make_model_dir(tmp_path_factory.mktemp("demo_template"), chat_template=CHAT_TEMPLATE)
    )


@pytest.mark.parametrize("reply", WRITTEN)
def test_each_call_keeps_its_text_so_the_demos_template_gives_back_the_reply_as_written(
    reply, verl_config, demo_template_tokenizer, local_tracer, read_store
):
    """Malformed, garbled, spaced, with text around or between: the parser keeps each call's block
    and its place in the content, the training demo's template puts them back, and re-rendering
    the conversation gives the tokens sampled (the retokenization check through the loop)."""
    from rollscope.agentloops.tool_parser import extract_from_text, written_back

    content, calls = extract_from_text(reply)
    assert written_back(content, calls) == reply
    run_loop(verl_config, demo_template_tokenizer, [reply, "The answer is 42."])
    t, check = _retokenization(read_store)
    assert check["match"] is True and "retokenization_drift" not in t.attributes, str(check)
    assert t.num_tool_calls == 1 and len(calls) >= 1  # (verl runs max_parallel_calls: 1 here)


def test_the_check_renders_with_the_chat_template_kwargs_verl_rendered_the_prompt_with(
    verl_config, local_tracer, read_store, tmp_path
):
    """``data.apply_chat_template_kwargs`` (an OmegaConf node in verl's config) reach the check as
    plain values: the template's kwarg-dependent text matches instead of drifting at position 0."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from rollscope.llm.tokenizer_dir import CHAT_TEMPLATE, make_model_dir

    template = "{% if thinking %}(thinking on)\n{% endif %}" + CHAT_TEMPLATE
    tokenizer = AutoTokenizer.from_pretrained(make_model_dir(tmp_path / "model", chat_template=template))
    cfg = copy.deepcopy(verl_config)
    cfg.data.apply_chat_template_kwargs = OmegaConf.create({"thinking": True})
    out = run_loop(cfg, tokenizer, ["The answer is 391."], tools=[])
    assert tokenizer.decode(out.prompt_ids).startswith("(thinking on)")
    t, check = _retokenization(read_store)
    assert check["match"] is True and "retokenization_drift" not in t.attributes, str(check)


def test_a_template_that_changes_a_reply_is_found_at_the_exact_token(
    verl_config, tokenizer, local_tracer, read_store, trace_dir
):
    """A planted mismatch: the template re-renders the assistant's 391 as 392. The first differing
    position is the first token of the reply where the two texts' tokens part."""
    planted = copy.deepcopy(tokenizer)
    planted.chat_template = tokenizer.chat_template.replace(
        "{{ content[ns.at:] }}", "{{ content[ns.at:] | replace('391', '392') }}"
    )
    assert planted.chat_template != tokenizer.chat_template
    out = run_loop(verl_config, planted, ["The answer is 391."], tools=[])
    said, rendered = tokenizer.encode("The answer is 391."), tokenizer.encode("The answer is 392.")
    parted = next(i for i, (x, y) in enumerate(zip(said, rendered, strict=False)) if x != y)
    t, check = _retokenization(read_store)
    assert check["match"] is False and check["position"] == len(out.prompt_ids) + parted
    assert check["cause"] == "text" and t.attributes["retokenization_drift"] == check["position"]
    start = check["window_start"]
    sequence = out.prompt_ids + out.response_ids
    assert check["rollout"] == sequence[start : start + len(check["rollout"])]
    assert check["rollout"][check["position"] - start] != check["template"][check["position"] - start]
    from rollscope.viewer.server import Viewer  # the trajectory page says where, with both windows

    page = Viewer(str(trace_dir)).handle(f"/t/{t.id}")[2].decode()
    assert f"from position <b>{check['position']}</b>" in page
    assert "trained on: " + " ".join(map(str, check["rollout"])) in page
    # the span it starts in is marked, and the banner links to it: the one llm turn's reply
    assert page.count('id="drift-here"') == 1 and 'href="#drift-here"' in page
    assert re.search(r'<li class="span kind-llm drift-here" id="span-\w+">', page), page[:3000]
