import pytest

from rollscope.runner.config import RunConfigError, bundled, load_config


def test_bundled_examples_load_by_name():
    assert {"gsm8k-calculator", "python-tasks", "search-qa"} <= set(bundled())
    config = load_config("gsm8k-calculator", ["n=4", "sampling.temperature=0.2", "limit=3"])
    assert (config.n, config.limit, config.sampling["temperature"]) == (4, 3, 0.2)
    assert config.resolve(config.dataset).endswith("rollscope/bundled/data/arithmetic.jsonl")
    assert config.resolve(config.tools).endswith("rollscope/bundled/verl/gsm8k_tools.yaml")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["temperatur=0.2"], "unknown config key 'temperatur'"),
        (["sampling.temp=0.2"], "unknown sampling key 'temp'"),
        (["multi_turn.max_turns=2"], "unknown multi_turn key 'max_turns'"),
        (["n=two"], "n must be an integer"),
        (["n=0"], "n must be at least 1"),
        (["validate=maybe"], "validate must be true or false"),
        (["noequals"], "expected key=value"),
    ],
)
def test_bad_overrides_name_the_override(overrides, message):
    with pytest.raises(RunConfigError) as info:
        load_config("gsm8k-calculator", overrides)
    assert message in str(info.value)
    assert "override" in str(info.value)


def test_bad_file_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("dataset: x.jsonl\nconcurency: 3\n")
    with pytest.raises(RunConfigError, match=rf"{path}: unknown config key 'concurency'"):
        load_config(str(path))
    path.write_text("- a list\n")
    with pytest.raises(RunConfigError, match="a run config is a mapping"):
        load_config(str(path))
    with pytest.raises(RunConfigError, match="no such config file or bundled example"):
        load_config(str(tmp_path / "missing.yaml"))
