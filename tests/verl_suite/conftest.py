"""verl's own tests of its tracing API (``tests/utils/test_rollout_trace_on_cpu.py`` of
volcengine/verl at b178a3cd5), run against rollscope's with only their import changed: code
written for verl's tracer moves over by changing its import.

Three things of verl's test setup are provided here: its MLflow integration test runs, against an
MLflow store in a temporary directory; its async tests run on an event loop of their
own (verl runs them with pytest-asyncio's auto mode), and the tests that assert on weave's client
internals through a ``MagicMock`` of the weave module are left out, each with the reason:
rollscope's weave backend runs in the trace sidecar, a process of its own that imports the real
weave — a mock patched into this process's ``sys.modules`` is never called there, and the real
client would try to reach W&B. rollscope's weave backend is tested against the real weave client
in ``tests/tracing/test_weave_*.py``.
"""

import asyncio
import inspect
import os

import pytest

# verl's MLflow integration test needs no account: an MLflow store in a temporary directory (below)
os.environ.setdefault("RUN_MLFLOW_INTEGRATION_TESTS", "true")

WEAVE_MOCK_INTERNALS = {
    "test_rollout_trace_with_tracer": "asserts weave's client.create_call/finish_call through a mock",
    "test_rollout_trace_with_exception": "asserts weave's client.finish_call(exception=) through a mock",
    "test_trace_disabled_with_trace_false": "counts weave's client.create_call through a mock",
    "test_trace_false_disables_nested_trace_ops": "counts weave's client.create_call through a mock",
    "test_trace_enabled_restored_after_exception": "counts weave's client.create_call through a mock",
}


@pytest.fixture(autouse=True)
def mlflow_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlruns.db")
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(tmp_path / "traces"))
    yield
    from rollscope.tracing import RolloutTraceConfig

    RolloutTraceConfig.reset()  # the tracer a test's config started ends with the test


def pytest_collection_modifyitems(items):
    for item in items:
        reason = WEAVE_MOCK_INTERNALS.get(item.name)
        if reason is not None and item.path.name == "test_rollout_trace_on_cpu.py":
            item.add_marker(pytest.mark.skip(reason=f"weave client internals through a mock: {reason}"))


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """verl's ``async def`` tests, each on a fresh event loop."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**arguments))
    return True
