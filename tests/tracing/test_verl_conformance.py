"""rollscope's verl tracing API beside verl's own (``verl.utils.rollout_trace``, installed), on the
same inputs: ``RolloutTraceConfig``'s singleton, ``rollout_trace_attr``'s parameters and its
``trace=False``, ``rollout_trace_op`` on methods and functions, sync and async. Code written for
verl's tracer moves over by changing its import; ``get_trajectory_info`` is compared in
test_verl_api.py."""

import asyncio
import inspect

import pytest
from verl.utils import rollout_trace as verl

from rollscope import tracing
from rollscope.tracing import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op

BOTH = pytest.mark.parametrize("api", ["verl", "rollscope"])


def config(api):
    return verl.RolloutTraceConfig if api == "verl" else RolloutTraceConfig


def held(cfg):
    instance = cfg.get_instance()
    return (
        cfg.get_backend(),
        cfg.enable_token2text(),
        cfg.get_client(),
        instance.project_name,
        instance.experiment_name,
        instance.max_samples_per_step_per_worker,
    )


def test_the_config_holds_what_verls_holds_set_once_until_reset():
    """A backend neither knows ('dummy') traces nothing in both; the first ``init`` holds."""
    seen = {}
    for api in ("verl", "rollscope"):
        cfg = config(api)
        cfg.reset()
        assert cfg.get_instance() is cfg.get_instance() is cfg()  # one instance
        cfg.init(
            project_name="p", experiment_name="e", backend="dummy", token2text=True, max_samples_per_step_per_worker=3
        )
        cfg.init(project_name="q", experiment_name="f", backend="other", token2text=False)
        seen[api] = held(cfg)
        cfg.reset()
        assert cfg.get_backend() is None and cfg.enable_token2text() is False
    assert seen["rollscope"] == seen["verl"] == ("dummy", True, None, "p", "e", 3)


def test_the_signatures_take_verls_arguments_in_verls_order():
    ours, theirs = inspect.signature(rollout_trace_attr), inspect.signature(verl.rollout_trace_attr)
    assert list(ours.parameters)[: len(theirs.parameters)] == list(theirs.parameters)
    for name, parameter in theirs.parameters.items():
        assert ours.parameters[name].default == parameter.default, name
    assert (
        inspect.signature(RolloutTraceConfig.init).parameters.keys()
        == inspect.signature(verl.RolloutTraceConfig.init).parameters.keys()
    )


def loop_class(decorator):
    class Loop:
        """A user's loop."""

        @decorator
        async def generate(self, prompt, *, temperature=1.0):
            """Its LLM turn."""
            return {"text": f"{prompt}@{temperature}"}

        @decorator
        def tool(self, expression):
            if expression == "boom":
                raise ZeroDivisionError("boom")
            return len(expression)

    return Loop


@pytest.mark.parametrize("traced", [False, True])
def test_a_decorated_method_returns_raises_and_reads_as_verls_does(traced, trace_dir):
    """Undecorated behaviour is kept by both decorators, untraced and traced: the same results, the
    same exception, the same name and docstring."""
    if traced:
        tracing.init_tracing(project="p", experiment="e", trace_dir=str(trace_dir))
    try:
        loops = {api: loop_class(d)() for api, d in (("verl", verl.rollout_trace_op), ("rollscope", rollout_trace_op))}
        for loop in loops.values():
            assert asyncio.run(loop.generate("hi", temperature=0.5)) == {"text": "hi@0.5"}
            assert loop.tool("1+2") == 3
            with pytest.raises(ZeroDivisionError, match="boom"):
                loop.tool("boom")
        for attribute in ("__name__", "__qualname__", "__doc__"):
            assert getattr(type(loops["rollscope"]).generate, attribute) == getattr(
                type(loops["verl"]).generate, attribute
            )
    finally:
        tracing.shutdown_tracing()


def test_trace_false_turns_off_every_nested_op_and_comes_back_after_an_exception(trace_dir, read_store):
    """verl: ``trace=False`` under a configured backend switches its ops off for the block, back on
    after it even when it raised; rollscope records nothing inside such a block, and again after."""
    verl.RolloutTraceConfig.reset()
    verl.RolloutTraceConfig.init(project_name="p", experiment_name="e", backend="dummy")
    tracing.init_tracing(project="p", experiment="e", trace_dir=str(trace_dir))
    loop = loop_class(rollout_trace_op)()
    try:
        for attr in (verl.rollout_trace_attr, rollout_trace_attr):
            with pytest.raises(RuntimeError), attr(step=1, sample_index=0, rollout_n=0, trace=False):
                assert verl._trace_enabled.get() is (attr is not verl.rollout_trace_attr)
                loop.tool("untraced")
                raise RuntimeError
            assert verl._trace_enabled.get() is True
        with rollout_trace_attr(step=1, sample_index=1, rollout_n=0):
            loop.tool("traced")
        [t] = read_store().trajectories()
        assert t.sample_index == 1 and [s.name.rsplit(".", 2)[-2:] for s in t.spans] == [["Loop", "tool"]]
    finally:
        verl.RolloutTraceConfig.reset()
        tracing.shutdown_tracing()


class TracedClass:
    """The class verl's own tests/utils/test_rollout_trace_on_cpu.py traces (read for what it checks)."""

    @rollout_trace_op
    async def my_method(self, a, b="default"):
        return f"result: {a}, {b}"

    @rollout_trace_op
    async def middle_method(self, a, b="default"):
        await self.my_method("test_a1", b="test_b1")
        return f"result: {a}, {b}"

    @rollout_trace_op
    async def my_method_with_exception(self):
        raise ValueError("Test Exception")


def test_an_op_is_named_by_its_class_and_method_with_its_arguments_bound_as_verls(trace_dir, read_store, monkeypatch):
    """verl's test: op ``TracedClass.my_method``, inputs ``{"a": ..., "b": ...}`` (no ``self``), the
    result as output, an exception recorded and raised on; nested ops nest. Trajectories opened
    without a name are called as verl calls them (``rollout_trace``)."""
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(trace_dir))
    RolloutTraceConfig.reset()
    RolloutTraceConfig.init(project_name="my-project", experiment_name="my-experiment", backend="local")
    instance = TracedClass()

    async def calls():
        with rollout_trace_attr(step=1, sample_index=2, rollout_n=3):
            assert await instance.middle_method("test_a", b="test_b") == "result: test_a, test_b"
            with pytest.raises(ValueError, match="Test Exception"):
                await instance.my_method_with_exception()

    try:
        asyncio.run(calls())
        [t] = read_store().trajectories()
    finally:
        RolloutTraceConfig.reset()
    assert (t.agent_name, t.step, t.sample_index, t.rollout_n) == ("rollout_trace", 1, 2, 3)
    assert inspect.signature(verl.rollout_trace_attr).parameters["name"].default == "rollout_trace"
    middle, failed = t.tree()
    assert middle.name.endswith("TracedClass.middle_method")
    assert (middle.inputs, middle.outputs) == ({"a": "test_a", "b": "test_b"}, "result: test_a, test_b")
    [inner] = middle.children
    assert (inner.inputs, inner.outputs) == ({"a": "test_a1", "b": "test_b1"}, "result: test_a1, test_b1")
    assert (failed.status, failed.error_type, failed.error_message) == ("error", "ValueError", "Test Exception")


def test_get_client_answers_the_tracer_and_no_backend_traces_nothing(trace_dir, monkeypatch):
    """verl's ``get_client`` answers its backend's client (weave's, mlflow's); rollscope's answers
    its ``Tracer``, because the backends' clients live in the trace sidecar, not in this process
    (docs/tracing.md, "Where rollscope differs from verl"). A backend neither knows traces nothing."""
    monkeypatch.setenv("ROLLSCOPE_TRACE_DIR", str(trace_dir))
    RolloutTraceConfig.reset()
    RolloutTraceConfig.init(project_name="p", experiment_name="e", backend="dummy")
    try:
        assert RolloutTraceConfig.get_client() is None and tracing.get_tracer() is None
        assert asyncio.run(TracedClass().my_method(10)) == "result: 10, default"
    finally:
        RolloutTraceConfig.reset()
    RolloutTraceConfig.init(project_name="p", experiment_name="e", backend="local")
    try:
        assert RolloutTraceConfig.get_client() is tracing.get_tracer() is not None
    finally:
        RolloutTraceConfig.reset()


def test_a_backend_module_a_test_stands_in_for_counts_as_installed(monkeypatch):
    """verl's tests put MagicMocks in ``sys.modules`` for weave, mlflow and trackio: such a module has
    no ``__spec__``, and ``find_spec`` raises ValueError for it. It is importable, so not missing."""
    import sys
    import types

    from rollscope._extras import MissingExtra, require

    stand_in = types.ModuleType("rollscope_stand_in_backend")
    stand_in.__spec__ = None
    monkeypatch.setitem(sys.modules, "rollscope_stand_in_backend", stand_in)
    require("weave", "rollscope_stand_in_backend", feature="a backend")  # no error
    with pytest.raises(MissingExtra, match="rollscope_nowhere_to_be_found"):
        require("weave", "rollscope_nowhere_to_be_found", feature="a backend")
