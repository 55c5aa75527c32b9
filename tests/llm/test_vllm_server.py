"""rollscope's OpenAI-compatible client and ``rollscope run`` against vLLM's own server (its CPU
build, ``vllm_server``: tests.engines) serving the training demo's model: the token ids, log-probs
and finish reasons stored are the ones vLLM returned, the log-probs those of a Hugging Face forward
pass of the same weights at the same temperature; the model's hermes tool calls run; held to their
schemas, calls go as vLLM's structured outputs and every one of them parses."""

import asyncio

import pytest
from transformers import AutoTokenizer

from rollscope.llm.openai_compat import OpenAICompatibleLLM
from tests.llm.engine_runs import QUESTION, call_problems, cut_in_a_call, hf_log_probs, stored_runs

pytestmark = pytest.mark.slow


def test_the_client_gets_vllms_token_ids_and_the_sampled_distributions_log_probs(vllm_server, hf):
    tokenizer = AutoTokenizer.from_pretrained(vllm_server.model)
    prompt = list(tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True)["input_ids"])

    async def sample(temperature):
        client = OpenAICompatibleLLM(vllm_server.url, tokenizer=tokenizer)
        try:
            return await client.generate("r", prompt_ids=prompt, sampling_params={"temperature": temperature,
                                                                                  "max_tokens": 40})  # fmt: skip
        finally:
            await client.close()

    for temperature in (1.0, 0.7):
        out = asyncio.run(sample(temperature))
        assert out.extra_fields["retokenized"] is False and out.extra_fields["finish_reason"] in ("stop", "length")
        assert len(out.log_probs) == len(out.token_ids) > 0
        expected = hf_log_probs(hf, prompt, out.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(out.log_probs, expected, strict=True)) < 1e-4


@pytest.fixture(scope="module")
def runs(vllm_server, tmp_path_factory):
    """``rollscope run gsm8k-calculator`` against the server with the tools' constraint off and on."""
    return stored_runs(vllm_server.url, vllm_server.model, tmp_path_factory)


def test_rollscope_run_stores_the_tokens_log_probs_and_finish_reasons_vllm_returned(runs, hf):
    checked = 0
    assert len(runs[False]) == 16
    for record, spans in runs[False]:
        assert record.status == "ok"
        for span in (s for s in spans if s.kind == "llm"):
            prompt, tokens = span.inputs["prompt_ids"], span.outputs["token_ids"]
            assert span.outputs["extra_fields"]["finish_reason"] in ("stop", "length")
            assert span.outputs["extra_fields"]["retokenized"] is False
            expected = hf_log_probs(hf, prompt, tokens, 1.0)
            assert max(abs(a - b) for a, b in zip(span.outputs["log_probs"], expected, strict=True)) < 1e-4
            checked += 1
    assert checked >= 16


def test_the_models_hermes_tool_calls_run(runs):
    tools = [s for _, spans in runs[False] for s in spans if s.kind == "tool"]
    assert any(s.name == "CalculatorTool.execute" and s.status == "ok" for s in tools), [s.name for s in tools]


def test_held_to_their_schemas_every_call_parses_and_the_span_says_so(runs):
    """The structural tag (vLLM's structured outputs) holds each call the model opens to its tool's
    schema: no call fails to parse or names a tool that does not exist, as unconstrained ones may."""
    spans = [s for _, spans in runs[True] for s in spans]
    llm_spans = [s for s in spans if s.kind == "llm"]
    assert llm_spans and all(s.attributes.get("rollscope.constrained") == "tool_schemas" for s in llm_spans)
    assert any(s.kind == "tool" and s.name == "CalculatorTool.execute" for s in spans)
    cut = sum(cut_in_a_call(s) for s in llm_spans)
    problems = call_problems(spans)
    assert problems.count("malformed_call") <= cut and "unknown_tool" not in problems and "bad_arguments" not in problems

