"""No stored form of a turn decodes to a secret its text redacts: a model reply that leaks an API
key and a password, through ``rollscope run`` (the runner, its trace sidecar, the real tokenizer),
read back as its token ids, its per-token texts, the next turn's prompt built on it, ``traces
show --json``, ``export`` (JSONL and SFT) and the viewer's token view; with token2text on and off. The
tokens that carried a secret are stored as ``REDACTED_ID``, counted on their span, and a replay
from the record refuses the turn they are in."""

import asyncio
import json
import subprocess
import sys

import pytest

from rollscope import semconv
from rollscope.store import TraceStore
from rollscope.trajectory import tokens
from rollscope.trajectory.decoders import load_decoder
from tests.agentloops.real_models import model_dir

pytestmark = pytest.mark.slow
KEY = "sk-proj-" + "Xi8tdMjHV6pmbBbwilTeT3BlbkFJ3UDnpdEwNNm6wVBpYM0o"
PASSWORD = "Vq7#pL2xK9mW"
REPLIES = [
    f"I found the key {KEY} and password={PASSWORD} in the config. "
    '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>',
    "The answer is 976.",
]
TOOLS = "tools:\n  - class_name: tests.runner.flip_tool.FlipCalculator\n    config: {type: native}\n"


def rollscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", params=[True, False], ids=["token2text", "ids only"])
def run(request, tmp_path_factory):
    """One trajectory of the gsm8k example with a scripted LLM whose first reply leaks both, in
    Qwen2.5's tokens (its real tokenizer: byte-level BPE, a secret split into many pieces)."""
    from rollscope.runner import session
    from rollscope.runner.config import load_config
    from rollscope.runner.runner import Runner

    root = tmp_path_factory.mktemp("leak")
    (root / "replies.json").write_text(json.dumps(REPLIES))
    (root / "tools.yaml").write_text(TOOLS)
    config = load_config(
        "gsm8k-calculator",
        [
            f"llm=scripted:{root / 'replies.json'}",
            f"tools={root / 'tools.yaml'}",
            f"model={model_dir('qwen2.5', root / 'qwen')}",
            "limit=1",
            f"trace_dir={root / 'traces'}",
            "sampling={temperature: 0, max_tokens: 200}",
            f"token2text={str(request.param).lower()}",
        ],
    )
    runner = Runner(config)
    runner.setup()
    asyncio.run(session.run_traced(runner))
    with TraceStore(root / "traces") as store:
        [record] = store.trajectories()
        record = store.get(record.id)
    return root, record, runner.tokenizer


def leaks(text: str) -> bool:
    return KEY in text or PASSWORD in text or KEY[8:24] in text


def test_the_replys_tokens_carry_neither_secret_in_any_stored_form(run):
    _, record, tokenizer = run
    first, second = [s for s in record.spans if s.kind == "llm"]
    ids = first.outputs["token_ids"]
    hidden = tokens.count(ids)
    assert hidden and first.attributes[semconv.REDACTED_TOKENS] == hidden
    assert not leaks(tokenizer.decode([t for t in ids if t != semconv.REDACTED_ID]))
    assert not leaks(tokens.decode(tokenizer, ids)) and "[REDACTED]" in tokens.decode(tokenizer, ids)
    assert "61 * 16" in tokens.decode(tokenizer, ids)  # only the secrets' tokens
    # the next turn's prompt holds the reply: built on the stored one, it carries no secret either
    prompt = record.prompts.whole_inputs(second)
    assert tokens.count(prompt["prompt_ids"]) == hidden
    assert not leaks(tokens.decode(tokenizer, prompt["prompt_ids"]))
    if "response_text" in first.outputs:  # token2text
        assert not leaks(first.outputs["response_text"]) and not leaks("".join(first.outputs["token_texts"]))
        assert not leaks(prompt["prompt_text"]) and not leaks(record.prompts.added_text(second))
    run_span = next(s for s in record.spans if s.kind == "agent")
    assert not leaks(tokens.decode(tokenizer, run_span.outputs["response_ids"]))


def test_what_readers_and_exports_show_carries_neither(run):
    root, record, _ = run
    shown = rollscope("traces", "show", record.id, "--dir", str(root / "traces"), "--json")
    assert shown.returncode == 0, shown.stderr
    texts = [shown.stdout]
    for form in ("jsonl", "sft"):
        exported = rollscope("export", "--format", form, "--dir", str(root / "traces"), str(root / f"{form}.jsonl"))
        assert exported.returncode == 0, exported.stderr
        texts.append((root / f"{form}.jsonl").read_text())
    assert all(not leaks(text) for text in texts) and str(semconv.REDACTED_ID) in texts[0]
    tokens_shown = rollscope("traces", "show", record.id, "--dir", str(root / "traces"), "--tokens")
    assert tokens_shown.returncode == 0 and not leaks(tokens_shown.stdout)
    hidden = tokens.count(next(s for s in record.spans if s.kind == "llm").outputs["token_ids"])
    assert f"{hidden} redacted (they" in tokens_shown.stdout and "[REDACTED]" in tokens_shown.stdout


def test_a_reader_decoding_ids_shows_the_secret_redacted(run):
    """With token2text off the viewer decodes the ids where it reads them (``store.text``)."""
    from rollscope.trajectory.text import with_text

    _, record, tokenizer = run
    first = next(s for s in record.spans if s.kind == "llm")
    first.outputs.pop("response_text", None)
    assert with_text(record, load_decoder(tokenizer.name_or_path)) >= 1
    assert "[REDACTED]" in first.outputs["response_text"] and not leaks(first.outputs["response_text"])


def test_a_replay_from_the_record_refuses_the_turn_whose_tokens_were_redacted(run):
    root, record, _ = run
    out = rollscope("replay", record.id, "--dir", str(root / "traces"), "--check")
    assert out.returncode != 0
    assert "model turn 0" in out.stderr and "carried a secret" in out.stderr and "--from-turn 0" in out.stderr
