import pytest

from rollscope.testing import compose_config, make_model_dir


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def verl_config(model_dir):
    return compose_config(model_dir)


@pytest.fixture(scope="session")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def build_loop(cls, config, tokenizer, llm, tools=()):
    """An agent loop as verl's worker builds one (call it inside the running event loop), the model's
    ``model_type`` included: it picks how verl joins a turn's tokens (Qwen's newline after a turn)."""
    from transformers import AutoConfig
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    model_type = AutoConfig.from_pretrained(config.actor_rollout_ref.model.path).model_type
    return cls(
        trainer_config=DictConfigWrap(config),
        server_manager=llm,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(list(tools)),
        hf_model_type=model_type,
    )


def with_overrides(config, **multi_turn):
    import copy

    cfg = copy.deepcopy(config)
    for key, value in multi_turn.items():
        cfg.actor_rollout_ref.rollout.multi_turn[key] = value
    return cfg


def call(name, **arguments):
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"
