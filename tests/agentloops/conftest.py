import pytest

from tests.verl_env import compose_config, make_model_dir


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
