"""A W&B run path is checked where it enters (``tracing.wandb_run``): a run path reaches Weave's
``wb_run_id`` and its ``wb_run_ids`` filter, so one with a newline, a ``..`` or a part too many
links nothing and says so, and a run of another W&B project keeps its own path."""

import pytest

from rollscope.runner.config import RunConfigError, load_config
from rollscope.tracing import wandb_run
from rollscope.tracing.backends.weave import wb_run_id

BAD = ["ent/proj/r1\nent/other/r2", "ent/proj/../../x", "../../etc/passwd", "ent/proj", "a/b/c/d", "ent/proj/", ""]


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("ent/proj/r8x2k1", ("ent", "proj", "r8x2k1")),
        ("/proj/offline-1", (None, "proj", "offline-1")),  # an offline run's entity is empty
        ("my.team/rl_runs-2/abc_DEF-9", ("my.team", "rl_runs-2", "abc_DEF-9")),
        ("r8x2k1", (None, None, "r8x2k1")),
    ],
)
def test_a_run_path_is_an_entity_a_project_and_an_id_or_an_id(path, parts):
    assert wandb_run.parse(path) == parts


@pytest.mark.parametrize("path", BAD)
def test_anything_else_is_one_error_and_links_nothing(path, caplog):
    with pytest.raises(wandb_run.RunPathError, match="expected entity/project/run_id"):
        wandb_run.parse(path)
    assert wb_run_id("ent/proj", path) is None


def test_a_run_of_another_project_keeps_its_own_path():
    assert wb_run_id("ent/proj", "ent/proj/r1") == wb_run_id("ent/proj", "r1") == "ent/proj/r1"
    assert wb_run_id("ent/proj", "other/elsewhere/r1") == "other/elsewhere/r1"
    assert wb_run_id("ent/proj", "/elsewhere/r1") == "ent/elsewhere/r1"


def test_the_environments_run_is_checked_and_a_bad_one_is_said_once(monkeypatch, caplog):
    monkeypatch.setenv(wandb_run.ENV, "ent/proj/r1\nent/x/y")
    with caplog.at_level("WARNING", logger="rollscope.trainer"):
        assert wandb_run.current() is None and wandb_run.current() is None
    assert caplog.text.count("not linked") == 1
    monkeypatch.setenv(wandb_run.ENV, "ent/proj/r1")
    assert wandb_run.current() == "ent/proj/r1"


def test_a_run_configs_wandb_run_is_checked_when_the_config_is_read():
    assert load_config("gsm8k-calculator", ["wandb_run=ent/proj/r1"]).wandb_run == "ent/proj/r1"
    with pytest.raises(RunConfigError, match=r"wandb_run: W&B run '\.\./x/y'"):
        load_config("gsm8k-calculator", ["wandb_run=../x/y"])
