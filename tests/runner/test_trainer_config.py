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


@pytest.mark.parametrize(
    "content", ["a: [unclosed", "- a list\n", "\x00\x01 not yaml: {{", "trainer: {when: 2026-12-05}\n", "{1: one}\n"]
)
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


def test_a_kept_composition_is_used_only_as_this_caches_own_record_whole(cache, tmp_path, caplog):
    """A tampered value (3 turns made 1), an unrelated mapping, a link to a system file, to
    /dev/zero and to a FIFO: each said and composed again, never used, never read without bound."""
    import json
    import os

    overrides = ["actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"]
    compose_config(tmp_path / "model", overrides)
    (kept,) = cache.iterdir()
    record = json.loads(kept.read_text())
    record["data"]["actor_rollout_ref"]["rollout"]["multi_turn"]["max_assistant_turns"] = 1
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    tampered = [json.dumps(record), json.dumps({"trainer": {"x": 1}}), "/etc/passwd", "/dev/zero", str(fifo)]
    for content in tampered:
        kept.unlink()
        if content.startswith("/"):
            kept.symlink_to(content)
        else:
            kept.write_text(content)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rollscope"):
            read = compose_config(tmp_path / "model", overrides)
        assert read.actor_rollout_ref.rollout.multi_turn.max_assistant_turns == 3, content
        assert "could not be read" in caplog.text and "composing it again" in caplog.text, content
        assert not kept.is_symlink()  # (rewritten as a file of its own: the link replaced, never followed)


def test_a_link_planted_at_the_temporary_name_is_never_written_through(cache, tmp_path, monkeypatch):
    import os
    import secrets

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    monkeypatch.setattr(secrets, "token_hex", lambda n: "planted")
    cache.mkdir(parents=True)
    compose_config(tmp_path / "model")  # learn the name it keeps
    (kept,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    kept.unlink()
    (cache / f".{kept.name}.{os.getpid()}.planted").symlink_to(victim)
    compose_config(tmp_path / "model")
    assert victim.read_text() == "keep me"


def test_a_searchpath_folders_files_are_part_of_the_key(cache, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "mine.yaml").write_text("a: 1\n")
    override = [f"hydra.searchpath=[file://{extra}]"]
    compose_config(tmp_path / "model", override)
    (extra / "mine.yaml").write_text("a: 2\n")
    compose_config(tmp_path / "model", override)
    assert len(list(cache.iterdir())) == 2  # an edit there is another composition
