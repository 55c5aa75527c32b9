"""examples/tracing_demo.py (the tracing API on its own, no runner), run as a user would."""

import subprocess
import sys
from pathlib import Path

import pytest

from rollscope.store import TraceStore

DEMO = Path(__file__).parents[2] / "examples" / "tracing_demo.py"


@pytest.mark.slow
def test_demo_records_and_reads_back(tmp_path):
    out = subprocess.run(
        [sys.executable, str(DEMO), "--dir", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert f"trajectories in {tmp_path}: 24" in out.stdout
    assert "GRPO group step=1 sample=0" in out.stdout
    store = TraceStore(tmp_path)
    assert store.count(experiment="calculator") == 24
    assert {t.rollout_n for t in store.group(step=1, sample_index=2)} == {0, 1, 2, 3}
    t = store.trajectories(step=0, limit=1)[0]
    assert t.agent_name == "calculator_agent" and t.reward in (0.0, 1.0)
    [run] = t.tree()
    assert run.name == "CalculatorAgent.run"
    assert [c.kind for c in run.children][:2] == ["llm", "tool"]
