"""What ``rollscope.trainer.launch`` hands verl: refusals before Ray starts, one value per key,
the environment verl's processes need."""

import pytest

from rollscope.trainer.cpu import UnsupportedOnCPU
from rollscope.trainer.launch import CPU_OVERRIDES, PLUGIN, cpu_environment, main_ppo_command, merge_overrides


@pytest.mark.parametrize(("override", "named"), [
    ("trainer.n_gpus_per_node=8", "trainer.n_gpus_per_node=8 is not possible in verl on CPU: one CPU process"),
    ("actor_rollout_ref.rollout.name=vllm", "vLLM and SGLang need a GPU"),
    ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "must be 1"),
    ("actor_rollout_ref.actor.strategy=fsdp", "FSDP1 refuses CPU parameters"),
    ("+actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "a vLLM/SGLang option; remove it"),
])  # fmt: skip
def test_settings_a_cpu_cannot_honour_are_refused_in_one_line(override, named):
    with pytest.raises(UnsupportedOnCPU, match=named) as caught:
        main_ppo_command([override])
    assert "\n" not in str(caught.value)


def test_the_callers_overrides_win_and_each_key_is_given_once():
    command = main_ppo_command(["ray_kwargs.ray_init.num_cpus=32", "data.train_batch_size=4"])
    keys = [c.lstrip("+").partition("=")[0] for c in command[3:]]
    assert len(keys) == len(set(keys)) and command[:3][1:] == ["-m", "verl.trainer.main_ppo"]
    assert "ray_kwargs.ray_init.num_cpus=32" in command and "ray_kwargs.ray_init.num_cpus=16" not in command
    assert merge_overrides(["+a=1", "b=2"], ["a=3"]) == ["b=2", "a=3"]
    assert set(CPU_OVERRIDES) - set(command) == {"ray_kwargs.ray_init.num_cpus=16"}


def test_verls_processes_load_the_plugin_beside_the_users_modules():
    env = cpu_environment({"VERL_USE_EXTERNAL_MODULES": "my.plugin", "PATH": "/bin"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"{PLUGIN},my.plugin"
    assert (env["VERL_PLATFORM"], env["TORCH_COMPILE_DISABLE"], env["PATH"]) == ("cpu", "1", "/bin")
    assert cpu_environment(env)["VERL_USE_EXTERNAL_MODULES"] == env["VERL_USE_EXTERNAL_MODULES"]


def test_a_trainer_that_outlives_its_timeout_is_killed_and_said(tmp_path, monkeypatch):
    """run_main_ppo's own process handling, on a stand-in that never ends (``sleep``)."""
    import rollscope.trainer.launch as launch

    monkeypatch.setattr(launch, "main_ppo_command", lambda overrides: ["sleep", "60"])
    lines = []
    with pytest.raises(launch.TrainerFailed, match=r"was killed after 1 s \(log: "):
        launch.run_main_ppo([], log_path=tmp_path / "log", timeout=1, on_line=lines.append)
    assert (tmp_path / "log").exists() and lines == []
