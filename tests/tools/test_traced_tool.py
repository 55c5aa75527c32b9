"""TracedTool: overrides traced with no decorator, failures and timeouts contained."""

import asyncio

import pytest
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollscope import tracing
from rollscope.tools import ToolError, TracedTool

SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a key up.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
)


class LookupTool(TracedTool):  # what a user writes: plain overrides, no decorator
    async def create(self, instance_id=None, **kwargs):
        return "inst-1", ToolResponse()

    async def execute(self, instance_id, parameters, **kwargs):
        if parameters.get("mode") == "raise":
            raise KeyError("no such key: k1")
        if parameters.get("mode") == "tool_error":
            raise ToolError("key must be lower case")
        if parameters.get("mode") == "slow":
            await asyncio.sleep(5)
        return ToolResponse(text=f"value of {parameters['key']}"), 0.5, {"hits": 1}

    async def calc_reward(self, instance_id, **kwargs):
        return 1.0

    async def release(self, instance_id, **kwargs):
        return None


class StrictLookup(LookupTool):  # an override of an override is traced too
    async def execute(self, instance_id, parameters, **kwargs):
        return await super().execute(instance_id, {**parameters, "key": parameters["key"].upper()}, **kwargs)


def _run(tool, *calls):
    async def main():
        with tracing.rollout_trace_attr(step=1, sample_index=0):
            iid, _ = await tool.create()
            results = [await tool.execute(iid, params) for params in calls]
            await tool.calc_reward(iid)
            await tool.release(iid)
            return results

    return asyncio.run(main())


def test_every_lifecycle_method_is_traced(local_tracer, read_store):
    [(response, reward, metrics)] = _run(LookupTool({}, SCHEMA), {"key": "k1"})
    assert (response.text, reward, metrics) == ("value of k1", 0.5, {"hits": 1})
    [t] = read_store().trajectories()
    assert [(s.kind, s.name) for s in t.spans] == [
        ("custom", "LookupTool.create"),
        ("tool", "LookupTool.execute"),
        ("reward", "LookupTool.calc_reward"),
        ("custom", "LookupTool.release"),
    ]
    execute = t.spans[1]
    assert execute.inputs == {"instance_id": "inst-1", "parameters": {"key": "k1"}}
    assert execute.outputs == {"text": "value of k1", "reward": 0.5, "metrics": {"hits": 1}}
    assert execute.attributes == {"tool.name": "lookup"}
    assert t.spans[2].outputs == 1.0
    assert t.num_tool_calls == 1


def test_override_chain_records_both_levels(local_tracer, read_store):
    [(response, _, _)] = _run(StrictLookup({}, SCHEMA), {"key": "k1"})
    assert response.text == "value of K1"
    spans = read_store().trajectories()[0].spans
    names = [s.name for s in spans if s.kind == "tool"]
    assert names == ["StrictLookup.execute", "LookupTool.execute"]


@pytest.mark.parametrize(
    ("mode", "expected", "error_type"),
    [
        ("raise", "Error: tool 'lookup' failed: KeyError: 'no such key: k1'", "KeyError"),
        ("tool_error", "Error: key must be lower case", "ToolError"),
    ],
)
def test_failures_become_error_text_and_error_spans(local_tracer, read_store, mode, expected, error_type):
    [(response, reward, metrics)] = _run(LookupTool({}, SCHEMA), {"key": "k1", "mode": mode})
    assert response.text == expected and reward == 0.0 and "error" in metrics
    [t] = read_store().trajectories()
    execute = next(s for s in t.spans if s.kind == "tool")
    assert (execute.status, execute.error_type) == ("error", error_type)
    assert t.status == "ok" and t.num_errors == 1  # the rollout itself went on


def test_timeout_from_config(local_tracer, read_store):
    [(response, _, _)] = _run(LookupTool({"timeout": 0.2}, SCHEMA), {"key": "k1", "mode": "slow"})
    assert response.text == "Error: tool 'lookup' timed out after 0.2s"
    execute = next(s for s in read_store().trajectories()[0].spans if s.kind == "tool")
    assert execute.error_type == "TimeoutError"


def test_missing_schema_is_a_clear_error():
    with pytest.raises(ValueError, match="LookupTool: no tool_schema given"):
        LookupTool({}, None)


def test_a_failed_calls_result_pickles_and_copies_as_the_tuple_verl_sees():
    """Ray pickles what a loop returns: a failed call's result whose failure holds a lock pickles
    and copies as a plain tuple does (the failure stays with this process's span)."""
    import copy
    import pickle
    import threading

    from rollscope.tools.traced_tool import FailedCall, error_response

    class Holding(Exception):
        def __init__(self):
            super().__init__("a tool's client failed")
            self.lock = threading.Lock()

    failed = error_response("search", "a tool's client failed", Holding())
    assert isinstance(failed, FailedCall) and isinstance(failed.failure, Holding)
    for copied in (pickle.loads(pickle.dumps(failed)), copy.deepcopy(failed), copy.copy(failed)):
        assert copied == tuple(failed) and type(copied) is tuple
        assert copied[0].text == "Error: a tool's client failed" and copied[1] == 0.0
