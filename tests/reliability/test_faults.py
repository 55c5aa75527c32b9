"""Trace backends that are down, slow (5 s a call) or raising, beside the local store, under the
runner: every rollout finishes, the local store has every trajectory, what the faulty backend lost
is counted, and shutdown returns. (Throughput against tracing off: benchmarks/bench_faults.py.)"""

import asyncio
import threading

import pytest

from rollscope import tracing
from rollscope.llm import ScriptedLLM
from rollscope.runner.config import load_config
from rollscope.runner.runner import Runner
from rollscope.store import TraceStore
from rollscope.testing import make_model_dir
from tests.doubles.fault_backends import register_fault_backends

pytestmark = pytest.mark.slow
REPLIES = [
    '<tool_call>{"name": "calculator", "arguments": {"expression": "61 * 16"}}</tool_call>',
    "The answer is 976.",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(make_model_dir(tmp_path_factory.mktemp("model")))


@pytest.mark.parametrize("fault", ["fault-down", "fault-slow", "fault-raising"])
def test_faulty_backend_beside_local(tmp_path, tokenizer, fault):
    register_fault_backends(delay_s=5.0)
    config = load_config(
        "gsm8k-calculator", ["limit=40", "n=5", "concurrency=32", f"trace_dir={tmp_path}", f"backend=local,{fault}"]
    )
    runner = Runner(config, llm=ScriptedLLM(tokenizer, REPLIES), tokenizer=tokenizer)
    runner.setup()
    tracing.init_tracing(backend=config.backend, trace_dir=str(tmp_path), max_queue=200)
    asyncio.run(runner.run())
    assert runner.stats.done == 200 and runner.stats.failed == 0

    tracing.flush_tracing(timeout=2)  # the faulty backend may never confirm; the local one does
    stats = tracing.stats()["backends"]
    assert stats["local"]["errors"] == 0 and stats["local"]["dropped"] == 0
    lost = stats[fault]["errors"] + stats[fault]["dropped"] + stats[fault]["queued"]
    assert lost > 0
    done = threading.Thread(target=tracing.shutdown_tracing, kwargs={"timeout": 3})
    done.start()
    done.join(60)
    assert not done.is_alive(), "shutdown hung on a faulty backend"
    with TraceStore(tmp_path) as store:
        assert store.count(status="ok") == 200
        assert {t.num_spans for t in store.trajectories()} == {5}  # run, 2 llm turns, the tool call, the reward
