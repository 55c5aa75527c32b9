"""Retention decided after the reward (``store.retention``, ``traces compact --retain``): on a store
with one planted group of each anomaly per step and twenty ordinary groups, the policy keeps
exactly the anomalous groups whole plus a seeded sample of the rest, in either store layout, and
removes the others' rows, spans and bytes; on a store recorded by ``rollscope run``, a rescoring's
disagreement keeps exactly the group it flipped."""

import json
import sqlite3
import subprocess
import sys

import pytest

from rollscope import tracing
from rollscope.datasets.rescore import rescore
from rollscope.store import TraceStore
from rollscope.store.retention import RetentionPolicy, at_sealing, parse_policy, retain
from tests.conftest import RECORDED_N

STEPS, ORDINARY, ROLLOUTS = 2, 20, 4
ANOMALOUS = {0: "zero_variance", 1: "truncated", 2: "tool_error", 3: "error", 4: "outlier"}


def record(trace_dir, local_dir=None, **options):
    """Per step: sample 0 every reward 1; 1 a reply cut at its token limit; 2 a failed tool call;
    3 a failed llm call; 4 one reward of 25 among 0s and 1s; 5.. ordinary (rewards 0, 1, 0, 1)."""
    tracing.init_tracing(
        experiment="planted",
        trace_dir=str(trace_dir),
        sidecar=False,
        **({"local_dir": str(local_dir)} if local_dir else {}),
        **options,
    )
    for step in range(STEPS):
        for sample in range(len(ANOMALOUS) + ORDINARY):
            for n in range(ROLLOUTS):
                with tracing.rollout_trace_attr(step=step, sample_index=sample, rollout_n=n):
                    with tracing.trace_span(
                        "ToolAgentLoop.run",
                        kind="agent",
                        inputs={"raw_prompt": [{"role": "user", "content": f"q{sample}"}]},
                    ):
                        with tracing.trace_span("llm.generate", kind="llm") as s:
                            s.outputs = {
                                "response_text": "x" * 200,
                                "stop_reason": "length" if (sample, n) == (1, 2) else "stop",
                            }
                            if (sample, n) == (3, 1):
                                s.fail(RuntimeError("server went away"))
                        with tracing.trace_span("calculator", kind="tool", **{"tool.name": "calculator"}) as s:
                            s.outputs = {"text": "42"}
                            if (sample, n) == (2, 0):
                                s.fail(ValueError("bad expression"))
                    reward = 1.0 if sample == 0 else 25.0 if (sample, n) == (4, 3) else float(n % 2)
                    tracing.set_reward(reward)
    assert tracing.flush_tracing(60)
    stats = tracing.stats()["backends"]["local"]
    tracing.shutdown_tracing(60)
    return stats


def kept_samples(trace_dir):
    with TraceStore(trace_dir) as store:
        found = {}
        for t in store.trajectories(limit=None):
            found.setdefault((t.step, t.sample_index), []).append(t)
    assert all(len(g) == ROLLOUTS for g in found.values())  # kept whole
    return {step: {s for (st, s) in found if st == step} for step in range(STEPS)}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    record(root / "traces")
    return root / "traces"


def test_anomalous_groups_are_kept_whole_and_the_rest_removed(planted, tmp_path):
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(planted, traces)
    done = retain(traces, parse_policy("anomalous,sample=0"))
    assert kept_samples(traces) == {step: set(ANOMALOUS) for step in range(STEPS)}
    assert done.summary["by_anomaly"] == {kind: STEPS for kind in ANOMALOUS.values()} | {"error": 2 * STEPS}
    assert (done.summary["kept_groups"], done.summary["groups"]) == (
        len(ANOMALOUS) * STEPS,
        (len(ANOMALOUS) + ORDINARY) * STEPS,
    )
    assert done.bytes_after < done.bytes_before / 2  # the space given back, not only the rows
    [shard] = traces.glob("*.rstrace")
    db = sqlite3.connect(shard)
    orphans = db.execute("SELECT COUNT(*) FROM spans WHERE trajectory_id NOT IN (SELECT id FROM trajectories)")
    assert orphans.fetchone()[0] == 0 and db.execute("SELECT COUNT(*) FROM spans").fetchone()[0] == 3 * ROLLOUTS * 10
    db.close()


def test_the_sample_of_the_rest_is_seeded_by_group(planted, tmp_path):
    import shutil

    kept = {}
    for name, policy in (
        ("a", "anomalous,sample=0.5,seed=7"),
        ("b", "anomalous,sample=0.5,seed=7"),
        ("c", "anomalous,sample=0.5,seed=8"),
    ):
        shutil.copytree(planted, tmp_path / name)
        done = retain(tmp_path / name, parse_policy(policy))
        kept[name] = kept_samples(tmp_path / name)
        ordinary = {s for step in kept[name].values() for s in step} - set(ANOMALOUS)
        assert done.summary["sampled_groups"] == sum(len(v - set(ANOMALOUS)) for v in kept[name].values())
        assert 0 < len(ordinary) < ORDINARY and all(set(ANOMALOUS) <= v for v in kept[name].values())
    assert kept["a"] == kept["b"] != kept["c"]


def test_a_dry_run_changes_nothing_and_the_cli_reports_bytes(planted, tmp_path):
    import shutil

    traces = tmp_path / "traces"
    shutil.copytree(planted, traces)
    before = {p.name: p.read_bytes() for p in traces.iterdir() if p.is_file()}
    cli = [sys.executable, "-m", "rollscope.cli", "traces", "compact", "--dir", str(traces)]
    dry = subprocess.run(
        [*cli, "--retain", "tool_error+zero_variance,sample=0", "--dry-run", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["kept_groups"] == 2 * STEPS and report["dry_run"] and report["bytes_after"] == report["bytes_before"]
    assert sorted(a["reasons"][0] for a in report["anomalous"]) == sorted(["tool_error", "zero_variance"] * STEPS)
    assert {p.name: p.read_bytes() for p in traces.iterdir() if p.is_file()} == before
    text = subprocess.run(
        [*cli, "--retain", "tool_error+zero_variance,sample=0", "--step", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert text.returncode == 0, text.stderr
    assert f"2 of {len(ANOMALOUS) + ORDINARY} groups kept" in text.stdout and " MB -> " in text.stdout
    assert kept_samples(traces) == {0: set(range(len(ANOMALOUS) + ORDINARY)), 1: {0, 2}}  # step 0 untouched
    for bad, says in (
        ("anomalous,sample=2", "sample='2' is not a valid value"),
        ("flaky", "unknown kind 'flaky'"),
        ("rescored", "'rescored' needs rescoring=NAME"),
        ("anomalous,speed=1", "unknown option"),
    ):
        result = subprocess.run([*cli, "--retain", bad], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, bad


def test_the_shared_layout_is_rewritten_as_compacted_segments(tmp_path):
    traces, local = tmp_path / "shared", tmp_path / "local"
    record(traces, local)
    assert list((traces / "segments").glob("*.rstrace"))
    done = retain(traces, RetentionPolicy(sample=0.0))
    assert kept_samples(traces) == {step: set(ANOMALOUS) for step in range(STEPS)}
    assert done.bytes_after < done.bytes_before
    assert all(p.name.startswith("compact~") for p in (traces / "segments").glob("*.rstrace"))


def test_a_rescorings_disagreement_keeps_exactly_the_group_it_flipped(recorded_copy, tmp_path):
    traces, truth = recorded_copy
    target = sorted(truth.values())[0]
    reward = tmp_path / "flip.py"
    reward.write_text(
        "from rollscope.bundled.rewards import exact_number\n\n"
        "def flip(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    right = exact_number(data_source, solution_str, ground_truth)\n"
        f"    return 1.0 - right if ground_truth == {target!r} else right\n"
    )
    with TraceStore(traces) as store:
        [changed] = rescore(store, f"{reward}:flip", workers=1).changed
    done = retain(traces, parse_policy("rescored,sample=0,rescoring=flip"))
    with TraceStore(traces) as store:
        left = {t.id for t in store.trajectories(limit=None)}
    assert left == {m["id"] for m in changed.members} and len(left) == RECORDED_N
    assert done.summary["by_anomaly"] == {"rescored": 1}


def test_a_writer_applies_the_policy_as_it_seals_segments(tmp_path):
    """The live path: decided once each group's rewards are in, before anything is published; what
    it drops never reaches the shared directory and is counted."""
    traces, local = tmp_path / "shared", tmp_path / "local"
    stats = record(traces, local, retain="anomalous,sample=0", publish_interval_s=0.05)
    assert kept_samples(traces) == {step: set(ANOMALOUS) for step in range(STEPS)}
    assert stats["retention_dropped"] == ORDINARY * ROLLOUTS * STEPS and stats["lost_trajectories"] == 0


def test_at_sealing_a_group_waits_for_its_last_rollout(planted):
    """A group whose last rollout is still waiting for its reward is held back whole, then judged
    with it: never split across publishes, never judged on part of its rewards."""
    [shard] = planted.glob("*.rstrace")
    db = sqlite3.connect(shard)
    ids = {
        sample: [
            i
            for (i,) in db.execute(
                "SELECT id FROM trajectories WHERE step = 0 AND sample_index = ? ORDER BY rollout_n", (sample,)
            )
        ]
        for sample in (0, 5)
    }
    decide = at_sealing(RetentionPolicy(sample=0.0))
    ready = ids[0][:3] + ids[5]  # the zero-variance group's 4th rollout not ready yet
    sealed, held, dropped = decide(db, ready, {ids[0][3]}, False)
    assert (sealed, held, sorted(dropped)) == ([], set(ids[0][:3]), sorted(ids[5]))  # the ordinary group judged
    sealed, held, dropped = decide(db, ids[0], set(), False)
    assert (sorted(sealed), held, dropped) == (sorted(ids[0]), set(), [])
    db.close()


def test_a_policy_at_sealing_needs_segments(tmp_path):
    with pytest.raises(ValueError, match="applies where segments are sealed"):
        tracing.init_tracing(trace_dir=str(tmp_path / "traces"), sidecar=False, retain="anomalous")
