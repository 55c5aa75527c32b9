"""Every llm turn in Weave reads as a conversation: ``rollscope run`` (the gsm8k example with a
scripted model in Qwen2.5's tokens and chat template, a calculator call then the answer) traced to
the local store and to W&B's own Weave trace server (tests.engines), with token2text on and off.
Each llm call passes Weave's UI's own chat predicates (weave_chat: ported from weave-js), its
messages are the turn's prompt, message by message, with the tool call as OpenAI ``tool_calls``
and the tool's answer as a ``tool`` message; reading the project back as a source gives the spans
as traced (what the chat shape added is taken away)."""

import asyncio
import json

import pytest

from rollscope.sources import open_source
from rollscope.store import TraceStore
from rollscope.trajectory.chat import messages
from tests.agentloops.real_models import model_dir
from tests.engines import weave_calls
from tests.tracing.weave_chat import is_message, is_openai_chat

pytestmark = pytest.mark.slow
CALL = {"name": "calculator", "arguments": {"expression": "61 * 16"}}
REPLIES = [f"Let me compute.\n<tool_call>\n{json.dumps(CALL)}\n</tool_call>", "The answer is 976."]


@pytest.fixture(scope="module", params=[True, False], ids=["token2text", "ids only"])
def run(request, weave_trace_server, tmp_path_factory):
    from rollscope.runner import session
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner

    root = tmp_path_factory.mktemp("chat")
    project = f"ent/chat-{'text' if request.param else 'ids'}"
    (root / "replies.json").write_text(json.dumps(REPLIES))
    config = load_config(
        "gsm8k-calculator",
        [
            f"llm=scripted:{root / 'replies.json'}",
            "limit=2",
            f"model={model_dir('qwen2.5', root / 'qwen')}",
            "sampling={temperature: 0, max_tokens: 200}",
            "backend=local,weave",
            f"project={project}",
            f"trace_dir={root / 'traces'}",
            f"token2text={str(request.param).lower()}",
        ],
    )
    runner = Runner(config)
    runner.setup()
    asyncio.run(session.run_traced(runner))
    assert runner.stats.all_stored
    return project, root / "traces", runner.tokenizer


def test_every_llm_call_is_a_chat_whose_messages_are_its_prompt(run):
    project, traces, tokenizer = run
    llm = [c for c in weave_calls(project) if c["attributes"].get("kind") == "llm"]
    assert len(llm) == 4  # two trajectories, two turns each
    with TraceStore(traces) as store:
        records = [store.get(t.id) for t in store.trajectories()]
        prompts = {s.id: tokenizer.decode(r.prompts.ids(s)) for r in records for s in r.spans if s.kind == "llm"}
    for call in llm:
        assert is_openai_chat(call["inputs"]), call["inputs"]["messages"]
        [choice] = call["output"]["choices"]
        assert is_message(choice["message"]) and call["output"]["usage"]["completion_tokens"] > 0
        prompt = prompts[call["summary"]["rollscope"]["span"]]
        rendered = messages(prompt)
        sent = call["inputs"]["messages"]
        assert [m["role"] for m in sent] == [m.role for m in rendered]
        for message, source in zip(sent, rendered, strict=True):
            if message["role"] == "tool":
                assert message["content"] in source.content and message["tool_call_id"].startswith("call_")
            elif "tool_calls" in message:
                [tool_call] = message["tool_calls"]
                assert json.loads(tool_call["function"]["arguments"]) == CALL["arguments"]
            else:
                assert message["content"] == source.content
    first = [c for c in llm if not any(m["role"] == "tool" for m in c["inputs"]["messages"])]
    assert len(first) == 2
    for call in first:  # the model's call: a tool call of the choice, the text around it its content
        message = call["output"]["choices"][0]["message"]
        assert message["content"] == "Let me compute." and call["output"]["choices"][0]["finish_reason"] == "tool_calls"
        assert message["tool_calls"][0]["function"]["name"] == "calculator"
    for call in llm:
        if call not in first:  # the answer turn: the earlier call answered by the tool's message
            sent = call["inputs"]["messages"]
            [asked] = [m for m in sent if m.get("tool_calls")]
            [answered] = [m for m in sent if m["role"] == "tool"]
            assert answered["tool_call_id"] == asked["tool_calls"][0]["id"] and "976" in answered["content"]
            assert call["output"]["choices"][0]["message"]["content"] == "The answer is 976."


def test_read_back_as_a_source_the_spans_are_as_traced(run):
    project, traces, _ = run
    weave = open_source(f"weave:{project}", None)
    with TraceStore(traces) as store:
        for t in store.trajectories():
            record, read_back = store.get(t.id), weave.get(t.id)  # (each turn's prompt made whole to compare)
            local = {s.id: s for s in record.spans if s.kind == "llm"}
            remote = {s.id: s for s in read_back.spans if s.kind == "llm"}
            assert set(remote) == set(local)
            for span_id, span in local.items():
                assert read_back.prompts.whole_inputs(remote[span_id]) == record.prompts.whole_inputs(span)
                assert remote[span_id].outputs == span.outputs
    weave.close()
