"""The ``hf_cpu`` rollout server on its own (no Ray, no trainer): what it returns is what verl's
actor would compute for the same tokens, batched or not, and it serves the weights it was last given."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rollscope.cpu import UnsupportedOnCPU
from rollscope.cpu.demo_task import problems
from rollscope.cpu.rollout import HFCPUServer


def prompt_ids(tokenizer, question):
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def trainer_logprobs(model, prompt, tokens, temperature=1.0):
    """log p(token | prefix) as verl's actor computes it: one forward pass, logits / temperature."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()


def generate_all(server, prompts, **sampling):
    async def main():
        return await asyncio.gather(
            *(server.generate(f"r{i}", prompt_ids=p, sampling_params=dict(sampling)) for i, p in enumerate(prompts))
        )

    return asyncio.run(main())


@pytest.fixture(scope="module")
def tokenizer(demo_model):
    return AutoTokenizer.from_pretrained(demo_model)


def test_concurrent_requests_get_the_trainers_logprobs_of_their_own_tokens(demo_model, tokenizer):
    server = HFCPUServer(str(demo_model), prompt_length=64, response_length=24)
    model = AutoModelForCausalLM.from_pretrained(demo_model).eval()
    prompts = [prompt_ids(tokenizer, p["question"]) for p in problems()[:5]]
    prompts[1] = prompts[1][2:]  # prompts of different lengths share one left-padded batch
    outputs = generate_all(server, prompts, temperature=0.7, top_p=1.0, top_k=-1, max_tokens=20)
    for prompt, out in zip(prompts, outputs, strict=True):
        assert 1 <= len(out.token_ids) <= 20 and len(out.log_probs) == len(out.token_ids)
        assert out.token_ids[-1] == tokenizer.eos_token_id or len(out.token_ids) == 20
        assert tokenizer.eos_token_id not in out.token_ids[:-1]  # cut at the first end of turn
        expected = trainer_logprobs(model, prompt, out.token_ids, temperature=0.7)
        assert out.log_probs == pytest.approx(expected, abs=1e-4)
        assert out.extra_fields == {"global_steps": 0} and out.stop_reason == "completed"


def test_weights_loaded_at_a_sync_generate_the_next_requests(demo_model, tokenizer):
    server = HFCPUServer(str(demo_model), prompt_length=64, response_length=24)
    prompt = prompt_ids(tokenizer, problems()[0]["question"])
    model = AutoModelForCausalLM.from_pretrained(demo_model).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    version = asyncio.run(server.load_weights(dict(model.state_dict()), version=3))
    [out] = generate_all(server, [prompt], temperature=1.0, max_tokens=8)
    assert version == 3 and out.extra_fields["global_steps"] == 3
    assert out.log_probs == pytest.approx(trainer_logprobs(model, prompt, out.token_ids), abs=1e-4)


def test_greedy_requests_and_what_the_server_refuses(demo_model, tokenizer):
    server = HFCPUServer(str(demo_model), prompt_length=64, response_length=24)
    prompt = prompt_ids(tokenizer, problems()[0]["question"])
    first, second = generate_all(server, [prompt, prompt], temperature=0, max_tokens=12)
    assert first.token_ids == second.token_ids  # greedy: the same prompt, the same reply
    with pytest.raises(UnsupportedOnCPU, match="text only"):
        asyncio.run(server.generate("r", prompt_ids=prompt, sampling_params={}, image_data=[object()]))
    with pytest.raises(ValueError, match="weights not in the model"):
        asyncio.run(server.load_weights({"not.a.weight": torch.zeros(1)}))
