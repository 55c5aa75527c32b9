"""The server clients' side of vLLM's and SGLang's wire formats, against local stand-ins that answer
in those formats (the real servers: tests/llm/test_vllm_server.py, test_sglang_server.py), and
their errors when a server is down or answers garbage."""

import asyncio

import pytest

from rollscope.llm.base import LLMServerError
from rollscope.llm.openai_compat import OpenAICompatibleLLM
from rollscope.llm.sglang import SGLangLLM
from tests.engines import free_port
from tests.llm.stand_in import StandInServer

PARAMS = {"temperature": 0.5, "top_p": 0.9, "top_k": 20, "max_tokens": 7, "stop": ["</tool_call>"]}


def vllm_answer(path, body):
    # vLLM >= 0.10.2 with return_token_ids / return_tokens_as_token_ids, as rollscope asks for
    return {
        "choices": [
            {
                "text": "ab",
                "token_ids": [5, 6, 7],
                "finish_reason": "stop",
                "logprobs": {
                    "tokens": ["token_id:5", "token_id:6", "token_id:7"],
                    "token_logprobs": [-0.5, -0.25, -0.125],
                },
            }
        ]
    }


def test_openai_client_sends_token_ids_and_reads_ids_and_logprobs():
    with StandInServer(vllm_answer) as server:
        llm = OpenAICompatibleLLM(server.url + "/v1", model="m")
        out = asyncio.run(llm.generate("r1", prompt_ids=[1, 2, 3], sampling_params=PARAMS))
    assert out.token_ids == [5, 6, 7] and out.log_probs == [-0.5, -0.25, -0.125]
    assert out.extra_fields == {"finish_reason": "stop", "retokenized": False}
    path, body = server.requests[0]
    assert path == "/v1/completions"
    assert body["prompt"] == [1, 2, 3] and body["model"] == "m"
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["top_k"]) == (7, 0.5, 0.9, 20)
    assert body["stop"] == ["</tool_call>"] and body["include_stop_str_in_output"] is True


def test_openai_ids_from_token_id_strings_when_token_ids_are_absent():
    def answer(path, body):
        reply = vllm_answer(path, body)
        del reply["choices"][0]["token_ids"]
        return reply

    with StandInServer(answer) as server:
        out = asyncio.run(OpenAICompatibleLLM(server.url, model="m").generate("r", prompt_ids=[1], sampling_params={}))
    assert out.token_ids == [5, 6, 7]


def test_sglang_client_native_generate():
    def answer(path, body):
        return {
            "text": "xy",
            "output_ids": [9, 8],
            "meta_info": {
                "finish_reason": {"type": "length"},
                "output_token_logprobs": [[-1.0, 9, "x"], [-2.0, 8, "y"]],
            },
        }

    with StandInServer(answer) as server:
        out = asyncio.run(SGLangLLM(server.url).generate("rid", prompt_ids=[4, 5], sampling_params=PARAMS))
    assert out.token_ids == [9, 8] and out.log_probs == [-1.0, -2.0]
    assert out.extra_fields == {"finish_reason": "length"}
    path, body = server.requests[0]
    assert path == "/generate" and body["input_ids"] == [4, 5] and body["return_logprob"] is True
    assert body["sampling_params"] == {
        "max_new_tokens": 7,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "stop": ["</tool_call>"],
    }


def test_sglang_client_holds_tool_calls_to_their_schemas_with_a_structural_tag():
    """SGLang's native API takes xgrammar's structural tag as a JSON string in ``sampling_params``:
    one structure per tool, opened by the hermes tag and the tool's name, its arguments' schema."""
    import json

    from rollscope.semconv import TOOL_SCHEMAS
    from rollscope.tools.builtin.calculator import SCHEMA

    def answer(path, body):
        return {
            "output_ids": [9],
            "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-1.0, 9, "x"]]},
        }

    with StandInServer(answer) as server:
        asyncio.run(SGLangLLM(server.url).generate("rid", prompt_ids=[4], sampling_params={TOOL_SCHEMAS: [SCHEMA]}))
    tag = json.loads(server.requests[0][1]["sampling_params"]["structural_tag"])
    [structure] = tag["structures"]
    assert tag["type"] == "structural_tag" and tag["triggers"] == ["<tool_call>"]
    assert (
        structure["begin"] == '<tool_call>{"name": "calculator", "arguments": ' and structure["end"] == "}</tool_call>"
    )
    assert (
        structure["schema"]["properties"]["expression"]["pattern"]
        == SCHEMA["function"]["parameters"]["properties"]["expression"]["pattern"]
    )
    assert structure["schema"]["additionalProperties"] is False


@pytest.mark.parametrize("client", [OpenAICompatibleLLM, SGLangLLM])
def test_server_down_is_one_clear_error(client):
    url = f"http://127.0.0.1:{free_port()}"
    llm = client(url, model="m") if client is OpenAICompatibleLLM else client(url)
    with pytest.raises(LLMServerError, match=rf"{url}/\S+: cannot reach the server"):
        asyncio.run(llm.generate("r", prompt_ids=[1], sampling_params={}))


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"<html>oops</html>", "not JSON"),
        ({"choices": []}, "no choices"),
        ({"choices": [{"x": 1}]}, "neither token ids"),
    ],
)
def test_openai_garbage_answers_are_clear_errors(reply, message):
    with StandInServer(lambda path, body: reply) as server, pytest.raises(LLMServerError, match=message):
        asyncio.run(OpenAICompatibleLLM(server.url, model="m").generate("r", prompt_ids=[1], sampling_params={}))


def test_sglang_garbage_answer_is_a_clear_error():
    with (
        StandInServer(lambda path, body: {"text": "no ids"}) as server,
        pytest.raises(LLMServerError, match="no output_ids"),
    ):
        asyncio.run(SGLangLLM(server.url).generate("r", prompt_ids=[1], sampling_params={}))
