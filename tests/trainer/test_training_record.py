"""The training record computed from a step's arrays (``trainer.training_record``), and the record
written by one process (verl's driver) joining the trajectory another process stored."""

import pytest
import torch

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.trainer.training_record import StepArrays, records, worst_tokens

# two rollouts of one prompt, one of another; row 0 has a tool response (positions 2-3, masked:
# verl gives them rollout log-prob 0) and padding after position 4
MASK = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
OLD = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0, -9.0], [-1.0] * 4 + [0.0] * 2, [-0.5, -0.5, 0, 0, 0, 0]])
ROLLOUT = torch.tensor([[-1.1, -2.0, 0.0, 0.0, -5.0, 0.0], [-1.0] * 4 + [0.0] * 2, [-0.5, -0.7, 0, 0, 0, 0]])


def step(advantages=None, trajectory_ids=("a", "b", None), versions=(2, 1, 2)):
    scores = torch.zeros(3, 6)
    scores[0, 4], scores[2, 1] = 1.0, 0.5
    grpo = torch.tensor([[0.7071] * 6, [-0.7071] * 6, [0.0] * 6])
    return StepArrays(
        step=3,
        trajectory_ids=list(trajectory_ids),
        uids=["u", "u", "v"],
        response_mask=MASK,
        advantages=grpo if advantages is None else advantages,
        scores=scores,
        rewards=scores,
        lengths=torch.tensor([5, 4, 2]),
        old_log_probs=OLD,
        rollout_log_probs=ROLLOUT,
        min_versions=list(versions),
        max_versions=[2, 2, 2],
    )


def test_group_advantage_and_versions_per_traced_row():
    found = dict(records(step()))
    assert set(found) == {"a", "b"}  # a row rollscope did not trace has no record
    a, b = found["a"], found["b"]
    assert (a["uid"], a["group_size"], a["group_mean"]) == ("u", 2, 0.5)
    assert a["group_std"] == pytest.approx(float(torch.tensor([1.0, 0.0]).std()))
    assert a["advantage"] == pytest.approx(0.7071) and b["advantage"] == pytest.approx(-0.7071)
    assert "advantages" not in a  # GRPO: one value, not repeated per token
    assert (a["policy_version"], a["lag"], b["policy_version"], b["lag"]) == (2, 0, 1, 1)
    assert (a["length"], a["tokens"], a["masked_tokens"], a["response_mask"]) == (5, 3, 2, [1, 1, 0, 0, 1])


def test_log_prob_delta_counts_loss_tokens_only_and_keeps_the_masked_apart():
    a = dict(records(step()))["a"]
    assert a["logprob_delta_max"] == pytest.approx(0.1) and a["logprob_delta_position"] == 0
    assert a["logprob_delta_mean"] == pytest.approx(0.1 / 3)
    assert a["masked_delta_max"] == pytest.approx(4.0)  # the tool response: an artefact, never counted
    assert len(a["old_log_probs"]) == len(a["rollout_log_probs"]) == 5  # padding left out
    assert worst_tokens(a, 2) == [(0, pytest.approx(0.1)), (1, 0.0)]


def test_token_level_advantages_are_kept_per_token():
    per_token = torch.tensor([[0.1, 0.2, 0.0, 0.0, 0.3, 0.0], [-0.7] * 6, [0.0] * 6])
    a = dict(records(step(advantages=per_token)))["a"]
    assert a["advantages"] == pytest.approx([0.1, 0.2, 0.0, 0.0, 0.3]) and a["advantage"] == pytest.approx(0.2)


def test_the_trainers_record_joins_a_trajectory_stored_by_another_process(trace_dir):
    """Worker and trainer write separate shards; the reader joins them by trajectory id, filters
    records by their indexed columns, and a record re-sent (a retried step) replaces the first."""
    tracing.init_tracing(backend="local", project="p", experiment="e", trace_dir=str(trace_dir))
    with tracing.rollout_trace_attr(step=3, sample_index=0, rollout_n=0) as first:
        pass
    with tracing.rollout_trace_attr(step=3, sample_index=0, rollout_n=1) as second:
        pass
    tracing.shutdown_tracing()
    tracing.init_tracing(backend="local", project="p", experiment="e", trace_dir=str(trace_dir))  # the trainer's
    rows = records(step(trajectory_ids=(first.id, second.id, None)))
    for tid, record in rows:
        tracing.get_tracer().training(tid, record)
    tracing.get_tracer().training(*rows[0])
    tracing.shutdown_tracing()
    store = TraceStore(trace_dir)
    assert len(store.shards()) == 2
    joined = store.get(first.id).training
    assert (joined.step, joined.uid, joined.advantage, joined.policy_version) == (3, "u", pytest.approx(0.7071), 2)
    assert joined.values["old_log_probs"] == pytest.approx(OLD[0, :5].tolist())
    assert [r.trajectory_id for r in store.training_records(step=3)] == sorted([first.id, second.id])
    assert [r.trajectory_id for r in store.training_records(min_delta=0.05)] == [first.id]
    assert store.training_records(experiment="other") == []


def test_verl_loads_the_join_and_it_wraps_verls_own_trainers():
    """The entry point verl imports in every process, and what it wraps once verl's trainer
    modules are imported (v0's actor update, v1's advantage step, both fits)."""
    from importlib.metadata import entry_points

    assert "rollscope.trainer.verl_hook" in {ep.value for ep in entry_points(group="verl.plugins")}
    import verl.trainer.ppo.ray_trainer as v0
    import verl.trainer.ppo.v1.trainer_base as v1

    from rollscope.trainer import verl_hook

    verl_hook.install()  # idempotent: nothing wrapped twice
    for method in (
        v0.RayPPOTrainer._update_actor,
        v0.RayPPOTrainer.fit,
        v1.PPOTrainer._compute_advantage,
        v1.PPOTrainer.fit,
        v1.compute_advantage_for_multi_trajectories,
    ):
        assert method.__code__.co_filename == verl_hook.__file__  # rollscope's wrapper ...
        assert method.__wrapped__.__module__.startswith("verl.")  # ... around verl's own method
        assert not hasattr(method.__wrapped__, "__wrapped__")  # once


def test_a_batch_the_join_cannot_read_never_fails_training(caplog):
    """A step whose batch lacks what the records need is said and skipped; the next is recorded."""

    from omegaconf import OmegaConf

    from rollscope.trainer.verl_hook import _Recorder

    recorder = _Recorder()
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"trace": {"backend": "none"}}}})
    recorder.submit(config, lambda: {}["advantages"])
    recorder.submit(config, lambda: step())
    recorder.drain(30)
    assert (recorder.failed, recorder.sent) == (1, 2)
    assert "a step's training records not recorded: KeyError" in caplog.text
    assert recorder.thread is not None and recorder.thread.is_alive()  # still there for the next step
    tracing.shutdown_tracing()
