"""The GPU recipe checked on CPU: examples/verl_gsm8k_grpo/train.sh's exact overrides, composed with
Hydra against verl's own trainer config, its rollout config converted to verl's dataclasses, and
every class its YAML names loaded."""

import shlex
from pathlib import Path

import pytest
import yaml

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "verl_gsm8k_grpo"


def recipe_overrides(data_dir: str) -> list[str]:
    """The overrides of train.sh's main_ppo command, with its shell variables filled in."""
    script = (RECIPE / "train.sh").read_text()
    command = script[script.index("python3 -m verl.trainer.main_ppo") :].replace("\\\n", " ")
    command = command.replace('"$HERE', f'"{RECIPE}').replace('"$DATA', f'"{data_dir}')
    words = shlex.split(command.splitlines()[0])
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"] and words[-1] == "$@"
    return words[3:-1]


def test_train_sh_is_the_weave_guides_command_plus_rollscopes_yaml(tmp_path):
    overrides = dict(o.split("=", 1) for o in recipe_overrides(str(tmp_path)))
    # the Weave guide's lines
    assert overrides["actor_rollout_ref.rollout.trace.backend"] == "weave"
    assert overrides["actor_rollout_ref.rollout.mode"] == "async"
    assert overrides["trainer.logger"] == "['console','wandb']"
    assert overrides["actor_rollout_ref.rollout.name"] == "vllm"
    assert {"trainer.project_name", "trainer.experiment_name"} <= set(overrides)
    # rollscope adds only its YAML files: no manager line, no rollscope-only key
    assert not any("agent_loop_manager_class" in k or k.lstrip("+").startswith("rollscope") for k in overrides)


@pytest.mark.slow
def test_recipe_composes_converts_and_loads_every_class(tmp_path):
    import verl
    from hydra import compose, initialize_config_dir
    from hydra.utils import get_class
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose("ppo_trainer", overrides=recipe_overrides(str(tmp_path)))
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # as verl's AgentLoopWorker converts it
    assert isinstance(rollout, RolloutConfig)
    assert (rollout.trace.backend, rollout.mode, rollout.multi_turn.enable) == ("weave", "async", True)
    assert cfg.trainer.project_name == "verl_grpo_gsm8k" and rollout.trace.token2text is True

    loops = yaml.safe_load(Path(rollout.agent.agent_loop_config_path).read_text())
    assert rollout.agent.default_agent_loop in {loop["name"] for loop in loops}
    from rollscope.agentloops import TracedAgentLoop

    for loop in loops:
        assert issubclass(get_class(loop["_target_"]), TracedAgentLoop)
    from verl.tools.base_tool import BaseTool

    tools = yaml.safe_load(Path(rollout.multi_turn.tool_config_path).read_text())["tools"]
    for tool in tools:
        assert issubclass(get_class(tool["class_name"]), BaseTool)
    from verl.tools.tool_registry import initialize_tools_from_config

    assert [t.name for t in initialize_tools_from_config(rollout.multi_turn.tool_config_path)] == ["calculator"]
