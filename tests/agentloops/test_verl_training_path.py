"""verl's own training path, as the Weave guide sets it up: verl's plain ``AgentLoopWorker`` (as a
class, and with its methods wrapped as Ray wraps an actor's), verl's real ``LLMServerClient`` with its decorated
``generate``, only ``trace.*`` keys set. Every trajectory is one complete call tree in every
backend: the local store, Weave (the real client, over HTTP to a W&B stand-in) and MLflow (a real
SQLite store)."""

import numpy as np
import pytest
import ray
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.utils.rollout_trace import RolloutTraceConfig

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.testing import compose_config
from tests.agentloops.verl_harness import (
    as_ray_actor_class,
    assert_users_tools_traced,
    grpo_batch,
    run_worker,
    start_llm_servers,
    users_tools_config,
    verl_llm_client,
)
from tests.engines import weave_calls

pytestmark = pytest.mark.slow

N_ROLLOUTS, SAMPLES, STEP = 2, 4, 5
WORKERS = {"plain": AgentLoopWorker, "ray actor": as_ray_actor_class(AgentLoopWorker)}


@pytest.fixture(scope="module")
def load_balancer(model_dir):
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield start_llm_servers(model_dir)
    ray.shutdown()


@pytest.fixture
def config_for(model_dir, tmp_path):
    loops = tmp_path / "agent_loops.yaml"
    loops.write_text("- name: user_agent\n  _target_: tests.agentloops.user_loops.ScratchAgent\n")

    def make(*overrides):
        RolloutTraceConfig.reset()
        return compose_config(
            model_dir,
            [
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
                "actor_rollout_ref.rollout.calculate_log_probs=True",
                *overrides,
            ],
        )

    yield make
    RolloutTraceConfig.reset()


def assert_complete_tree(run, llm_name="llm.generate"):
    """The scratch loop's run: create, llm, tool execute, llm, release, in that order, nothing else."""
    assert run.name == "ScratchAgent.run" and run.kind == "agent"
    assert [(c.name, c.kind) for c in run.children] == [
        ("Multiply.create", "custom"),
        (llm_name, "llm"),
        ("Multiply.execute", "tool"),
        (llm_name, "llm"),
        ("Multiply.release", "custom"),
    ]


@pytest.mark.parametrize("worker", list(WORKERS))
def test_verls_trace_keys_alone_trace_a_scratch_loop_completely(worker, config_for, load_balancer, tmp_path):
    cfg = config_for(
        "actor_rollout_ref.rollout.trace.backend=local",
        "actor_rollout_ref.rollout.trace.token2text=True",
        f"+rollscope.trace.trace_dir={tmp_path / 'traces'}",
    )
    out = run_worker(WORKERS[worker], cfg, verl_llm_client(cfg, load_balancer), grpo_batch(N_ROLLOUTS, STEP))
    assert out.batch["responses"].shape[0] == SAMPLES * N_ROLLOUTS
    assert tracing.flush_tracing(60)
    trajectories = TraceStore(tmp_path / "traces").trajectories()
    assert sorted((t.sample_index, t.rollout_n) for t in trajectories) == [
        (s, r) for s in range(SAMPLES) for r in range(N_ROLLOUTS)
    ]
    for t in trajectories:
        assert (t.step, t.validate, t.experiment, t.agent_name, t.status) == (STEP, False, "cpu", "user_agent", "ok")
        [run] = t.tree()
        assert t.reward == 1.0
        assert_complete_tree(run)
        first_turn = run.children[1]
        assert first_turn.attributes["gen_ai.usage.output_tokens"] > 0 and "latency_s" in first_turn.attributes
        assert "What is" in first_turn.inputs["prompt_text"]  # token2text
        assert "calculator" in first_turn.outputs["response_text"]
        tool = run.children[2]
        assert tool.inputs["parameters"]["expression"] in ("17 * 23", "12 * 12", "9 * 9", "6 * 7")
        assert tool.outputs["text"] in ("391", "144", "81", "42")
    # verl's own tracing was handed over: its decorators and sample choice are rollscope's now
    assert RolloutTraceConfig.get_backend() == "rollscope"
    assert RolloutTraceConfig.get_instance().max_samples_per_step_per_worker is None
    if worker == "plain":  # a trajectory recorded under verl's own worker replays as a regression test
        from rollscope.testing import replay

        tracing.shutdown_tracing(60)
        outcome = replay(trajectories[0].id, store=str(tmp_path / "traces"))
        assert outcome.ok, outcome.differences
        again = TraceStore(tmp_path / "traces").get(outcome.replay)
        assert_complete_tree(again.tree()[0])
        assert (again.replay_of, again.reward, again.sample_index) == (
            trajectories[0].id,
            1.0,
            trajectories[0].sample_index,
        )


def test_the_worker_as_a_class_and_as_a_ray_actor_trace_the_same_samples(config_for, load_balancer, tmp_path):
    chosen = {}
    for worker in WORKERS:
        tracing.shutdown_tracing()
        cfg = config_for(
            "actor_rollout_ref.rollout.trace.backend=local",
            "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=2",
            f"+rollscope.trace.trace_dir={tmp_path / worker.replace(' ', '_')}",
            "+rollscope.trace.sample_seed=3",
        )
        for step in (STEP, STEP + 1):
            run_worker(WORKERS[worker], cfg, verl_llm_client(cfg, load_balancer), grpo_batch(N_ROLLOUTS, step))
        assert tracing.flush_tracing(60)
        trajectories = TraceStore(tmp_path / worker.replace(" ", "_")).trajectories()
        chosen[worker] = sorted((t.step, t.sample_index, t.rollout_n) for t in trajectories)
    expected = sorted(
        (step, s, r)
        for step in (STEP, STEP + 1)
        for s in tracing.select_samples(range(SAMPLES), step=step, k=2, seed=3)
        for r in range(N_ROLLOUTS)
    )
    assert chosen["plain"] == chosen["ray actor"] == expected  # whole GRPO groups, seeded, the same


@pytest.mark.parametrize("worker", list(WORKERS))
def test_weave_holds_one_complete_root_call_per_trajectory(worker, config_for, load_balancer, weave_trace_server):
    """trace.backend=weave as in the Weave guide: verl's worker makes its own weave client (real,
    over HTTP to W&B's own Weave trace server); rollscope's backend writes from the sidecar with its own."""
    project = f"ent/seed-{worker.replace(' ', '-')}"
    cfg = config_for(
        "actor_rollout_ref.rollout.trace.backend=weave",
        "actor_rollout_ref.rollout.trace.token2text=True",
        f"trainer.project_name={project}",
    )
    run_worker(WORKERS[worker], cfg, verl_llm_client(cfg, load_balancer), grpo_batch(N_ROLLOUTS, STEP))
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    calls = {c["id"]: c for c in weave_calls(project)}
    roots = [c for c in calls.values() if c["parent_id"] is None]
    assert len(roots) == SAMPLES * N_ROLLOUTS  # no loose generate call from verl's decorator
    assert sorted((r["attributes"]["sample_index"], r["attributes"]["rollout_n"]) for r in roots) == [
        (s, r) for s in range(SAMPLES) for r in range(N_ROLLOUTS)
    ]
    for root in roots:
        assert root["project_id"] == project and root["output"]["reward"] == 1.0
        tree = [c for c in calls.values() if c["trace_id"] == root["id"] and c is not root]
        [run] = [c for c in tree if c["parent_id"] == root["id"]]
        children = sorted((c for c in tree if c["parent_id"] == run["id"]), key=lambda c: c["started_at"])
        assert [c["display_name"] for c in children] == [
            "Multiply.create",
            "llm.generate",
            "Multiply.execute",
            "llm.generate",
            "Multiply.release",
        ]
        assert len(tree) == 6
        for call in [root, *tree]:
            attrs = call["attributes"]
            assert (attrs["step"], attrs["experiment_name"], attrs["validate"]) == (STEP, "cpu", False)
            assert (attrs["sample_index"], attrs["rollout_n"]) == (
                root["attributes"]["sample_index"],
                root["attributes"]["rollout_n"],
            )
        llm = children[1]
        assert "What is" in llm["inputs"]["prompt_text"] and "calculator" in llm["output"]["response_text"]
        assert isinstance(llm["inputs"]["prompt_ids"], str)  # packed: one string, not hundreds of values
        assert llm["summary"]["usage"]["model"]["completion_tokens"] > 0
        assert children[2]["inputs"]["parameters"]["expression"] and children[2]["output"]["text"]


@pytest.mark.parametrize("worker", list(WORKERS))
def test_mlflow_holds_one_trace_per_trajectory(worker, config_for, load_balancer, tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # verl's worker reads it too
    cfg = config_for("actor_rollout_ref.rollout.trace.backend=mlflow", "trainer.project_name=mlproj")
    run_worker(WORKERS[worker], cfg, verl_llm_client(cfg, load_balancer), grpo_batch(N_ROLLOUTS, STEP))
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing(60)
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("mlproj")
    traces = mlflow.search_traces(experiment_ids=[experiment.experiment_id], return_type="list")
    assert len(traces) == SAMPLES * N_ROLLOUTS
    assert sorted((int(t.info.tags["sample_index"]), int(t.info.tags["rollout_n"])) for t in traces) == [
        (s, r) for s in range(SAMPLES) for r in range(N_ROLLOUTS)
    ]
    for t in traces:
        assert t.info.tags["step"] == str(STEP)
        names = [s.name for s in t.data.spans]
        assert names.count("llm.generate") == 2 and "Multiply.execute" in names and "ScratchAgent.run" in names
        assert len(names) == 7  # the trajectory, its run, and the run's five children


def test_with_verls_tracing_off_rollscope_still_records_every_span(config_for, load_balancer, tmp_path, monkeypatch):
    """No trace.backend (verl traces nothing, shares no attributes): rollscope started from its own
    environment variable reads the step and sample from verl's worker all the same."""
    monkeypatch.setenv("ROLLSCOPE_TRACE_BACKEND", "local")
    cfg = config_for(f"+rollscope.trace.trace_dir={tmp_path / 'traces'}")
    assert cfg.actor_rollout_ref.rollout.trace.backend is None
    run_worker(AgentLoopWorker, cfg, verl_llm_client(cfg, load_balancer), grpo_batch(N_ROLLOUTS, STEP))
    assert tracing.flush_tracing(60)
    trajectories = TraceStore(tmp_path / "traces").trajectories()
    assert sorted((t.step, t.sample_index, t.rollout_n) for t in trajectories) == [
        (STEP, s, r) for s in range(SAMPLES) for r in range(N_ROLLOUTS)
    ]
    for t in trajectories:
        [run] = t.tree()
        assert_complete_tree(run)


def test_verls_own_tools_in_verls_ported_loop_over_verls_client_and_ray(
    model_dir, load_balancer, tmp_path, monkeypatch
):
    """What users bring, on verl's training path: verl's ToolAgentLoop ported to TracedAgentLoop,
    verl's Gsm8kTool from verl's tool YAML and verl function tools from ``function_tool_path``,
    verl's worker wrapped as a Ray actor, verl's real LLM client to a server actor over Ray, only
    verl's ``trace.*`` keys set. Every tool call is a tool span; the counts are the calls."""
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(tmp_path / "traces"))  # (where the store is: no verl key)
    cfg = users_tools_config(model_dir, tmp_path, "actor_rollout_ref.rollout.calculate_log_probs=True")
    batch = grpo_batch(N_ROLLOUTS, STEP, agent_name="ported_tool_agent")
    batch.non_tensor_batch["tools_kwargs"] = np.array(
        [
            {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": str(r["ground_truth"])}}}
            for r in batch.non_tensor_batch["reward_model"]
        ],
        dtype=object,
    )
    try:
        run_worker(WORKERS["ray actor"], cfg, verl_llm_client(cfg, start_llm_servers(model_dir, "verl_tools")), batch)
        assert tracing.flush_tracing(60)
        store = TraceStore(tmp_path / "traces")
        trajectories = [store.get(t.id) for t in store.trajectories()]
    finally:
        tracing.shutdown_tracing(60)
        RolloutTraceConfig.reset()
    assert len(trajectories) == SAMPLES * N_ROLLOUTS
    for t in trajectories:
        assert t.status == "ok"
        assert_users_tools_traced(t)
