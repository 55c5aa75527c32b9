"""The trajectory page reads as one conversation: each llm turn shows what is new since the
previous one (the tool's answer, then the reply), the full prompt one click away; a prompt that
does not continue the conversation so far shows whole."""

import html
import re

import httpx
import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from tests.viewer.conftest import serve

SYSTEM = "<|im_start|>system\nYou are a calculator.<|im_end|>\n"
USER = "<|im_start|>user\nWhat is 6 * 7, then plus 8?<|im_end|>\n"
REPLIES = ['<tool_call>{"name": "calc", "arguments": {"e": "6*7"}}</tool_call>',
           '<tool_call>{"name": "calc", "arguments": {"e": "42+8"}}</tool_call>', "It is 50."]  # fmt: skip
TOOL_ANSWERS = ["42", "50"]


def prompt(turn: int) -> str:
    """The ChatML prompt of turn ``turn``: everything before it, then an open assistant header."""
    text = SYSTEM + USER
    for k in range(turn):
        text += f"<|im_start|>assistant\n{REPLIES[k]}<|im_end|>\n<|im_start|>user\n<tool_response>\n{TOOL_ANSWERS[k]}\n</tool_response><|im_end|>\n"
    return text + "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("viewer-chat") / "traces"
    tracing.init_tracing(trace_dir=str(trace_dir), experiment="chat")
    with tracing.rollout_trace_attr(step=0, sample_index=0, rollout_n=0):
        for turn in range(3):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": prompt(turn)}) as s:
                s.outputs = {"response_text": REPLIES[turn] + "<|im_end|>"}
            if turn < 2:
                with tracing.trace_span("calc", kind="tool", inputs={"parameters": {"e": "x"}}) as s:
                    s.outputs = {"text": TOOL_ANSWERS[turn]}
        with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": SYSTEM + "<|im_start|>user\nA new task<|im_end|>\n<|im_start|>assistant\n"}) as s:
            s.outputs = {"response_text": "ok"}
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    with TraceStore(trace_dir) as store:
        (t,) = store.trajectories()
    for url in serve(trace_dir):
        yield url, t.id


def chats(page: str) -> list[list[tuple[str, str]]]:
    """Each llm turn's shown messages as (role, text)."""
    out = []
    for block in re.findall(r'<div class="chat">(.*?)</div></div>', page, re.S):
        out.append([(role, html.unescape(text)) for role, text in
                    re.findall(r'<div class="msg role-(\w+)"><span class="role">\w+</span><pre>(.*?)</pre>', block, re.S)])
    return out


def test_each_turn_shows_only_what_is_new_and_the_page_reads_as_one_conversation(chat_server):
    url, trajectory = chat_server
    page = httpx.get(f"{url}/t/{trajectory}", timeout=30).text
    turns = chats(page)
    assert turns[0] == [("system", "You are a calculator."), ("user", "What is 6 * 7, then plus 8?"),
                        ("assistant", REPLIES[0])]  # fmt: skip
    assert turns[1] == [("user", "<tool_response>\n42\n</tool_response>"), ("assistant", REPLIES[1])]
    assert turns[2] == [("user", "<tool_response>\n50\n</tool_response>"), ("assistant", REPLIES[2])]
    # top to bottom, every message once: the conversation as the model lived it
    flat = [m for turn in turns[:3] for m in turn]
    assert len(flat) == len(set(flat)) == 7
    assert page.count("earlier messages, above") == 2 and "… 3 earlier messages" in page and "… 5 earlier" in page
    assert page.count('<details class="full-prompt">') == 4  # the full prompt one click away, every turn
    assert turns[3] == [("system", "You are a calculator."), ("user", "A new task"), ("assistant", "ok")]
