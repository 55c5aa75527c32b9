"""`rollscope push`: stored trajectories replayed into Weave (the real client, W&B's own Weave
trace server: tests.engines), with no duplicate on a second push and a resume after an interruption."""

import pytest

from rollscope import tracing
from rollscope.datasets.push import Ledger, ledger_key, push, weave_destination
from rollscope.tracing.backends.weave import call_id
from tests.engines import weave_calls


@pytest.fixture
def stored(trace_dir):
    tracing.init_tracing(project="proj", experiment="offline", trace_dir=str(trace_dir))
    for i in range(12):
        with tracing.rollout_trace_attr(step=i // 4, sample_index=i % 4, rollout_n=0, name="agent"):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2, 3]}) as s:
                s.outputs = {"response_text": f"answer {i}"}
            tracing.set_reward(float(i % 2))
    tracing.shutdown_tracing()
    return trace_dir


@pytest.fixture
def weave_client(weave_trace_server):
    import weave

    return weave.init("ent/pushed")


class Interrupted(Exception):
    pass


class DiesAfter:
    """Test double: a Weave destination whose network goes away after ``n`` trajectories."""

    def __init__(self, client, n):
        self.inner = weave_destination(client=client)
        self.left = n

    def write(self, record):
        if self.left == 0:
            raise Interrupted("connection lost")
        self.left -= 1
        self.inner.write(record)

    def flush(self):
        self.inner.flush()


@pytest.mark.slow
def test_push_is_idempotent_and_resumes(stored, weave_client):
    client = weave_client
    with pytest.raises(Interrupted):
        for _ in push("weave", str(stored), batch=5, destination=DiesAfter(client, 7)):
            pass
    client.flush()
    ledger = Ledger(stored)
    assert len(ledger.done(ledger_key("weave"))) == 5  # the confirmed batch; the 2 after it will be sent again
    ledger.close()

    progress = list(push("weave", str(stored), batch=5, destination=weave_destination(client=client)))
    assert progress[-1] == (7, 7)
    assert list(push("weave", str(stored), destination=weave_destination(client=client))) == []  # nothing new
    client.flush()
    calls = weave_calls("ent/pushed")
    roots = {c["id"] for c in calls if c["parent_id"] is None}
    from rollscope.store import TraceStore

    with TraceStore(stored) as store:
        ids = {call_id(t.id) for t in store.trajectories()}
        assert roots == ids  # every trajectory in Weave, under its stable id
    assert sorted(c["output"]["reward"] for c in calls if c["id"] in ids) == [0.0] * 6 + [1.0] * 6
    # re-sent trajectories (the 2 after the last confirmed batch) reuse their ids: nothing new appears
    assert len(roots) == 12


def test_push_to_mlflow_from_the_command_line(stored, tmp_path):
    """The CLI end to end into a real SQLite MLflow store; a second push sends nothing."""
    import mlflow

    from tests.cli.test_run_cli import rollscope

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    first = rollscope("push", "--to", "mlflow", "--dir", str(stored), "--endpoint", uri, "--project", "pushed")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "pushed 12 trajectories to mlflow" in first.stdout
    again = rollscope("push", "--to", "mlflow", "--dir", str(stored), "--endpoint", uri, "--project", "pushed")
    assert "nothing new" in again.stdout
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("pushed")
    traces = mlflow.search_traces(experiment_ids=[experiment.experiment_id], return_type="list")
    assert len(traces) == 12 and {t.info.tags["experiment_name"] for t in traces} == {"offline"}


def test_another_project_or_endpoint_is_another_destination(stored, tmp_path):
    """The ledger knows a destination by kind, endpoint and project: after a push to one MLflow
    experiment, a push to another experiment, or to another server, sends everything again."""
    import mlflow

    first, second = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    assert list(push("mlflow", str(stored), endpoint=first, project="a"))[-1] == (12, 12)
    assert list(push("mlflow", str(stored), endpoint=first, project="a")) == []  # nothing new there
    assert list(push("mlflow", str(stored), endpoint=first, project="b"))[-1] == (12, 12)
    assert list(push("mlflow", str(stored), endpoint=second, project="a"))[-1] == (12, 12)
    for uri, name in ((first, "a"), (first, "b"), (second, "a")):
        mlflow.set_tracking_uri(uri)
        experiment = mlflow.get_experiment_by_name(name)
        assert len(mlflow.search_traces(experiment_ids=[experiment.experiment_id], return_type="list")) == 12
