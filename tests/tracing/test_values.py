"""Every value reaches the store as what it is (docs/tracing.md, "What a value becomes"): the fixed
table of kinds and a property test over nested structures of them, traced through the sidecar (and
in process) into the local store and read back."""

from decimal import Decimal

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rollscope import tracing
from rollscope.store import TraceStore
from tests.tracing.value_kinds import TABLE, Color, Level, Mode, Step, plain


def _trace_table() -> None:
    with tracing.rollout_trace_attr(step=0, sample_index=0):
        for name, value, _ in TABLE:
            with tracing.trace_span(name, inputs=value) as span:
                span.outputs = value


@pytest.mark.parametrize("sidecar", [True, False], ids=["through the sidecar", "in process"])
def test_every_kind_reads_back_as_the_table_says(sidecar, trace_dir):
    tracing.init_tracing(trace_dir=str(trace_dir), sidecar=sidecar)
    _trace_table()
    assert tracing.flush_tracing(60)
    assert all(s["errors"] == 0 for s in tracing.stats()["backends"].values())
    [t] = TraceStore(trace_dir).trajectories()
    stored = {s.name: s for s in t.spans}
    assert len(stored) == len(TABLE)  # no span lost to a hostile value
    for name, _, expected in TABLE:
        assert stored[name].inputs == expected, name
        assert stored[name].outputs == expected, name


class Reward:
    """A tool as RL code writes one: numpy in, numpy out."""

    @tracing.rollout_trace_op(kind="tool")
    async def calc_reward(self, instance_id, scores, weights):
        return np.float32((scores * weights).sum()), {"per_item": scores * weights, "best": np.argmax(scores)}


def test_a_traced_calls_numpy_arguments_and_result_are_numbers(trace_dir, read_store):
    import asyncio

    tracing.init_tracing(trace_dir=str(trace_dir))

    async def main():
        with tracing.rollout_trace_attr(step=1, sample_index=0):
            await Reward().calc_reward("i1", np.array([0.5, 1.0]), np.float32(2.0))

    asyncio.run(main())
    [span] = read_store().trajectories()[0].spans
    assert span.inputs == {"instance_id": "i1", "scores": [0.5, 1.0], "weights": 2.0}
    assert span.outputs == [3.0, {"per_item": [1.0, 2.0], "best": 1}]


# Strings under 8 characters: redaction (which the property is not about) leaves them alone.
_text = st.text(st.characters(codec=None, exclude_categories=("Cs",)) | st.sampled_from("\ud800\udcff"), max_size=7)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    _text,
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.floats(width=32).map(np.float32),
    st.booleans().map(np.bool_),
    st.integers(0, 255).map(np.uint8),
    st.binary(max_size=40),
    st.sampled_from([Color.RED, Mode.GREEDY, Level.HIGH]),
    st.datetimes(),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    hnp.arrays(st.sampled_from([np.int32, np.float64, np.bool_]), hnp.array_shapes(max_dims=2, max_side=3)),
    st.lists(st.integers(-1000, 1000), max_size=4).map(lambda xs: torch.tensor(xs, dtype=torch.int64)),
)


def _object_array(items):
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_text, inner, max_size=4),
        st.frozensets(st.integers(), max_size=4),
        st.lists(inner, min_size=1, max_size=3).map(_object_array),
        st.builds(Step, reward=st.floats(width=32).map(np.float32), ids=st.tuples(inner)),
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def sidecar_store(tmp_path_factory):
    """One tracer (its sidecar started once) for every example."""
    trace_dir = tmp_path_factory.mktemp("values")
    tracing.init_tracing(trace_dir=str(trace_dir))
    yield trace_dir
    tracing.shutdown_tracing()


@pytest.fixture(autouse=True)
def _no_tracer_leak():
    """(this module's tracer lives as long as the module: conftest's per-test shutdown is replaced)"""
    yield


_examples = iter(range(10**9))


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(value=_values)
def test_nested_values_read_back_as_their_plain_form(sidecar_store, value):
    n = next(_examples)
    with tracing.rollout_trace_attr(step=n, sample_index=0), tracing.trace_span("v", inputs=value) as span:
        span.outputs = {"result": value}
    assert tracing.flush_tracing(60)
    [t] = TraceStore(sidecar_store).trajectories(step=n)
    [stored] = t.spans
    assert stored.inputs == plain(value)
    assert stored.outputs == {"result": plain(value)}


_numbers = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.floats(width=32).map(np.float32),
    st.sampled_from([Level.HIGH]),
    st.decimals(allow_nan=False, places=2),
)


@settings(max_examples=400, deadline=None)
@example(items=[0, float("nan")])
@example(items=[1, float("-inf"), 2])
@example(items=[1, 2**63])
@example(items=[1, 2**53 + 1])
@example(items=[1, np.int64(2)])
@example(items=[0.5, np.float32(1)])
@example(items=[1, True, Level.HIGH])
@example(items=[0, Decimal("Infinity"), Decimal("-Infinity")])  # (their sum raises InvalidOperation)
@given(
    items=st.one_of(
        st.lists(st.integers(), min_size=1, max_size=300),
        st.lists(st.floats(), min_size=1, max_size=300),
        st.lists(_numbers, min_size=1, max_size=300),
    )
)
def test_a_list_of_numbers_is_shaped_as_its_items_are_one_by_one(items):
    """The shaper checks the big number lists (token ids, log-probabilities) at once: whatever
    such a list holds (an int past 64 bits, a NaN, a numpy scalar, a bool), it becomes what its
    items become one by one."""
    import orjson

    from rollscope.tracing._payload import NoRedaction, PayloadShaper

    shaper = PayloadShaper(NoRedaction())
    assert orjson.dumps(shaper.shape(items)) == orjson.dumps([shaper.shape(x) for x in items])
    assert orjson.dumps(shaper.shape(tuple(items))) == orjson.dumps([shaper.shape(x) for x in items])
