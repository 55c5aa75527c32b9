"""verl's ppo_trainer config as a run composes it: Hydra once per verl installation and overrides,
then read back from rollscope's cache."""

import logging

import hydra
import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError

from rollscope.runner.trainer_config import compose_config


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "rollscope" / "verl-config"


def test_a_composition_is_kept_and_read_back_the_same_without_hydra(cache, tmp_path, monkeypatch):
    overrides = ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"]
    composed = compose_config(tmp_path / "model", overrides)
    (kept,) = cache.iterdir()

    def no_hydra(*args, **kwargs):
        raise AssertionError("composed again")

    monkeypatch.setattr(hydra, "compose", no_hydra)
    read = compose_config(tmp_path / "model", overrides)
    assert OmegaConf.to_container(read) == OmegaConf.to_container(composed)
    assert read.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 3
    assert read.actor_rollout_ref.model.path == str(tmp_path / "model")
    with pytest.raises(ConfigAttributeError):  # struct, as Hydra composes it: a misspelled key is an error
        read.actor_rollout_ref.rollout.no_such_key  # noqa: B018
    assert list(cache.iterdir()) == [kept]


def test_other_overrides_are_another_composition(cache, tmp_path):
    a = compose_config(tmp_path / "model", ["actor_rollout_ref.rollout.response_length=64"])
    b = compose_config(tmp_path / "model", ["actor_rollout_ref.rollout.response_length=128"])
    assert (a.actor_rollout_ref.rollout.response_length, b.actor_rollout_ref.rollout.response_length) == (64, 128)
    assert len(list(cache.iterdir())) == 2


@pytest.mark.parametrize("content", ["a: [unclosed", "- a list\n", "\x00\x01 not yaml: {{", "trainer: {when: 2026-12-05}\n",
                                     "{1: one}\n"])
def test_a_kept_composition_that_cannot_be_read_is_said_and_composed_again(cache, tmp_path, content, caplog):
    composed = compose_config(tmp_path / "model")
    (kept,) = cache.iterdir()
    kept.write_text(content)
    with caplog.at_level(logging.WARNING, logger="rollscope"):
        again = compose_config(tmp_path / "model")
    assert f"{kept} could not be read" in caplog.text and "composing it again" in caplog.text
    assert OmegaConf.to_container(again) == OmegaConf.to_container(composed)
    assert OmegaConf.to_container(compose_config(tmp_path / "model")) == OmegaConf.to_container(composed)  # rewritten


def test_a_cache_that_cannot_be_written_costs_only_the_composition(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = compose_config(tmp_path / "model")
    assert config.actor_rollout_ref.model.path == str(tmp_path / "model")
