"""The retokenization check off the rollout's thread renders and encodes exactly as transformers'
``apply_chat_template`` does in the loop, for each template the project ships and one written the
way tool-calling templates are (tools as JSON, special tokens, raise_exception, loop controls)."""

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from rollscope.agentloops import retokenization as loop_side
from rollscope.cpu import demo_task
from rollscope.llm.tokenizer_dir import CHAT_TEMPLATE, make_model_dir
from rollscope.semconv import RETOKENIZATION
from rollscope.trajectory.retokenization import check_request, first_difference, render
from rollscope.trajectory.summary import TrajectorySummary

TOOLS_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant', 'tool'] %}"
    "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "{% if m['role'] == 'tool' and loop.index0 > 40 %}{% break %}{% endif %}"
    "<|{{ m['role'] }}|>{{ m['content'] | trim }}{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}"
    "<tool_call>{{ c['function'] | tojson }}</tool_call>{% endfor %}{% endif %}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}{% if thinking %}<think>{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "evaluates arithmetic",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 6*7"}},
            },
        },
    }
]
CONVERSATIONS = [
    [{"role": "user", "content": "What is 17 * 23?"}, {"role": "assistant", "content": "The answer is 391."}],
    [
        {"role": "system", "content": "  use the tool  "},
        {"role": "user", "content": "calculate 3 + 4 with the tool"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "3 + 4"}}}
            ],
        },
        {"role": "tool", "content": "7"},
        {"role": "assistant", "content": "the answer is 7 — é ∑ 😀\n\n"},
    ],
]


@pytest.fixture(scope="module", params=["tests' own", "training demo's", "tool calling"])
def tokenizer(request, tmp_path_factory):
    template = {
        "tests' own": CHAT_TEMPLATE,
        "training demo's": demo_task.CHAT_TEMPLATE,
        "tool calling": TOOLS_TEMPLATE,
    }[request.param]
    path = make_model_dir(tmp_path_factory.mktemp("tok"), chat_template=template)
    tok = AutoTokenizer.from_pretrained(path)
    tok.bos_token, tok.eos_token = "<pad>", "<eos>"
    return tok


@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("kwargs", [None, {"thinking": True}])
def test_the_request_renders_to_the_ids_apply_chat_template_gives(tokenizer, tools, kwargs):
    for messages in CONVERSATIONS:
        expected = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=False, **(kwargs or {})
        )
        deferred = loop_side.request(tokenizer, messages, tools, expected, kwargs)
        assert deferred is not None and render(deferred) == list(expected)
        assert check_request(deferred) == first_difference(list(expected), list(expected))
        assert check_request(deferred)["match"] is True


def test_a_drift_is_found_where_the_sequence_parts(tokenizer):
    messages = CONVERSATIONS[0]
    rendered = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    sampled = [*rendered[:5], rendered[5] + 1, *rendered[6:]]
    found = check_request(loop_side.request(tokenizer, messages, None, sampled))
    assert found["match"] is False and found["position"] == 5


def test_a_split_the_tokenizer_never_makes_is_told_from_a_text_that_differs(tokenizer):
    """The model sampled a reply's merged token as its characters one by one: the same text, other
    ids. Both checks (off the thread, and the loop's own for a tokenizer it cannot hand on) call it
    a split; the trajectory's summary keeps it apart from the drift a template causes."""
    messages = CONVERSATIONS[0]
    rendered = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    reply = tokenizer.encode("The answer is 391.", add_special_tokens=False)
    start = next(i for i in range(len(rendered)) if rendered[i : i + len(reply)] == reply)
    at = next(start + i for i, t in enumerate(reply) if len(tokenizer.decode([t]).strip()) >= 2)
    characters = [i for c in tokenizer.decode([rendered[at]]) for i in tokenizer.encode(c, add_special_tokens=False)]
    sampled = [*rendered[:at], *characters, *rendered[at + 1 :]]
    assert tokenizer.decode(sampled) == tokenizer.decode(rendered) and len(characters) >= 2
    found = check_request(loop_side.request(tokenizer, messages, None, sampled))
    assert (found["match"], found["position"], found["cause"]) == (False, at, "split")
    assert asyncio.run(loop_side.check(tokenizer, messages, None, sampled)) == found
    text = check_request(loop_side.request(tokenizer, messages, None, [*rendered[:at], rendered[at] + 1]))
    assert text["cause"] == "text"

    run = SimpleNamespace(
        kind="agent", name="run", status="ok", inputs={}, outputs={}, attributes={RETOKENIZATION: found}
    )  # (a stored span, as the summary reads one)
    summary = TrajectorySummary()
    summary.add(run)
    assert summary.attributes() == {"retokenization_split": at}


def test_a_tokenizer_built_in_memory_is_checked_off_the_thread_too_and_failures_are_none(tokenizer, tmp_path):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_file(str(Path(tokenizer.name_or_path) / "tokenizer.json"))
    in_memory = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert loop_side.request(in_memory, CONVERSATIONS[0], None, [1, 2]) is None  # no chat template: nothing to do
    in_memory.chat_template = tokenizer.chat_template
    expected = in_memory.apply_chat_template(CONVERSATIONS[1], tokenize=True, return_dict=False)
    assert render(loop_side.request(in_memory, CONVERSATIONS[1], None, expected)) == list(expected)
    deferred = loop_side.request(tokenizer, [{"role": "robot", "content": "x"}], None, [1])
    if "raise_exception" in deferred["template"]:
        assert check_request(deferred) is None  # the template refuses the conversation: nothing to compare
    assert check_request({**deferred, "tokenizer": str(tmp_path / "gone.json")}) is None


def test_every_difference_is_found_each_with_its_cause(tokenizer):
    """An early difference must not hide a later one: two places differ (a token changed, then a
    space added), both are listed with both sides' text and their causes; the tail the template
    adds past the rollout's end is none."""
    messages = CONVERSATIONS[0]
    rendered = list(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
    space = tokenizer.encode(" ", add_special_tokens=False)
    late = len(rendered) - 4
    sampled = [*rendered[:5], rendered[5] + 1, *rendered[6:late], *space, *rendered[late:-1]]
    found = check_request(loop_side.request(tokenizer, messages, None, sampled))
    assert found["match"] is False and found["difference_count"] == 2 and found["position"] == 5
    first, second = found["differences"]
    assert (first["position"], first["rollout"], first["template"]) == (5, [rendered[5] + 1], [rendered[5]])
    assert first["cause"] == "text" and first["template_text"] == tokenizer.decode([rendered[5]])
    assert (second["position"], second["template"], second["cause"]) == (late, [], "whitespace")
    assert second["rollout_text"] == " " and found["cause"] == "text"

    from rollscope.cli.render import drift_lines

    lines = drift_lines(found)
    assert first["said"] == "the template writes other text than the model did"
    assert len(lines) == 2 and lines[1] == (
        f"at {late} (whitespace): trained on ' ', template '' — the template "
        "writes it with other spacing (a tool call's JSON re-rendered, say)"
    )
