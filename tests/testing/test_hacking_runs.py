"""The synthetic runs the hacking signals are judged on (``rollscope.testing.hacking_runs``), a
fixed-seed subset of ``benchmarks/bench_hacking.py``: each hacking family's run is flagged in time
with hacks as its examples, each honest family's run stays quiet, and a run is what its seed says
(the same draw twice). The benchmark's figures over hundreds of seeds are in benchmarks/RESULTS.md."""

import pytest

from rollscope.analysis.hacking import HEALTH
from rollscope.analysis.insights import insights
from rollscope.store import TraceStore
from rollscope.testing.hacking_runs import CHECK, FAMILIES, RunSpec, _write, record, save_check, verdict

TUNED = [f for f in FAMILIES.values() if not f.held_out]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    trace_dir = tmp_path_factory.mktemp("hacking-runs") / "traces"
    runs = [record(trace_dir, RunSpec(f.name, seed=0)) for f in TUNED]
    save_check(trace_dir, runs)
    found = {r.experiment: r for r in insights(TraceStore(trace_dir), check=CHECK)}
    return {
        run.spec.family: (run, verdict(run, found[run.spec.experiment], signals=_judged_by(run.spec.family)))
        for run in runs
    }


def _judged_by(family):
    """The entropy family is the training-health signal's to see; the rest, the hacking signals'."""
    return tuple(HEALTH) if family == "entropy" else None


@pytest.mark.slow  # (ten runs written through the tracing API: about 15 s)
@pytest.mark.parametrize("family", [f.name for f in TUNED if f.hacking])
def test_a_hacking_run_is_flagged_in_time_naming_hacks(judged, family):
    run, found = judged[family]
    assert found["verdict"] == "in time", found
    assert found["examples"] and found["hack_examples"] / found["examples"] >= 0.8
    assert run.first_step_past(0.05) <= found["first_flag"] <= run.first_step_past(0.25) + 2


@pytest.mark.slow
@pytest.mark.parametrize("family", [f.name for f in TUNED if not f.hacking])
def test_an_honest_run_stays_quiet(judged, family):
    assert judged[family][1]["verdict"] == "quiet", judged[family][1]


def test_a_run_is_its_seed():
    class Tracing:  # a test double for the tracing API: what each trajectory would have written
        def __init__(self):
            self.written = []

        def rollout_trace_attr(self, **attrs):
            return _Block(self, attrs)

        def trace_span(self, *args, **kwargs):
            return _Block(self, {})

        def set_reward(self, reward, **details):
            self.written.append((reward, details))

        def get_tracer(self):
            return self

        def training(self, tid, record):
            self.written.append(record["entropy_mean"])

    class _Block:
        def __init__(self, owner, attrs):
            self.owner, self.attrs, self.id, self.outputs = owner, attrs, str(len(owner.written)), None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            if self.outputs:
                self.owner.written.append(self.outputs["response_text"])

    first, second, other = Tracing(), Tracing(), Tracing()
    runs = [_write(RunSpec("converging", 3), t) for t in (first, second)] + [_write(RunSpec("converging", 4), other)]
    assert first.written == second.written != other.written
    assert runs[0].share == runs[1].share
