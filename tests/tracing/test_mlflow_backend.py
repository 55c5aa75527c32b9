"""The mlflow backend against a real SQLite tracking store, read back with mlflow.search_traces."""

import subprocess
import sys

import pytest

from rollscope import tracing
from tests.tracing.value_kinds import TABLE

pytestmark = pytest.mark.slow


def test_trajectories_are_searchable_traces(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracing.init_tracing(
        backend="local,mlflow",
        project="proj",
        experiment="exp",
        trace_dir=str(tmp_path / "t"),
        mlflow_tracking_uri=uri,
        mlflow_experiment="rollscope-test",
    )
    for i in range(4):
        with tracing.rollout_trace_attr(step=7, sample_index=i, rollout_n=0, name="tool_agent"):
            with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"q": i}):
                with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt": "p"}) as s:
                    s.outputs = {"response_text": f"answer {i}"}
                with tracing.trace_span("calculator", kind="tool", inputs={"expression": "1/0"}) as s:
                    if i == 3:
                        s.fail(ZeroDivisionError("division by zero"))
            tracing.set_reward(float(i % 2), correct=float(i % 2), judge="exact")  # and its components
    assert tracing.flush_tracing(120)
    assert tracing.stats()["backends"]["mlflow"]["errors"] == 0
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("rollscope-test")
    traces = mlflow.search_traces(
        experiment_ids=[experiment.experiment_id], filter_string="tags.step = '7'", return_type="list"
    )
    assert len(traces) == 4
    by_sample = {t.info.tags["sample_index"]: t for t in traces}
    assert by_sample["1"].info.tags["reward"] == "1.0" and by_sample["1"].info.tags["experiment_name"] == "exp"
    assert (by_sample["1"].info.tags["reward.correct"], by_sample["1"].info.tags["reward.judge"]) == ("1.0", "exact")
    spans = {s.name: s for s in by_sample["3"].data.spans}
    assert spans["calculator"].parent_id == spans["ToolAgentLoop.run"].span_id
    assert spans["calculator"].status.status_code == "ERROR"
    assert spans["llm.generate"].outputs == {"response_text": "answer 3"}
    rewarded = mlflow.search_traces(
        experiment_ids=[experiment.experiment_id], filter_string="tags.reward = '1.0'", return_type="list"
    )
    assert len(rewarded) == 2


def test_workers_starting_together_share_one_tracking_store(tmp_path):
    """Four processes create the same SQLite tracking store at once: no migration crash."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code = "import sys; from rollscope.tracing.backends.mlflow import prepare_tracking_store as p; p(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, uri], stderr=subprocess.PIPE) for _ in range(4)]
    assert [p.wait(120) for p in procs] == [0, 0, 0, 0], [p.stderr.read().decode()[-500:] for p in procs]
    import sqlite3

    assert sqlite3.connect(tmp_path / "mlflow.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_training_record_arriving_later_becomes_tags_of_the_trajectorys_trace(tmp_path):
    import mlflow

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    options = {"mlflow_tracking_uri": uri, "mlflow_experiment": "rollscope-test"}
    tracing.init_tracing(backend="mlflow", project="proj", **options)
    with (
        tracing.rollout_trace_attr(step=7, sample_index=0, rollout_n=0, name="tool_agent") as t,
        tracing.trace_span("ToolAgentLoop.run", kind="agent"),
    ):
        pass
    tracing.shutdown_tracing()
    tracing.init_tracing(backend="mlflow", project="proj", **options)  # the trainer's process
    tracing.get_tracer().training(
        t.id, {"step": 7, "uid": "u-1", "advantage": 0.25, "lag": 0, "old_log_probs": [-1.0, -2.0]}
    )
    assert tracing.flush_tracing(120)
    assert tracing.stats()["backends"]["mlflow"]["training_unjoined"] == 0
    tracing.shutdown_tracing()
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("rollscope-test")
    [trace] = mlflow.search_traces(
        locations=[experiment.experiment_id], filter_string="tags.`training.uid` = 'u-1'", return_type="list"
    )
    tags = trace.info.tags
    assert (tags["training.advantage"], tags["training.step"], tags["rollscope.trajectory_id"]) == ("0.25", "7", t.id)
    assert "training.old_log_probs" not in tags


_SENT_THEN_KILLED = """
import sys, time
from rollscope import tracing
from tests.tracing.value_kinds import TABLE
from tests.tracing.test_spool import rollouts
tracing.init_tracing(backend="mlflow", project="proj", sidecar=False, mlflow_tracking_uri=sys.argv[1],
                     mlflow_experiment="rollscope-test")
rollouts(20)
assert tracing.flush_tracing(120)
print("sent", flush=True)
time.sleep(600)
"""


def test_trajectories_a_killed_process_sent_but_had_not_confirmed_are_not_traced_twice(tmp_path):
    """A process killed after MLflow stored its traces but before its spool's cursor moved past
    them (its cursor file removed, if it was saved yet: that moment, made exact): the next process for the same
    destination sends the spool on and MLflow, which makes its own trace ids, gets each once."""
    import os
    import signal
    import textwrap
    from pathlib import Path

    import mlflow

    from rollscope.tracing._spool import spool_root
    from tests.tracing.test_spool import rollouts

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SENT_THEN_KILLED), uri],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "sent"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    [left] = list(spool_root().glob(f"*/{proc.pid}-*"))  # the spool it left
    # (its cursor may not be saved yet: the flush returned before the spool recorded it)
    (left / "cursor").unlink(missing_ok=True)
    tracing.init_tracing(backend="mlflow", project="proj", mlflow_tracking_uri=uri, mlflow_experiment="rollscope-test")
    rollouts(5, first=100)
    assert tracing.flush_tracing(120)
    stats = tracing.stats()["backends"]["mlflow"]
    tracing.shutdown_tracing()
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("rollscope-test")
    traces = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list", max_results=100)
    ids = [t.info.tags["rollscope.trajectory_id"] for t in traces]
    assert len(ids) == len(set(ids)) == 25 and stats["resent_skipped"] == 20


def test_every_kind_of_value_reads_back_from_mlflow_as_the_table_says(tmp_path):
    """The values table (tests/tracing/value_kinds.py) through the mlflow backend into a real
    tracking store, read back with mlflow.search_traces: each span's inputs and outputs."""
    import mlflow

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracing.init_tracing(backend="mlflow", mlflow_tracking_uri=uri, mlflow_experiment="values")
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        for name, value, _ in TABLE:
            with tracing.trace_span(name, inputs=value) as span:
                span.outputs = value
    assert tracing.flush_tracing(120)
    assert tracing.stats()["backends"]["mlflow"]["errors"] == 0
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("values")
    [trace] = mlflow.search_traces(experiment_ids=[experiment.experiment_id], return_type="list")
    spans = {s.name: s for s in trace.data.spans}
    for name, _, expected in TABLE:
        assert spans[name].inputs == expected, name
        assert spans[name].outputs == expected, name


_WORKER_STILL_TRACING = """
import sys
from rollscope import tracing
tracing.init_tracing(backend="mlflow", project="proj", mlflow_tracking_uri=sys.argv[1], mlflow_experiment="rollscope-test")
with tracing.rollout_trace_attr(step=2, sample_index=0, rollout_n=0) as t:
    print(t.id, flush=True)
    sys.stdin.readline()  # until the trainer's record is waiting for this trace
tracing.shutdown_tracing()
"""


def test_the_end_of_fit_waits_for_traces_still_on_their_way_from_a_rollout_worker(tmp_path):
    """verl's ``fit`` ends while the last step's traces may still be in a worker's sidecar; the
    trainer's process is ended soon after, so the hook's drain waits (bounded) until each record
    waiting for its trace is tagged."""
    import mlflow

    from rollscope.trainer.verl_hook import flush_until_joined

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER_STILL_TRACING, uri], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    trajectory_id = worker.stdout.readline().strip()
    tracing.init_tracing(backend="mlflow", project="proj", mlflow_tracking_uri=uri, mlflow_experiment="rollscope-test")
    try:
        tracing.get_tracer().training(trajectory_id, {"step": 2, "uid": "u-2", "advantage": -0.5})
        assert tracing.flush_tracing(120)
        assert tracing.stats()["backends"]["mlflow"]["training_waiting"] == 1  # its trace is not there yet
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert flush_until_joined(tracing.get_tracer()) == 0
        assert worker.wait(60) == 0
    finally:
        tracing.shutdown_tracing()
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("rollscope-test")
    [trace] = mlflow.search_traces(locations=[experiment.experiment_id], return_type="list")
    assert trace.info.tags["rollscope.trajectory_id"] == trajectory_id
    assert trace.info.tags["training.advantage"] == "-0.5"
