"""The trajectory page reads as one conversation: each llm turn shows what is new since the
previous one (the tool's answer, then the reply), the full prompt one click away; a prompt that
does not continue the conversation so far shows whole."""

import html
import re
from pathlib import Path

import httpx
import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from tests.viewer.conftest import serve

SYSTEM = "<|im_start|>system\nYou are a calculator.<|im_end|>\n"
USER = "<|im_start|>user\nWhat is 6 * 7, then plus 8?<|im_end|>\n"
REPLIES = [
    '<tool_call>{"name": "calc", "arguments": {"e": "6*7"}}</tool_call>',
    '<tool_call>{"name": "calc", "arguments": {"e": "42+8"}}</tool_call>',
    "It is 50.",
]
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
        with tracing.trace_span(
            "llm.generate",
            kind="llm",
            inputs={"prompt_text": SYSTEM + "<|im_start|>user\nA new task<|im_end|>\n<|im_start|>assistant\n"},
        ) as s:
            s.outputs = {"response_text": "ok"}
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    with TraceStore(trace_dir) as store:
        (t,) = store.trajectories()
    for url in serve(trace_dir):
        yield url, t.id


MARKER = re.compile(r'<span class="special-token">(.*?)</span>')


def chats(page: str) -> list[list[tuple[str, str]]]:
    """Each llm turn's shown messages as (role, text), special tokens read as the text they mark."""
    out = []
    for block in re.findall(r'<div class="chat">(.*?)</div></div>', page, re.S):
        out.append(
            [
                (role, html.unescape(MARKER.sub(r"\1", text)))
                for role, text in re.findall(
                    r'<div class="msg role-(\w+)"><span class="role">\w+</span><pre>(.*?)</pre>', block, re.S
                )
            ]
        )
    return out


def test_each_turn_shows_only_what_is_new_and_the_page_reads_as_one_conversation(chat_server):
    url, trajectory = chat_server
    page = httpx.get(f"{url}/t/{trajectory}", timeout=30).text
    turns = chats(page)
    assert turns[0] == [
        ("system", "You are a calculator."),
        ("user", "What is 6 * 7, then plus 8?"),
        ("assistant", REPLIES[0]),
    ]
    assert turns[1] == [
        ("tool", "<tool_response>\n42\n</tool_response>"),
        ("assistant", REPLIES[1]),
    ]  # (its own bubble)
    assert turns[2] == [("tool", "<tool_response>\n50\n</tool_response>"), ("assistant", REPLIES[2])]
    # top to bottom, every message once: the conversation as the model lived it
    flat = [m for turn in turns[:3] for m in turn]
    assert len(flat) == len(set(flat)) == 7
    assert page.count("earlier messages, above") == 2 and "… 3 earlier messages" in page and "… 5 earlier" in page
    assert page.count('<details class="full-prompt">') == 4  # the full prompt one click away, every turn
    assert turns[3] == [("system", "You are a calculator."), ("user", "A new task"), ("assistant", "ok")]


def test_special_tokens_in_a_message_are_drawn_as_markers_not_as_the_models_words(chat_server):
    url, trajectory = chat_server
    page = httpx.get(f"{url}/t/{trajectory}", timeout=30).text
    [first_turn, *_] = re.findall(r'<div class="chat">(.*?)</div></div>', page, re.S)
    assert MARKER.findall(first_turn) == ["&lt;tool_call&gt;", "&lt;/tool_call&gt;"]
    assert "{&#34;name&#34;: &#34;calc&#34;" in first_turn  # (the call itself stays text)


@pytest.mark.slow
def test_special_tokens_as_chromium_draws_them(chat_server, browser):
    """Boxed apart from the model's words, with the text of the token (screenshot 11)."""
    from selenium.webdriver.common.by import By

    from tests.viewer.test_browser import shot

    url, trajectory = chat_server
    browser.get(f"{url}/t/{trajectory}")
    first = browser.find_elements(By.CSS_SELECTOR, ".chat")[0]
    markers = first.find_elements(By.CSS_SELECTOR, ".msg pre .special-token")
    assert [m.text for m in markers] == ["<tool_call>", "</tool_call>"]
    assert {m.value_of_css_property("border-top-style") for m in markers} == {"solid"}
    reply = first.find_elements(By.CSS_SELECTOR, ".msg pre")[-1].text
    assert reply == REPLIES[0]  # (read whole, markers and call, as the model wrote it)
    shot(browser, "11-chat-special-tokens")


def test_markers_cover_the_families_special_tokens_and_escape_everything_else():
    from rollscope.viewer.chat import with_markers

    shown = str(with_markers("<bos>a <|endoftext|> <b>x</b> </s><|eot_id|><think>"))
    assert MARKER.findall(shown) == [
        "&lt;bos&gt;",
        "&lt;|endoftext|&gt;",
        "&lt;/s&gt;",
        "&lt;|eot_id|&gt;",
        "&lt;think&gt;",
    ]
    assert "&lt;b&gt;x&lt;/b&gt;" in shown and "<b>" not in shown


def test_the_embedded_models_few_shot_prompt_reads_as_turns_with_tool_responses_of_their_own():
    """The bundled Gemma template (rollscope/bundled/templates/gemma_tools.jinja) ends a model turn at its
    ``</tool_call>`` and writes the tool's response as a user turn: each worked example reads as
    user, assistant (the call), tool (the response), assistant (the answer), no marker left in a
    message."""
    from jinja2 import Environment

    from rollscope.bundled import path
    from rollscope.trajectory.chat import messages

    schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "arithmetic",
            "parameters": {"properties": {"expression": {}}},
        },
    }
    prompt = (
        Environment()
        .from_string(Path(path("gemma_tools.jinja")).read_text())
        .render(
            bos_token="<bos>",
            tools=[schema],
            messages=[{"role": "user", "content": "What is 2 + 2?"}],
            add_generation_prompt=True,
        )
    )
    found = messages(prompt)
    assert [m.role for m in found[1:5]] == ["user", "assistant", "tool", "assistant"]
    assert found[2].content.startswith("<tool_call>") and found[3].content == "<tool_response>\n55\n</tool_response>"
    assert found[-1].role == "user" and found[-1].content == "What is 2 + 2?"
    assert not [m for m in found if "<start_of_turn>" in m.content or "<end_of_turn>" in m.content]
