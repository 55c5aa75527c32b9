"""rollscope's SGLang client and ``rollscope run --llm sglang:URL`` against SGLang's own server on the
CPU (``sglang_server``: tests.engines; ``make sglang``) serving the training demo's model: the token
ids, log-probs and finish reasons stored are the ones SGLang returned, the log-probs those of a
Hugging Face forward pass of the same weights at the same temperature; held to their schemas, tool
calls go as SGLang's structural tag and every one parses; what SGLang refuses is one line naming
its error, with the trajectory kept."""

import asyncio
import json

import pytest

from rollscope.llm.base import LLMServerError
from rollscope.llm.sglang import SGLangLLM
from rollscope.store import TraceStore
from tests.llm import engine_runs

pytestmark = pytest.mark.slow


def test_the_client_gets_sglangs_token_ids_and_the_sampled_distributions_log_probs(sglang_server, hf):
    engine_runs.check_the_client(lambda: SGLangLLM(sglang_server.url), sglang_server.model, hf)


@pytest.fixture(scope="module")
def runs(sglang_server, tmp_path_factory):
    """``rollscope run gsm8k-calculator`` against the server with the tools' constraint off and on."""
    return engine_runs.stored_runs(f"sglang:{sglang_server.url}", sglang_server.model, tmp_path_factory)


def test_rollscope_run_stores_the_tokens_log_probs_and_finish_reasons_sglang_returned(runs, hf):
    spans = engine_runs.check_stored_as_returned(runs, hf)
    assert all(s.attributes.get("rollscope.constrained") is None for s in spans)


def test_the_models_hermes_tool_calls_run(runs):
    engine_runs.check_the_calls_run(runs)


def test_held_to_their_schemas_by_sglangs_structural_tag_every_call_parses_and_the_span_says_so(runs):
    engine_runs.check_every_held_call_parses(runs)


def test_what_sglang_refuses_is_its_own_message_in_one_line(sglang_server):
    """A prompt longer than the served context: SGLang answers 400 with why, and that is the error."""
    client = SGLangLLM(sglang_server.url)
    with pytest.raises(LLMServerError) as caught:
        asyncio.run(client.generate("r", prompt_ids=[5] * 600, sampling_params={"max_tokens": 4}))
    message = str(caught.value)
    assert "\n" not in message and "SGLang" in message
    assert "longer than the model's context length (512 tokens)" in message and "{" not in message


def test_a_run_sglang_refuses_stops_naming_sglangs_error_and_keeps_the_trajectories(sglang_server, tmp_path):
    """Every prompt is over the context: the run stops with exit 3 (the server's answer) and SGLang's
    words in one line, and the trajectories it began are in the store: the one it refused an error
    with SGLang's words, any other one stopped with the run marked cancelled."""
    data = tmp_path / "long.jsonl"
    data.write_text(
        json.dumps(
            {"prompt": [{"role": "user", "content": "What is 1 + 1? " * 120}], "reward_model": {"ground_truth": "2"}}
        )
        + "\n"
    )
    traces = tmp_path / "traces"
    result = engine_runs.run_cli(
        "run",
        "gsm8k-calculator",
        "--llm",
        f"sglang:{sglang_server.url}",
        "--model",
        str(sglang_server.model),
        "--limit",
        "1",
        "--n",
        "2",
        "--dir",
        str(traces),
        f"dataset={data}",
    )
    assert result.returncode == 3, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("rollscope: error: SGLang at ") and "longer than the model's context length" in line
    with TraceStore(traces) as store:
        failed = store.trajectories(limit=None)
    refused = [t for t in failed if t.status == "error"]
    assert refused and {t.status for t in failed} <= {"error", "cancelled"}, [t.status for t in failed]
    assert all("longer than the model's context length" in (t.error_message or "") for t in refused), [
        t.error_message for t in refused
    ]


@pytest.mark.parametrize("example", ["gsm8k-calculator", "search-qa", "python-tasks"])
def test_each_bundled_example_runs_end_to_end_on_sglang(sglang_server, tmp_path, example):
    """The bundled examples, their own data, tools and rewards, with the model SGLang serves (the
    demo's, which knows none of these tasks: what is checked is that every trajectory runs and is
    stored with SGLang's tokens, not what it earns)."""
    traces = tmp_path / "traces"
    result = engine_runs.run_cli(
        "run",
        example,
        "--llm",
        f"sglang:{sglang_server.url}",
        "--model",
        str(sglang_server.model),
        "--limit",
        "2",
        "--dir",
        str(traces),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    with TraceStore(traces) as store:
        stored = [(t, t.spans) for t in store.trajectories(limit=None)]
    assert len(stored) == 2 and all(t.status == "ok" and t.reward is not None for t, _ in stored)
    for _, spans in stored:
        turns = [s for s in spans if s.kind == "llm"]
        assert turns and all(len(s.outputs["token_ids"]) == len(s.outputs["log_probs"]) > 0 for s in turns)
