"""What the real-engine tests (test_vllm_server.py, test_sglang_server.py) share: the Hugging Face
reference for log-probs, ``rollscope run`` as a subprocess, and the two runs of the bundled
calculator example against an engine, with the tools' constraint off and on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from rollscope.store import TraceStore

QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]


def hf_log_probs(model, prompt_ids, token_ids, temperature):
    """log softmax(logits / T) of each token of ``token_ids`` after ``prompt_ids`` (what vLLM's
    ``processed_logprobs``, SGLang's log-probs and verl's actor compute)."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(token_ids)[:, None])[:, 0].tolist()


def hf_entropies(model, prompt_ids, token_ids, temperature):
    """The entropy (nats) of the model's distribution at each token of ``token_ids`` after
    ``prompt_ids``, of softmax(logits / T): what verl's actor computes beside its log-probs."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1] / temperature
    log_p = torch.log_softmax(logits, -1)
    return (-(log_p.exp() * log_p).sum(-1)).tolist()


def run_cli(*args):
    env = {**os.environ, "WANDB_ERROR_REPORTING": "false", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )


def stored_runs(llm: str, model: Path, tmp_path_factory) -> dict[bool, list]:
    """``rollscope run gsm8k-calculator --llm LLM`` on the training demo's problems (the model's own
    task), sampled at temperature 1, with the tools' constraint off and on: constrained -> [(the
    trajectory, its spans)]."""
    from rollscope.cpu import demo_task

    data = tmp_path_factory.mktemp("engine-data") / "problems.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in demo_task.dataset_rows(demo_task.problems(), "test")))
    found = {}
    for constrained in (False, True):
        traces = tmp_path_factory.mktemp(f"engine-run-{constrained}")
        result = run_cli(
            "run",
            "gsm8k-calculator",
            "--llm",
            llm,
            "--model",
            str(model),
            "--limit",
            "8",
            "--n",
            "2",
            "--dir",
            str(traces),
            "--quiet",
            f"dataset={data}",
            "reward=rollscope.bundled.rewards:calculator_drill",
            "sampling.temperature=1.0",
            "sampling.max_tokens=64",
            f"sampling.constrain_tool_calls={str(constrained).lower()}",
        )
        assert result.returncode == 0, result.stderr
        with TraceStore(traces) as store:
            found[constrained] = [(t, t.spans) for t in store.trajectories(limit=None)]
    return found


def check_the_client(make_client, model_dir, hf) -> list:
    """The token ids and log-probs of a client (``make_client()``) for a chat prompt at two
    temperatures are the sampled distribution's, ``log_softmax(logits / T)`` of a Hugging Face
    forward pass, within 1e-4; returns the two outputs."""
    import asyncio

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = list(tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True)["input_ids"])

    async def sample(temperature):
        client = make_client()
        try:
            return await client.generate(
                "r", prompt_ids=prompt, sampling_params={"temperature": temperature, "max_tokens": 40}
            )
        finally:
            await client.close()

    outputs = []
    for temperature in (1.0, 0.7):
        out = asyncio.run(sample(temperature))
        assert out.extra_fields["finish_reason"] in ("stop", "length")
        assert len(out.log_probs) == len(out.token_ids) > 0
        expected = hf_log_probs(hf, prompt, out.token_ids, temperature)
        assert max(abs(a - b) for a, b in zip(out.log_probs, expected, strict=True)) < 1e-4
        outputs.append(out)
    return outputs


def check_stored_as_returned(runs, hf) -> list:
    """Every unconstrained trajectory ok, each llm span's finish reason the engine's and its
    log-probs those of a Hugging Face forward pass at T=1 within 1e-4; returns the llm spans."""
    assert len(runs[False]) == 16
    checked = []
    for record, spans in runs[False]:
        assert record.status == "ok"
        for span in (s for s in spans if s.kind == "llm"):
            prompt, tokens = record.prompts.ids(span), span.outputs["token_ids"]
            assert span.outputs["extra_fields"]["finish_reason"] in ("stop", "length")
            expected = hf_log_probs(hf, prompt, tokens, 1.0)
            assert max(abs(a - b) for a, b in zip(span.outputs["log_probs"], expected, strict=True)) < 1e-4
            checked.append(span)
    assert len(checked) >= 16
    return checked


def check_the_calls_run(runs) -> None:
    tools = [s for _, spans in runs[False] for s in spans if s.kind == "tool"]
    assert any(s.name == "CalculatorTool.execute" and s.status == "ok" for s in tools), [s.name for s in tools]


def check_every_held_call_parses(runs) -> None:
    """Held to its tool's schema by the engine's structural tag, no call fails to parse or names a
    tool that does not exist, as unconstrained ones may; every llm span says it was constrained."""
    spans = [s for _, spans in runs[True] for s in spans]
    llm_spans = [s for s in spans if s.kind == "llm"]
    assert llm_spans and all(s.attributes.get("rollscope.constrained") == "tool_schemas" for s in llm_spans)
    assert any(s.kind == "tool" and s.name == "CalculatorTool.execute" for s in spans)
    cut = sum(cut_in_a_call(s) for s in llm_spans)
    problems = call_problems(spans)
    assert (
        problems.count("malformed_call") <= cut and "unknown_tool" not in problems and "bad_arguments" not in problems
    )


def call_problems(spans):
    """The kinds of the calls that could not run (``tool_call_error.*`` spans)."""
    return [s.attributes.get("tool.error_kind") for s in spans if s.name.startswith("tool_call_error.")]


def cut_in_a_call(span):
    """A reply cut while a call was open: at max_tokens, or at one of the example's stop strings
    ("\\n") written as JSON whitespace inside the call — the schema holds what the model writes,
    not where the sampler stops it (xgrammar's JSON allows a newline there, and its
    ``max_whitespace_cnt`` cannot be 0)."""
    text = span.outputs["response_text"]
    opened = text.rfind("<tool_call>") > text.rfind("</tool_call>")
    return span.outputs["extra_fields"]["finish_reason"] == "length" or (opened and text.endswith("\n"))
