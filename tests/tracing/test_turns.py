"""Long trajectories: each llm turn stored as what it adds to the turn before, every prompt read
back whole (rollscope/tracing/_turns.py, rollscope/trajectory/turns.py), with Qwen's real vocabulary."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

import pytest

from rollscope import semconv, tracing
from rollscope.agentloops.llm_client import TracedLLMClient
from rollscope.semconv import PROMPT_BASE, PROMPT_CONTINUES, PROMPT_IDS_ADDED, PROMPT_UNRESOLVED
from rollscope.store.reader import TraceStore
from rollscope.store.schema import decode_payload
from rollscope.tracing.backends import register_backend
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.trajectory import tokens
from tests.agentloops.real_models import model_dir


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir("qwen2.5", tmp_path_factory.mktemp("qwen")))


class Server:
    """The LLM server, a test double: a reply of random tokens of the real vocabulary, with
    log-probs, optionally ending in the first bytes of a character whose rest the loop adds."""

    def __init__(self, seed: int = 0, tail: list[int] | None = None) -> None:
        self.rng, self.tail = random.Random(seed), tail or []

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        ids = [self.rng.randrange(200, 150_000) for _ in range(30)] + self.tail
        return {"token_ids": ids, "log_probs": [round(-self.rng.random(), 4) for _ in ids], "stop_reason": "stop"}


def run_loop(
    client, qwen, turns: int, rewrite_at: set[int] = frozenset(), mutate: bool = False, split: list[int] | None = None
) -> list[list[int]]:
    """A multi-turn loop as verl's ToolAgentLoop runs one: the prompt list extended in place by
    the reply and a tool's answer; at ``rewrite_at`` its context is cut (a loop that summarises);
    ``split``: the rest of a character the reply began. Returns each turn's prompt as passed."""
    passed: list[list[int]] = []

    async def main():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt = qwen.encode("<|im_start|>system\nYou are a careful agent. é 🦜<|im_end|>\n")
            for turn in range(turns):
                passed.append(list(prompt))
                out = await client.generate(f"r{turn}", prompt_ids=prompt, sampling_params={"temperature": 1.0})
                if mutate:
                    prompt[0] = 7  # after the call: the recorded prompt is what was passed
                prompt += out["token_ids"]
                prompt += (split or []) + qwen.encode(f"<|im_start|>user\n<tool_response>{turn} ✓ 温度</tool_response>")
                if turn in rewrite_at:
                    prompt[:] = prompt[:5] + prompt[-40:]

    asyncio.run(main())
    return passed


def llm_spans(trace_dir):
    """The trajectory's llm spans in order, as the reader returns them (each turn as stored), and
    its ``Prompts``, which makes any of them whole."""
    [t] = TraceStore(trace_dir).trajectories()
    return sorted((s for s in t.spans if s.kind == "llm"), key=lambda s: s.start_ns), t.prompts


def stored_inputs(trace_dir) -> list[dict]:
    """The llm spans' inputs as the shard holds them (not resolved by the reader)."""
    out = []
    for shard in Path(trace_dir).rglob("*.rstrace"):
        db = sqlite3.connect(shard)
        rows = db.execute("SELECT payload FROM spans WHERE kind = 'llm' ORDER BY start_ns").fetchall()
        out += [decode_payload(r[0])["inputs"] for r in rows]
    return out


def test_every_prompt_of_a_long_trajectory_reads_back_whole_with_its_text_exact(trace_dir, qwen):
    """40 turns, the context cut twice mid-way, a character split between a reply and the tool
    answer after it: each turn's ids and text read back exactly as passed; each continuing turn is
    stored as its added tokens, so a late turn's row is no bigger than an early one's."""
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)
    char = qwen.encode("🦜")
    assert len(char) > 1  # (bytes of one character over several tokens)
    passed = run_loop(TracedLLMClient(Server(tail=char[:1]), qwen), qwen, 40, rewrite_at={14, 27}, split=char[1:])
    assert tracing.flush_tracing(60)
    spans, prompts = llm_spans(trace_dir)
    assert len(spans) == 40
    for span, prompt in zip(spans, passed, strict=True):
        assert prompts.ids(span) == prompt and prompts.length(span) == len(prompt)
        assert prompts.text(span) == qwen.decode(prompt)
        assert span.attributes["gen_ai.usage.input_tokens"] == len(prompt)
        whole = prompts.whole_inputs(span)
        assert whole["prompt_ids"] == prompt and PROMPT_BASE not in whole and PROMPT_IDS_ADDED not in whole
    assert "🦜" in prompts.text(spans[-1]).split("<tool_response>")[-2]  # (the split character, whole)
    assert prompts.added_text(spans[-1]) == qwen.decode(passed[-1])[len(qwen.decode(passed[-2])) :]
    stored = stored_inputs(trace_dir)
    whole = [i for i, s in enumerate(stored) if PROMPT_BASE not in s]
    assert whole == [0, 15, 28]  # the first turn and the two after a cut
    sizes = [len(str(s)) for s in stored]
    assert sizes[39] < 2 * sizes[5]
    assert spans[39].attributes[PROMPT_CONTINUES]["span"] == spans[38].id
    from rollscope.viewer.server import Viewer

    [t] = TraceStore(trace_dir).trajectories()
    status, _, body = Viewer(str(trace_dir)).handle(f"/t/{t.id}")
    page = body.decode() if isinstance(body, bytes) else body
    assert status == 200  # each continuing turn shows what it added, not the whole context again
    assert page.count("tokens of an earlier turn") == 37
    assert page.count("You are a careful agent") < 40  # (the system prompt: drawn with the 3 whole prompts, not 40)


def test_a_prompt_changed_after_the_call_is_recorded_as_it_was_at_the_call(trace_dir, qwen):
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True, sidecar=False)
    passed = run_loop(TracedLLMClient(Server(), qwen), qwen, 6, mutate=True)
    assert tracing.flush_tracing(60)
    spans, prompts = llm_spans(trace_dir)
    assert [prompts.ids(s) for s in spans] == passed
    assert passed[1][0] == 7 and spans[0].inputs["prompt_ids"][0] != 7


class Collected(TrajectoryBackend):
    """A backend that writes whole trajectories, as Weave's, MLflow's and OpenTelemetry's do."""

    name = "collected"
    written: list = []

    def write(self, trajectory, spans):
        Collected.written.append((trajectory, spans))


def test_a_backend_writing_whole_calls_gets_every_prompt_whole(trace_dir, qwen):
    register_backend("collected", Collected)
    Collected.written.clear()
    tracing.init_tracing(backend=["local", "collected"], trace_dir=str(trace_dir), token2text=True, sidecar=False)
    passed = run_loop(TracedLLMClient(Server(), qwen), qwen, 12, rewrite_at={6})
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    [(_, spans)] = Collected.written
    llm = sorted((s for s in spans if s.kind == "llm"), key=lambda s: s.start_ns)
    assert [s.inputs["prompt_ids"] for s in llm] == passed
    assert [s.inputs["prompt_text"] for s in llm] == [qwen.decode(p) for p in passed]


def test_a_turn_whose_base_is_missing_keeps_what_it_added_and_says_why(trace_dir, qwen):
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)
    passed = run_loop(TracedLLMClient(Server(), qwen), qwen, 4)
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    second = llm_spans(trace_dir)[0][1].id
    for shard in Path(trace_dir).rglob("*.rstrace"):
        with sqlite3.connect(shard) as db:
            db.execute("DELETE FROM spans WHERE id = ?", (second,))
    spans, prompts = llm_spans(trace_dir)
    assert spans[0].inputs["prompt_ids"] == passed[0]
    for span in spans[1:]:
        assert (
            prompts.ids(span) is None and prompts.text(span) is None
        )  # the third continues the second, the fourth the third
        assert "prompt_ids" not in span.inputs and span.inputs[PROMPT_IDS_ADDED]
        assert (
            "not in the trace" in span.attributes[PROMPT_UNRESOLVED]
            or "could not be made whole" in span.attributes[PROMPT_UNRESOLVED]
        )


def test_a_turns_text_is_stored_only_where_redaction_changed_it(trace_dir, qwen):
    """Text that is what its ids decode to is decoded again where it is read; a tool answer
    holding a secret is stored as redacted, its tokens as ``REDACTED_ID`` (in the turn that adds
    them and every later prompt built on it), and the prompts read back show it redacted."""
    secret = "ghp_" + "R7mK2xQ9vL4nP8sT3wY6zA1bC5dE0fG2hJ4k"
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)
    passed: list[list[int]] = []

    async def main():
        client = TracedLLMClient(Server(), qwen)
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt = qwen.encode("<|im_start|>system\nYou are a careful agent.<|im_end|>\n")
            for turn in range(4):
                passed.append(list(prompt))
                out = await client.generate("r", prompt_ids=prompt, sampling_params={})
                answer = f"token={secret}" if turn == 1 else f"result {turn}"
                prompt += out["token_ids"] + qwen.encode(f"<tool_response>{answer}</tool_response>")

    asyncio.run(main())
    assert tracing.flush_tracing(60)
    stored = stored_inputs(trace_dir)
    assert [s[PROMPT_BASE].get("text") for s in stored[1:]] == ["ids", None, "ids"]
    assert "[REDACTED]" in stored[2]["prompt_text_added"] and secret not in str(stored)
    spans, prompts = llm_spans(trace_dir)
    for turn, (span, prompt) in enumerate(zip(spans, passed, strict=True)):
        ids = prompts.ids(span)
        hidden = [i for i, token in enumerate(ids) if token == semconv.REDACTED_ID]
        assert len(ids) == len(prompt) and [t for i, t in enumerate(prompt) if i not in hidden] == [
            t for t in ids if t != semconv.REDACTED_ID
        ]
        assert bool(hidden) == (turn >= 2) and secret not in tokens.decode(qwen, ids)
        if hidden:  # the secret's own tokens, and no more than the token before and after it
            assert hidden == list(range(hidden[0], hidden[-1] + 1)) and secret in qwen.decode(
                prompt[hidden[0] : hidden[-1] + 1]
            )
            assert secret not in qwen.decode(prompt[hidden[0] + 1 : hidden[-1] + 1]) + qwen.decode(
                prompt[hidden[0] : hidden[-1]]
            )
        assert span.attributes.get(semconv.REDACTED_TOKENS) == (len(hidden) if turn == 2 else None)
    assert prompts.text(spans[1]) == qwen.decode(passed[1])
    for span, prompt in zip(spans[2:], passed[2:], strict=True):
        assert secret not in prompts.text(span) and secret not in (prompts.added_text(span) or "")
        assert prompts.text(span) == qwen.decode(prompt).replace(secret, "[REDACTED]")


def test_every_reader_gets_each_prompt_whole(trace_dir, qwen, tmp_path):
    """Through ``traces show --json`` (the CLI a user runs), after ``traces compact --retain`` has
    rewritten the shards around the kept groups, and with token2text off (ids only)."""
    import json
    import subprocess
    import sys

    from rollscope.store.retention import parse_policy, retain

    tracing.init_tracing(trace_dir=str(trace_dir), token2text=False)
    for sample in range(4):  # step 1's groups, which retention drops (none has a tool error)
        with tracing.rollout_trace_attr(step=1, sample_index=sample):
            tracing.set_reward(0.0)
    passed = run_loop(TracedLLMClient(Server(), qwen), qwen, 12, rewrite_at={5})
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    [long_] = [t for t in TraceStore(trace_dir).trajectories() if t.num_llm_calls == 12]
    done = retain(trace_dir, parse_policy("tool_error,sample=0"), step=1)
    assert done.summary["kept_groups"] == 0 and [t.id for t in TraceStore(trace_dir).trajectories()] == [long_.id]
    shown = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "show", long_.id, "--dir", str(trace_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    llm = sorted((s for s in json.loads(shown.stdout)["spans"] if s["kind"] == "llm"), key=lambda s: s["start_ns"])
    assert [s["inputs"]["prompt_ids"] for s in llm] == passed
    assert all("prompt_base" not in s["inputs"] for s in llm)


def test_a_key_whose_body_crosses_a_turn_boundary_is_redacted_in_every_prompt(trace_dir, qwen):
    """A tool streaming a private key in two chunks: the first ends one turn's prompt (its block
    unterminated), the rest begins the next turn's added tokens. Each continuation is scanned with
    the context before it, so no line of the key's body reads in any prompt made whole."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()
    body = pem.splitlines()[1:-1]
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)

    async def main():
        client = TracedLLMClient(Server(), qwen)
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt = qwen.encode("<|im_start|>user\nread the key file<|im_end|>\n")
            for chunk in (pem[: len(pem) // 2], pem[len(pem) // 2 :], "done"):
                out = await client.generate("r", prompt_ids=prompt, sampling_params={})
                prompt += out["token_ids"] + qwen.encode(f"<tool_response>{chunk}</tool_response>")
            await client.generate("r", prompt_ids=prompt, sampling_params={})

    asyncio.run(main())
    assert tracing.flush_tracing(60)
    spans, prompts = llm_spans(trace_dir)
    texts = [prompts.text(s) for s in spans]
    assert len(texts) == 4 and all(isinstance(t, str) for t in texts)
    assert [sum(line in t for line in body) for t in texts] == [0, 0, 0, 0]
    assert "[REDACTED]" in texts[2] and "[REDACTED]" in texts[3]
    assert [sum(line in tokens.decode(qwen, prompts.ids(s)) for line in body) for s in spans] == [0, 0, 0, 0]


def test_a_tokenizer_path_pointing_at_another_vocabulary_shows_ids_and_says_so(trace_dir, qwen, tmp_path):
    """The path a trace names its tokenizer by, re-pointed to another model after the run (a
    reused ``/models/current``): readers in a fresh process (``traces show``, the viewer) decode
    nothing with it, and say why; the same path holding the same vocabulary decodes as before."""
    import json
    import shutil
    import subprocess
    import sys

    from transformers import AutoTokenizer

    current = tmp_path / "models" / "current"
    shutil.copytree(qwen.name_or_path, current)
    tokenizer = AutoTokenizer.from_pretrained(str(current))
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)
    run_loop(TracedLLMClient(Server(), tokenizer), tokenizer, 4)
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    stored = stored_inputs(trace_dir)
    assert stored[1][PROMPT_BASE]["text"] == "ids" and stored[1][PROMPT_BASE]["vocab"]

    def show(*extra: str) -> subprocess.CompletedProcess:
        [t] = TraceStore(trace_dir).trajectories()
        return subprocess.run(
            [sys.executable, "-m", "rollscope.cli", "traces", "show", t.id, "--dir", str(trace_dir), *extra],
            capture_output=True,
            text=True,
            timeout=120,
        )

    same = show("--json")
    llm = [s for s in json.loads(same.stdout)["spans"] if s["kind"] == "llm"]
    assert all("prompt_text" in s["inputs"] for s in llm) and "not the one" not in same.stderr
    shutil.rmtree(current)
    model_dir("llama3.1", current)  # (another model's tokenizer at the same path)
    shown = show()
    assert shown.returncode == 0 and "is not the one this trace was recorded with" in " ".join(shown.stdout.split())
    whole = show("--json")
    llm = sorted((s for s in json.loads(whole.stdout)["spans"] if s["kind"] == "llm"), key=lambda s: s["start_ns"])
    assert "prompt_text" in llm[0]["inputs"]  # (stored as text: nothing to decode)
    assert all("prompt_text" not in s["inputs"] and s["inputs"]["prompt_ids"] for s in llm[1:])
    from rollscope.trajectory.decoders import load_decoder
    from rollscope.viewer.server import Viewer

    load_decoder.cache_clear()  # (as a viewer started after the path was re-pointed)
    [t] = TraceStore(trace_dir).trajectories()
    status, _, page = Viewer(str(trace_dir)).handle(f"/t/{t.id}")
    assert status == 200 and b'id="tokenizer-changed"' in page
