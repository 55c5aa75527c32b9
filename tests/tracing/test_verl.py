"""rollscope inside verl: joining verl's own trajectory context, and starting from verl's config."""

import asyncio
from pathlib import Path

import pytest

from rollscope import tracing

verl_trace = pytest.importorskip("verl.utils.rollout_trace")


@pytest.fixture
def verl_tracing():
    verl_trace.RolloutTraceConfig.reset()
    verl_trace.RolloutTraceConfig.init("proj", "verl-exp", backend="rollscope")
    yield verl_trace
    verl_trace.RolloutTraceConfig.reset()


class Loop:
    @tracing.rollout_trace_op
    async def run(self, prompt):
        return await self.generate(prompt)

    @tracing.rollout_trace_op(kind="llm")
    async def generate(self, prompt):
        return prompt[::-1]


def test_spans_join_the_trajectory_verl_opened(verl_tracing, local_tracer, read_store):
    loop = Loop()

    async def one(i):  # what verl's AgentLoopWorker._run_agent_loop does for each sample
        with verl_tracing.rollout_trace_attr(step=7, sample_index=i, rollout_n=i % 2, validate=True, trace=True):
            return await loop.run(f"p{i}")

    async def main():
        return await asyncio.gather(*(one(i) for i in range(6)))

    assert asyncio.run(main()) == [f"{i}p" for i in range(6)]
    trajectories = read_store().trajectories()
    assert len(trajectories) == 6  # one each, no second trajectory per sample
    for t in trajectories:
        assert (t.step, t.rollout_n, t.validate) == (7, t.sample_index % 2, True)
        assert t.experiment == "verl-exp"  # verl's experiment name wins inside verl
        assert t.attributes == {"opened_by": "verl"}
        [run] = t.tree()
        assert [c.name for c in run.children] == ["Loop.generate"]


def test_verl_trace_false_disables_rollscope_spans(verl_tracing, local_tracer, read_store):
    async def main():
        with verl_tracing.rollout_trace_attr(step=1, sample_index=0, trace=False):
            await Loop().run("x")
        with verl_tracing.rollout_trace_attr(step=1, sample_index=1):
            await Loop().run("y")

    asyncio.run(main())
    assert [t.sample_index for t in read_store().trajectories()] == [1]


@pytest.mark.slow
def test_init_from_verl_config_reads_verls_keys(tmp_path, monkeypatch):
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    overrides = [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.trace.backend=local",
        "actor_rollout_ref.rollout.trace.token2text=True",
        "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=2",
        "trainer.project_name=gsm8k_proj",
        "trainer.experiment_name=run_a",
        f"+rollscope.trace.trace_dir={tmp_path / 'from_cfg'}",
    ]
    monkeypatch.setenv("ROLLSCOPE_SAMPLE_SEED", "17")
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    tracer = tracing.init_from_verl_config(cfg)
    assert (tracer.project, tracer.experiment, tracer.token2text) == ("gsm8k_proj", "run_a", True)
    assert (tracer.sampler.k, tracer.sampler.seed) == (2, 17)
    assert tracing.init_from_verl_config(cfg) is tracer  # same settings: kept, not rebuilt
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        pass
    tracing.flush_tracing()
    assert list((tmp_path / "from_cfg").iterdir())


def test_no_backend_in_verl_config_means_no_tracing():
    cfg = {"actor_rollout_ref": {"rollout": {"trace": {"backend": None}}}, "trainer": {"project_name": "p"}}
    assert tracing.init_from_verl_config(cfg) is None
    assert tracing.get_tracer() is None
