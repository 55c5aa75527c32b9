"""Redaction, truncation, token2text and JSON shaping: checked in the bytes that reach the store."""

import asyncio
import json
import sqlite3

import pytest

from rollscope import tracing
from rollscope.store.schema import SHARD_SUFFIX, decode_payload
from rollscope.tracing._redaction import REDACTED, Redactor

PLANTED = "sk-live-0123456789abcdefPLANTED"


def _all_stored_text(trace_dir) -> str:
    """Every byte of every shard, with compressed payloads inflated."""
    chunks = []
    for shard in trace_dir.glob(f"*{SHARD_SUFFIX}*"):
        chunks.append(shard.read_bytes().decode("latin-1"))
    for shard in trace_dir.glob(f"*{SHARD_SUFFIX}"):
        db = sqlite3.connect(shard)
        for (blob,) in db.execute("SELECT payload FROM spans"):
            chunks.append(json.dumps(decode_payload(blob)))
        for row in db.execute("SELECT attributes, error_message FROM trajectories"):
            chunks.extend(str(v) for v in row)
        db.close()
    return "\n".join(chunks)


class Tool:
    @tracing.rollout_trace_op(kind="tool")
    async def execute(self, instance_id, parameters, headers=None):
        if parameters.get("fail"):
            raise RuntimeError(f"upstream said: invalid key {parameters['api_key']}")
        return {"echo": parameters, "log": f"called with Authorization: Bearer {PLANTED}"}


def test_planted_secrets_never_reach_the_store(trace_dir, monkeypatch, read_store):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "env-secret-value-998877")
    tracing.init_tracing(trace_dir=str(trace_dir), redact_patterns=[r"internal-\d{6}"])
    tool = Tool()

    async def main():
        with tracing.rollout_trace_attr(step=1, sample_index=0, note=f"prompt mentions {PLANTED}"):
            await tool.execute("i1", {"api_key": PLANTED, "q": "password=hunter2hunter2", "n": 3})
            await tool.execute("i2", {"text": "the env value env-secret-value-998877 leaked"})
            await tool.execute("i3", {"text": "ticket internal-123456"}, headers={"Authorization": PLANTED})
            with tracing.trace_span("adhoc", inputs={"prompt": f"use {PLANTED}"}, note=PLANTED) as s:
                s.outputs = [PLANTED]
            with pytest.raises(RuntimeError):
                await tool.execute("i4", {"fail": True, "api_key": PLANTED})

    asyncio.run(main())
    [t] = read_store().trajectories()
    stored = _all_stored_text(trace_dir)
    for secret in (PLANTED, "hunter2hunter2", "env-secret-value-998877", "internal-123456"):
        assert secret not in stored
    assert stored.count(REDACTED) >= 6
    first = t.spans[0]
    assert first.inputs["parameters"]["api_key"] == REDACTED
    assert first.inputs["parameters"]["n"] == 3  # non-secret values intact
    assert first.inputs["parameters"]["q"] == f"password={REDACTED}"


def test_redactor_leaves_ordinary_token_fields_alone():
    r = Redactor(include_environment=False)
    assert not r.is_secret_key("max_tokens")
    assert not r.is_secret_key("prompt_token_ids")
    assert r.is_secret_key("api_key") and r.is_secret_key("OPENAI_API_KEY") and r.is_secret_key("token")
    assert r.text("4 tokens used") == "4 tokens used"


def test_bad_user_pattern_is_a_clear_error(trace_dir):
    with pytest.raises(ValueError, match=r"redact pattern '\(unclosed'"):
        tracing.init_tracing(trace_dir=str(trace_dir), redact_patterns=["(unclosed"])


def test_truncation_marks_what_was_cut(trace_dir, read_store):
    tracing.init_tracing(trace_dir=str(trace_dir), max_payload_chars=100)
    with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("big", inputs="x" * 5000) as s:
        s.outputs = {"text": "y" * 150, "short": "fine"}
    [span] = read_store().trajectories()[0].spans
    assert span.inputs == "x" * 100 + "…[truncated 4900 chars]"
    assert span.outputs == {"text": "y" * 100 + "…[truncated 50 chars]", "short": "fine"}


@pytest.mark.slow
def test_token2text_decodes_in_the_sidecar_with_the_owners_tokenizer_loaded_by_name(
    trace_dir, read_store, tiny_tokenizer, tmp_path
):
    """verl's tokenizer comes from a directory: the sidecar loads its own copy from there and
    decodes, the traced process's tokenizer decodes nothing (a decorated method's object's
    tokenizer, and the traced LLM client's)."""
    from transformers import AutoTokenizer

    from rollscope.agentloops.llm_client import TracedLLMClient

    tiny_tokenizer.save_pretrained(tmp_path / "tok")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    decoded_here = []
    for method in ("decode", "batch_decode", "convert_ids_to_tokens", "_decode"):
        real = getattr(tokenizer, method)
        setattr(tokenizer, method, lambda *a, _real=real, _m=method, **k: decoded_here.append(_m) or _real(*a, **k))
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True)  # with its sidecar (the default)

    class Client:
        def __init__(self):
            self.tokenizer = tokenizer

        @tracing.rollout_trace_op(kind="llm")
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return {"token_ids": tiny_tokenizer.encode("the answer is 42"), "turn_token_ids": [prompt_ids[0]]}

    class Server:  # what verl's LLM client answers: token ids
        async def generate(self, request_id, *, prompt_ids, sampling_params):
            return {"token_ids": tiny_tokenizer.encode("calculate 3 + 4")}

    prompt = tiny_tokenizer.encode("what is six times seven")

    async def main():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            await Client().generate("r1", prompt_ids=prompt, sampling_params={})
            await TracedLLMClient(Server(), tokenizer).generate("r2", prompt_ids=prompt, sampling_params={})

    asyncio.run(main())
    assert tracing.flush_tracing(60)
    decorated, leaf = read_store().trajectories()[0].spans
    assert decorated.inputs["prompt_text"] == leaf.inputs["prompt_text"] == "what is six times seven"
    assert decorated.outputs["response_text"] == "the answer is 42"
    assert decorated.outputs["turn_text"] == tiny_tokenizer.decode([prompt[0]])
    assert leaf.outputs["response_text"] == "calculate 3 + 4"
    assert "".join(leaf.outputs["token_texts"]) == "calculate 3 + 4"
    assert decoded_here == []  # all of it in the sidecar


def test_token2text_with_a_tokenizer_built_in_memory_decodes_in_the_traced_process(
    trace_dir, read_store, tiny_tokenizer
):
    """A tokenizer no directory holds cannot be loaded by the sidecar: given to init_tracing, it
    decodes where it is."""
    tracing.init_tracing(trace_dir=str(trace_dir), token2text=True, tokenizer=tiny_tokenizer)
    with tracing.rollout_trace_attr(step=0, sample_index=0), tracing.trace_span("llm.generate", kind="llm") as s:
        s.outputs = {"token_ids": tiny_tokenizer.encode("the answer is 42")}
    assert tracing.flush_tracing(60)
    [span] = read_store().trajectories()[0].spans
    assert span.outputs["response_text"] == "the answer is 42"


def test_long_values_shaped_in_a_deferred_block_are_redacted_together_and_truncated_after():
    from rollscope.tracing._payload import PayloadShaper

    class Counting(Redactor):
        scans = 0

        def texts(self, strings):
            Counting.scans += 1
            return super().texts(strings)

    shaper = PayloadShaper(Counting(include_environment=False), max_payload_chars=2000)
    prose = "The run went well and the reward was one. " * 30
    events = [
        {"prompt": prose + f'api_key = "sk-proj-Zq3Zq3Zq3Zq3Zq3Zq3Zq3Zq{i}"', "reply": {"text": prose * 2}}
        for i in range(5)
    ]
    with shaper.deferred():
        shaped = [shaper.shape(e) for e in events]
    assert Counting.scans < len(events) * 2  # (ten long values, a few to a scan)
    for i, one in enumerate(shaped):
        assert f"Zq3Zq{i}" not in one["prompt"] and one["prompt"].endswith(f'api_key = "{REDACTED}"')
        assert one["reply"]["text"] == (prose * 2)[:2000] + f"…[truncated {len(prose) * 2 - 2000} chars]"
    assert shaper.shape(events[0])["prompt"] == shaped[0]["prompt"]  # (the same, one string at a time)


def test_a_long_value_whose_redaction_fails_is_marked_never_stored_as_it_was():
    from rollscope.tracing._payload import PENDING_REDACTION, PayloadShaper

    class Failing(Redactor):
        def texts(self, strings):
            raise RuntimeError("secret rules could not be loaded")

    shaper = PayloadShaper(Failing(include_environment=False))
    with shaper.deferred():
        shaped = shaper.shape({"prompt": 'password = "hunter2hunter2" ' * 40, "n": 3})
    assert shaped == {"prompt": PENDING_REDACTION, "n": 3} and shaper.unredacted == 1
