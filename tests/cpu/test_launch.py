"""What ``rollscope.cpu.launch`` hands verl: refusals before Ray starts, one value per key,
the environment verl's processes need."""

import os
import sys
from pathlib import Path

import pytest

from rollscope.cpu import UnsupportedOnCPU
from rollscope.cpu.launch import (
    CPU_OVERRIDES,
    PLUGIN,
    ROLLOUT_KEY,
    SGLANG_OVERRIDES,
    VLLM_OVERRIDES,
    cpu_environment,
    main_ppo_command,
    merge_overrides,
)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("trainer.n_gpus_per_node=8", "trainer.n_gpus_per_node=8 is not possible in verl on CPU: one CPU process"),
        ("actor_rollout_ref.rollout.name=trtllm", "the CPU rollouts are hf_cpu, vllm .* and sglang; it must be"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size=2", "must be 1"),
        ("actor_rollout_ref.actor.strategy=fsdp", "FSDP1 refuses CPU parameters"),
        ("+actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "a vLLM/SGLang option; remove it"),
    ],
)
def test_settings_a_cpu_cannot_honour_are_refused_in_one_line(override, named):
    with pytest.raises(UnsupportedOnCPU, match=named) as caught:
        main_ppo_command([override])
    assert "\n" not in str(caught.value)


def test_vllms_rollout_is_taken_with_what_it_needs_on_cpu_and_refused_without_its_cpu_build(monkeypatch):
    import importlib.metadata

    command = main_ppo_command(
        ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5"]
    )
    assert "actor_rollout_ref.rollout.name=vllm" in command and f"{ROLLOUT_KEY}=hf_cpu" not in command
    assert set(VLLM_OVERRIDES) <= set(command)
    assert cpu_environment({}, "vllm")["VLLM_HOST_IP"] == "127.0.0.1" and "VLLM_HOST_IP" not in cpu_environment({})
    with pytest.raises(UnsupportedOnCPU, match="no sleep mode; it must be False"):
        main_ppo_command(["actor_rollout_ref.rollout.name=vllm", "+actor_rollout_ref.rollout.enable_sleep_mode=True"])

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)  # an install without vLLM
    with pytest.raises(UnsupportedOnCPU, match=r"needs vLLM's CPU build .*not installed\): `make vllm` installs"):
        main_ppo_command(["actor_rollout_ref.rollout.name=vllm"])


def test_sglangs_rollout_is_taken_with_its_cpu_switches_and_refused_without_sglang(monkeypatch):
    import importlib.metadata

    command = main_ppo_command(["actor_rollout_ref.rollout.name=sglang"])
    assert set(SGLANG_OVERRIDES) <= set(command) and "+actor_rollout_ref.rollout.enable_sleep_mode=False" not in command
    assert "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=torch_native" in command
    assert cpu_environment({}, "sglang")[
        "SGLANG_USE_CPU_ENGINE"
    ] == "1" and "SGLANG_USE_CPU_ENGINE" not in cpu_environment({})

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)  # an install without SGLang
    with pytest.raises(UnsupportedOnCPU, match=r"needs SGLang .*\(not installed\): `make sglang` installs"):
        main_ppo_command(["actor_rollout_ref.rollout.name=sglang"])


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
    import rollscope.cpu.launch as launch

    monkeypatch.setattr(launch, "main_ppo_command", lambda overrides: ["sleep", "60"])
    lines = []
    with pytest.raises(launch.TrainerFailed, match=r"ran past 1 s and was killed \(log: "):
        launch.run_main_ppo([], log_path=tmp_path / "log", timeout=1, on_line=lines.append)
    assert (tmp_path / "log").exists() and lines == []


def test_a_trainer_gone_silent_after_an_engine_error_is_killed_and_the_error_named(tmp_path, monkeypatch):
    """A rollout engine that dies mid-sync leaves verl waiting for ever, saying nothing: past the
    silence limit the trainer's whole process group is killed (a stand-in: a shell whose child
    sleeps) and the first error logged is named in the one line."""
    import rollscope.cpu.launch as launch

    script = (
        "echo 'step 0'; echo \"AttributeError: 'Parameter' object has no attribute 'weight_loader'\"; sleep 60 & wait"
    )
    monkeypatch.setattr(launch, "main_ppo_command", lambda overrides: ["sh", "-c", script])
    with pytest.raises(launch.TrainerFailed) as caught:
        launch.run_main_ppo([], log_path=tmp_path / "log", silence_s=1)
    first = str(caught.value).splitlines()[0]
    assert first.startswith(
        "verl's main_ppo printed nothing for 1 s and was killed; the first error logged: "
        "AttributeError: 'Parameter' object has no attribute 'weight_loader' (log: "
    ), first


# A stand-in for verl's rollout worker: its output into a log file of its own (as Ray's workers'),
# 20 trajectories to a destination that does not answer yet (tests.tracing.spool_backends' ledger,
# in the trace sidecar), a close that gives up after half a second, and the process ends.
_TRACES_AND_ENDS = """
import os, sys
log = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT, 0o600)
os.dup2(log, 1), os.dup2(log, 2)
import tests.tracing.spool_backends
from rollscope import tracing
tracing.init_tracing(backend="sidecar-ledger", ledger_path=sys.argv[1])
for i in range(20):
    with tracing.rollout_trace_attr(step=1, sample_index=i, rollout_n=0):
        with tracing.trace_span("llm.generate", kind="llm"):
            pass
        tracing.set_reward(1.0)
tracing.shutdown_tracing(0.5)
"""


def test_the_launcher_waits_for_the_runs_trace_sidecars_and_says_so(tmp_path, monkeypatch):
    """The run's process is gone, its trace sidecar is not (its destination has not answered):
    ``run_main_ppo`` says it waits, and returns once the sidecar has delivered everything."""
    import rollscope.cpu.launch as launch

    root = Path(__file__).resolve().parents[2]
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    monkeypatch.setattr(
        launch,
        "main_ppo_command",
        lambda overrides: [sys.executable, "-c", _TRACES_AND_ENDS, str(ledger), str(tmp_path / "worker.log")],
    )
    lines = []

    def on_line(line):
        lines.append(line)
        if "waiting for the trace sidecars" in line:
            gate.touch()  # the destination answers once the launcher waits for it

    env = {**os.environ, "ROLLSCOPE_TEST_LEDGER_GATE": str(gate), "PYTHONPATH": str(root)}
    launch.run_main_ppo([], log_path=tmp_path / "log", env=env, cwd=root, on_line=on_line, timeout=300)
    assert lines == ["rollscope: waiting for the trace sidecars to store the run's last trajectories"]
    assert len(set(ledger.read_text().split())) == 20
    assert not (tmp_path / "log.sidecars").exists()
