"""A training run's W&B metrics beside the signals (``analysis.metric_changes``, ``rollscope insights
--wandb-run``): the scenario run's signals (tests/analysis/scenario.py) and a run wandb itself logged
offline, with entropy collapsing at step 1 and the score rising steadily."""

import json
import os
import subprocess
import sys

import pytest

from rollscope.analysis.insights import insights
from rollscope.analysis.metric_changes import metric_changes
from rollscope.store import TraceStore
from tests.analysis.scenario import SCRIPTS, record

ENTROPY = {0: 0.9, 1: 0.4, 2: 0.39, 3: 0.38, 4: 0.37}  # collapses at step 1, then drifts by 0.01
SCORE = {0: 0.1, 1: 0.12, 2: 0.14, 3: 0.16, 4: 0.18}  # rises by 0.02 a step: never a jump


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    from rollscope.testing import make_model_dir

    root = tmp_path_factory.mktemp("metric_changes")
    traces = root / "traces"
    record(traces, make_model_dir(root / "model"), experiment="scenario", scripts=SCRIPTS, steps=(0, 1))
    return traces


def test_a_jump_is_found_at_its_step_and_a_chosen_metric_at_every_flagged_step(store_dir):
    with TraceStore(store_dir) as store:
        [run] = insights(store, experiment="scenario")
    flagged = sorted({s.step for s in run.signals if s.flagged})
    assert flagged == [0, 1]
    found = metric_changes({"actor/entropy": ENTROPY, "critic/score/mean": SCORE}, run, chosen=("critic/score/mean",))
    [jump] = [m for m in found if m.metric == "actor/entropy"]
    assert (jump.step, jump.value, jump.jump) == (1, 0.4, True)
    assert jump.change == pytest.approx(-0.5) and jump.usual == pytest.approx(0.01) and jump.ratio == pytest.approx(50)
    assert "rewarded_empty" in jump.signals  # flagged at that step too
    score = [m for m in found if m.metric == "critic/score/mean"]
    assert [(m.step, m.jump) for m in score] == [(0, False), (1, False)]  # shown where flagged, never a jump
    assert score[0].change is None and score[1].change == pytest.approx(0.02)
    assert metric_changes({"flat": {0: 1.0, 1: 1.0, 2: 1.0}}, run) == []  # no change: nothing to say


@pytest.mark.slow
def test_insights_reads_an_offline_wandb_runs_metrics(store_dir, tmp_path):
    from tests.sources.wandb_runs import offline_run

    rows = [(step, {"actor/entropy": ENTROPY[step], "critic/score/mean": SCORE[step]}) for step in ENTROPY]
    offline_run(tmp_path, rows)

    def run(*args):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "rollscope.cli",
                "insights",
                "--dir",
                str(store_dir),
                "--wandb-run",
                str(tmp_path),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "COLUMNS": "300"},
        )

    out = run("--metric", "critic/score/mean")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    [step0] = [line for line in lines if line.startswith("  step 0 (")]
    [step1] = [line for line in lines if line.startswith("  step 1 (")]
    assert "rewarded_empty" in step0 and step0.endswith("critic/score/mean 0.1")
    assert step1.endswith(
        "actor/entropy 0.4 (-0.5, 50.0x its usual change) JUMP · critic/score/mean 0.12 (+0.02, 1.0x its usual change)"
    )
    data = json.loads(run("--json").stdout)
    assert [(m["metric"], m["step"], m["jump"]) for m in data["metrics"]] == [("actor/entropy", 1, True)]
    bad = run("--metric", "actor/kl")
    assert bad.returncode != 0 and "actor/kl" in bad.stderr and "logged no such metric" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
