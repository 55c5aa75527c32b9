import pytest
import torch


@pytest.fixture(scope="module")
def hf(engine_model):
    """The engines' model as Hugging Face runs it, in fp32: the reference for their log-probs."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(engine_model, dtype=torch.float32).eval()
