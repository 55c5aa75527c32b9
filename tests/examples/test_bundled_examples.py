"""The three bundled examples on the embedded model, end to end (the path `make demo` takes)."""

import asyncio

import pytest

from rollscope.llm.embedded import EmbeddedLLM
from rollscope.runner import session
from rollscope.runner.config import load_config
from rollscope.runner.runner import Runner
from rollscope.store import TraceStore
from tests.cli.test_run_cli import rollscope

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llm():
    model = EmbeddedLLM()
    yield model
    asyncio.run(model.close())


@pytest.mark.parametrize(
    ("example", "tool"), [("gsm8k-calculator", "calculator"), ("python-tasks", "python"), ("search-qa", "search")]
)
def test_example_runs_on_the_embedded_model(tmp_path, llm, example, tool):
    config = load_config(example, ["limit=2", "sampling.temperature=0", f"trace_dir={tmp_path}"])
    runner = Runner(config, llm=llm, tokenizer=llm.tokenizer)
    runner.setup()
    asyncio.run(session.run_traced(runner))
    assert runner.stats.done == 2 and runner.stats.failed == 0
    assert all(o.reward is not None for o in runner.outcomes)
    with TraceStore(tmp_path) as store:
        trajectories = [store.get(r.id) for r in store.trajectories()]
    assert len(trajectories) == 2
    spans = [s for t in trajectories for s in t.spans]
    llm_spans = [s for s in spans if s.kind == "llm"]
    assert llm_spans and all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in llm_spans)
    assert any(f'"name": "{tool}"' in s.outputs["response_text"] for s in llm_spans)  # the model called the tool
    assert any(s.kind == "tool" for s in spans) and any(s.name == "reward" for s in spans)
    if example == "gsm8k-calculator":  # what the embedded model said, replayed token for token, checks out
        from rollscope.testing import replay

        outcome = replay(trajectories[0].id, str(tmp_path), tokenizer=llm.tokenizer)
        assert outcome.ok, outcome.differences
        # the bundled template renders the conversation (its tool calls too) to the tokens trained on
        checks = [s.attributes["rollscope.retokenization"] for s in spans if "rollscope.retokenization" in s.attributes]
        assert len(checks) == 2 and all(c["match"] for c in checks), checks


def test_make_demo_succeeds_as_insights_judge_it(tmp_path):
    """`make demo`'s command (greedy decoding: the run is the same every time), judged as the
    issue of a newcomer's first run asks: mean reward >= 0.75, no reply cut, at most one failed
    tool call."""
    from rollscope.analysis.insights import insights

    result = rollscope("run", "gsm8k-calculator", "--limit", "8", "--trace-dir", str(tmp_path / "t"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "8 of 8" in result.stdout and "rollscope traces ls --dir" in result.stdout
    with TraceStore(tmp_path / "t") as store:
        rewards = [t.reward for t in store.trajectories()]
        [run] = insights(store)
    assert len(rewards) == 8 and sum(rewards) / 8 >= 0.75, rewards
    signals = {s.name: s for s in run.signals}
    assert signals["truncated"].count == 0
    assert signals["tool_errors"].count <= 1 and signals["tool_errors"].total >= 8
    assert signals["turn_limit"].count == 0
