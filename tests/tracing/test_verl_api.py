"""verl's ``RolloutTraceConfig`` and ``get_trajectory_info`` on rollscope's tracer: the same
singleton semantics, traces in rollscope's store, the same trajectory attributes as verl's own."""

import asyncio

import pytest

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.tracing import RolloutTraceConfig, get_trajectory_info, rollout_trace_attr, rollout_trace_op


class Loop:
    @rollout_trace_op
    async def generate(self, prompt):
        return {"response_text": f"re: {prompt}"}


def test_a_config_initialised_as_verl_does_traces_into_rollscopes_store(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(tmp_path / "traces"))
    RolloutTraceConfig.reset()
    RolloutTraceConfig.init(project_name="p", experiment_name="e", backend="local", token2text=False)
    RolloutTraceConfig.init(project_name="other", experiment_name="x", backend="mlflow")  # ignored: once
    assert (RolloutTraceConfig.get_backend(), RolloutTraceConfig.enable_token2text()) == ("local", False)
    assert RolloutTraceConfig.get_client() is tracing.get_tracer() is not None

    async def run():
        with rollout_trace_attr(step=3, sample_index=7, rollout_n=1):
            return await Loop().generate("hi")

    assert asyncio.run(run()) == {"response_text": "re: hi"}
    assert tracing.flush_tracing(30)
    RolloutTraceConfig.reset()
    assert tracing.get_tracer() is None and RolloutTraceConfig.get_backend() is None
    [t] = TraceStore(tmp_path / "traces").trajectories()
    assert (t.project, t.experiment, t.step, t.sample_index, t.rollout_n) == ("p", "e", 3, 7, 1)
    assert [s.name for s in t.spans] == ["Loop.generate"]


def test_a_backend_rollscope_lacks_traces_nothing_as_in_verl():
    RolloutTraceConfig.reset()
    RolloutTraceConfig.init(project_name="p", experiment_name="e", backend="dummy")
    assert RolloutTraceConfig.get_client() is None and tracing.get_tracer() is None
    RolloutTraceConfig.reset()


@pytest.mark.parametrize("index", [[0, 0, 1, 1, 1, 2], [5], [], [3, 3, 4, 3, 3]])
def test_trajectory_info_is_verls(index):
    from verl.experimental.agent_loop import get_trajectory_info as verls

    assert asyncio.run(get_trajectory_info(9, index, True)) == asyncio.run(verls(9, index, True))
