"""rollscope's OpenAI-compatible client and ``rollscope run`` against vLLM's own server (its CPU
build, ``vllm_server``: tests.engines) serving the training demo's model: the token ids, log-probs
and finish reasons stored are the ones vLLM returned, the log-probs those of a Hugging Face forward
pass of the same weights at the same temperature; the model's hermes tool calls run; held to their
schemas, calls go as vLLM's structured outputs and every one of them parses."""

import pytest
from transformers import AutoTokenizer

from rollscope.llm.openai_compat import OpenAICompatibleLLM
from tests.llm import engine_runs

pytestmark = pytest.mark.slow


def test_the_client_gets_vllms_token_ids_and_the_sampled_distributions_log_probs(vllm_server, hf):
    tokenizer = AutoTokenizer.from_pretrained(vllm_server.model)
    outputs = engine_runs.check_the_client(
        lambda: OpenAICompatibleLLM(vllm_server.url, tokenizer=tokenizer), vllm_server.model, hf
    )
    assert all(out.extra_fields["retokenized"] is False for out in outputs)


@pytest.fixture(scope="module")
def runs(vllm_server, tmp_path_factory):
    """``rollscope run gsm8k-calculator`` against the server with the tools' constraint off and on."""
    return engine_runs.stored_runs(vllm_server.url, vllm_server.model, tmp_path_factory)


def test_rollscope_run_stores_the_tokens_log_probs_and_finish_reasons_vllm_returned(runs, hf):
    spans = engine_runs.check_stored_as_returned(runs, hf)
    assert all(s.outputs["extra_fields"]["retokenized"] is False for s in spans)


def test_the_models_hermes_tool_calls_run(runs):
    engine_runs.check_the_calls_run(runs)


def test_held_to_their_schemas_by_vllms_structured_outputs_every_call_parses_and_the_span_says_so(runs):
    engine_runs.check_every_held_call_parses(runs)
