"""The embedded gemma-3-270m through llama.cpp, and llama-cpp-python's real server in front of it."""

import asyncio
import json
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from rollscope.bundled.make_data import arithmetic, code_tasks, search_questions
from rollscope.llm.base import LLMServerError
from rollscope.llm.embedded import CHUNK, EmbeddedLLM
from rollscope.llm.openai_compat import OpenAICompatibleLLM
from rollscope.tools.builtin.calculator import SCHEMA as CALCULATOR
from tests.engines import free_port

pytestmark = pytest.mark.slow
GREEDY = {"temperature": 0.0, "max_tokens": 40, "stop": ["</tool_call>"]}


@pytest.fixture(scope="module")
def llm():
    model = EmbeddedLLM(n_ctx=2048)
    yield model
    asyncio.run(model.close())


def prompt(llm, question, tools=(CALCULATOR,)):
    messages = [{"role": "user", "content": question}]
    return list(llm.tokenizer.apply_chat_template(messages, tools=list(tools), add_generation_prompt=True)["input_ids"])


def test_tokenizer_matches_llama_cpp_on_every_bundled_prompt(llm):
    texts = [row["prompt"][0]["content"] for row in arithmetic() + code_tasks() + search_questions()]
    texts += ["  indented\n\tcode:\n    return x**2  # ünïcödé 日本語 🙂", '<tool_call>{"a": [1, 2]}</tool_call>']
    for text in texts:
        assert llm.tokenizer.encode(text, add_special_tokens=False) == llm._llama.tokenize(
            text.encode(), add_bos=False, special=True
        ), text
        assert llm.tokenizer.decode(llm.tokenizer.encode(text, add_special_tokens=False)) == text


def test_greedy_tool_call_stops_at_the_closing_tag(llm):
    ids = prompt(llm, "Ava packs 61 boxes with 16 apples in each box. How many apples does Ava pack?")
    out = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params=GREEDY))
    text = llm.tokenizer.decode(out.token_ids)
    assert text.endswith("</tool_call>") and out.extra_fields["finish_reason"] == "stop"
    call = json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    assert call["name"] == "calculator"
    assert len(out.log_probs) == len(out.token_ids) and all(lp <= 0 for lp in out.log_probs)


def _log_softmax(logits):
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))


def test_logprobs_are_the_models_log_softmax_of_each_sampled_token(llm):
    from llama_cpp import Llama

    ids = prompt(llm, "What is 12 times 7?")
    sampled = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params={"temperature": 0.8, "max_tokens": 6}))
    greedy = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params={"temperature": 0.0, "max_tokens": 6}))
    # An independent context, fed the same decode batches (prompt in aligned chunks, then one token at a time).
    reference = Llama(str(llm.model_path), n_ctx=1024, n_threads=2, verbose=False)
    try:
        for out in (sampled, greedy):
            reference.reset()
            for start in range(0, len(ids), CHUNK):
                reference.eval(ids[start : start + CHUNK])
            rows = []
            for token in out.token_ids:
                rows.append(np.ctypeslib.as_array(reference._ctx.get_logits(), shape=(reference.n_vocab(),)).copy())
                reference.eval([token])
            log_softmax = _log_softmax(np.stack(rows))
            assert np.allclose(out.log_probs, [log_softmax[i, t] for i, t in enumerate(out.token_ids)], atol=1e-4)
            if out is greedy:
                assert out.token_ids == [int(row.argmax()) for row in log_softmax]
    finally:
        reference.close()
    # The logits_all=True path (one batched matmul for every position) agrees up to quantized-kernel noise.
    full = Llama(str(llm.model_path), n_ctx=1024, n_threads=2, logits_all=True, verbose=False)
    try:
        full.eval(ids + sampled.token_ids)
        log_softmax = _log_softmax(full.scores[len(ids) - 1 : len(ids) - 1 + len(sampled.token_ids)])
        assert np.allclose(sampled.log_probs, [log_softmax[i, t] for i, t in enumerate(sampled.token_ids)], atol=0.2)
    finally:
        full.close()


def test_concurrent_requests_give_what_sequential_ones_give(llm):
    questions = ["What is 3 + 4?", "How many legs do 5 cats have?", "What is 100 - 37?"]
    prompts = [prompt(llm, q) for q in questions]

    async def both():
        sequential = [await llm.generate(f"s{i}", prompt_ids=p, sampling_params=GREEDY) for i, p in enumerate(prompts)]
        together = await asyncio.gather(
            *(llm.generate(f"c{i}", prompt_ids=p, sampling_params=GREEDY) for i, p in enumerate(prompts))
        )
        return sequential, together

    sequential, together = asyncio.run(both())
    assert [o.token_ids for o in together] == [o.token_ids for o in sequential]


def test_outputs_do_not_depend_on_what_ran_before(llm):
    """The KV cache is reused across requests; the numbers must still be those of a fresh context."""
    first, other = prompt(llm, "What is 12 times 7?"), prompt(llm, "What is 12 times 8?")
    params = {"temperature": 0.0, "max_tokens": 8}
    llm._llama.reset()
    fresh = asyncio.run(llm.generate("a", prompt_ids=first, sampling_params=params))
    asyncio.run(llm.generate("b", prompt_ids=other, sampling_params=params))  # shares a long prefix
    again = asyncio.run(llm.generate("c", prompt_ids=first, sampling_params=params))
    longer = first + fresh.token_ids + prompt(llm, "And 13 times 7?")[1:]  # next turn of the conversation
    next_turn_cached = asyncio.run(llm.generate("d", prompt_ids=longer, sampling_params=params))
    llm._llama.reset()
    next_turn_fresh = asyncio.run(llm.generate("e", prompt_ids=longer, sampling_params=params))
    assert (again.token_ids, again.log_probs) == (fresh.token_ids, fresh.log_probs)
    assert (next_turn_cached.token_ids, next_turn_cached.log_probs) == (
        next_turn_fresh.token_ids,
        next_turn_fresh.log_probs,
    )


def test_length_limit_and_too_long_prompt(llm):
    ids = prompt(llm, "Tell me a long story.")
    out = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params={"temperature": 0.0, "max_tokens": 5}))
    assert len(out.token_ids) == 5 and out.extra_fields["finish_reason"] == "length"
    with pytest.raises(LLMServerError, match="exceeds n_ctx=2048"):
        asyncio.run(llm.generate("r", prompt_ids=[2] * 3000, sampling_params={}))


def test_llama_cpp_python_server_answers_like_the_embedded_model(llm):
    """llama-cpp-python's real server on 127.0.0.1: it refuses token-id prompts, so the client falls
    back to a text prompt and re-tokenizes; greedy output must equal the embedded model's."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(llm.model_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "2048",
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        ids = prompt(llm, "Ava packs 61 boxes with 16 apples in each box. How many apples does Ava pack?")
        client = OpenAICompatibleLLM(url, tokenizer=llm.tokenizer)
        remote = asyncio.run(client.generate("r", prompt_ids=ids, sampling_params=GREEDY))
        local = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params=GREEDY))
    finally:
        server.terminate()
        server.wait(10)
    assert client.text_prompts and remote.extra_fields["retokenized"]
    assert client.model.endswith(".gguf")
    assert llm.tokenizer.decode(remote.token_ids) == llm.tokenizer.decode(local.token_ids).removesuffix(
        "</tool_call>"
    ) or llm.tokenizer.decode(remote.token_ids) == llm.tokenizer.decode(local.token_ids)


def test_constrained_tool_calls_match_a_tools_schema_even_at_high_temperature(llm):
    """Sampled hot (temperature 1.5) on 10 word problems: unconstrained, the 270M model writes
    broken or unknown calls; held to the tools' schemas (the grammar the embedded model builds from
    them) every reply is a call to a real tool with schema-valid arguments (the calculator's
    expression arithmetic only), or plain text with no call in it — or a call the token limit cut
    (which no grammar prevents: hot, an expression can run past 48 tokens). A string argument that
    holds the closing tag (``{"answer": "</tool_call>"}``) does not end the call there."""
    import re

    from verl.tools.schemas import OpenAIFunctionToolSchema

    from rollscope.semconv import TOOL_SCHEMAS
    from rollscope.tools.builtin.answer_checker import AnswerCheckerTool
    from rollscope.tools.schema import check_arguments

    tools = [CALCULATOR, AnswerCheckerTool({}).tool_schema.model_dump(exclude_none=True)]
    schemas = {t["function"]["name"]: OpenAIFunctionToolSchema.model_validate(t) for t in tools}

    def verdict(text, stop_reason, constrained):
        """'call' (valid), 'text' (no tool call), 'cut' (under the grammar: a call to a real tool
        the token limit ended), or 'broken'."""
        if not text.startswith("<tool_call>"):
            return "text" if "<tool_call>" not in text else "broken"
        if constrained and stop_reason == "length" and not text.endswith("</tool_call>"):
            named = re.match(r'<tool_call>\{\s*"name"\s*:\s*"(\w+)"', text)
            return "cut" if named and named.group(1) in schemas else "broken"
        try:
            call = json.loads(text.removeprefix("<tool_call>").removesuffix("</tool_call>"))
        except ValueError:
            return "broken"
        schema = schemas.get(call.get("name")) if isinstance(call, dict) else None
        if schema is None or check_arguments(schema, call.get("arguments")):
            return "broken"
        expression = call["arguments"].get("expression")
        return "broken" if expression is not None and not re.fullmatch(r"[0-9 .+*/%()-]+", expression) else "call"

    free, constrained = [], []
    for row in arithmetic()[:10]:
        ids = prompt(llm, row["prompt"][0]["content"], tools)
        for into, extra in ((free, {}), (constrained, {TOOL_SCHEMAS: tools})):
            params = {"temperature": 1.5, "max_tokens": 48, "stop": ["</tool_call>"], **extra}
            out = asyncio.run(llm.generate("r", prompt_ids=ids, sampling_params=params))
            into.append(verdict(llm.tokenizer.decode(out.token_ids), out.stop_reason, into is constrained))
    assert "broken" not in constrained and constrained.count("call") + constrained.count("cut") >= 5, constrained
    assert free.count("broken") >= 2, free  # what the grammar takes away
