"""The trace events' named fields: each maker puts its values where the names say, the backends'
handlers take them in that order, and the wire carries them there."""

import inspect

from rollscope.tracing import _events as ev
from rollscope.tracing import _wire as wire
from rollscope.tracing._runtime import Tracer
from rollscope.tracing.backends.base import TraceBackend


def test_each_maker_puts_its_values_where_the_field_names_say(trace_dir):
    tracer = Tracer(backend="local", trace_dir=str(trace_dir), sidecar=False)
    made: list = []
    tracer.submit = made.append
    t = tracer.open_trajectory(step=3, sample_index=1, rollout_n=2)
    tracer.reward(t.id, 0.5, {"acc": 1.0})
    tracer.training(t.id, {"advantage": -0.25})
    tracer.close_trajectory(t)
    tracer.close(10)

    start, reward, training, end = made
    assert (start[ev.KIND], end[ev.KIND]) == (ev.TRAJECTORY_START, ev.TRAJECTORY_END)
    assert start[ev.TRAJECTORY] is t and end[ev.TRAJECTORY] is t
    assert reward[ev.KIND] == ev.REWARD and reward[ev.TRAJECTORY_ID] == t.id
    assert (reward[ev.REWARD_VALUE], reward[ev.REWARD_DETAILS]) == (0.5, {"acc": 1.0})
    assert training[ev.KIND] == ev.TRAINING and training[ev.TRAJECTORY_ID] == t.id
    assert training[ev.TRAINING_RECORD] == {"advantage": -0.25}
    assert ev.flush("m")[ev.MARKER] == "m" and ev.position(7)[ev.RECEIVED] == 7


def test_a_backends_handlers_take_the_fields_in_their_order():
    """The exporter calls ``handler(*event[1:])``: each handler's parameters are the fields after
    the kind, in the order the names give them."""
    expected = {
        "on_trajectory_start": [ev.TRAJECTORY],
        "on_span_start": [ev.SPAN],
        "on_trajectory_end": [ev.TRAJECTORY],
        "on_reward": [ev.TRAJECTORY_ID, ev.REWARD_VALUE, ev.REWARD_DETAILS],
        "on_training": [ev.TRAJECTORY_ID, ev.TRAINING_RECORD],
    }
    for handler, fields in expected.items():
        parameters = list(inspect.signature(getattr(TraceBackend, handler)).parameters)[1:]
        assert len(parameters) == len(fields) and fields == list(range(1, len(fields) + 1)), handler


def test_the_wire_keeps_each_field_in_its_place(trace_dir):
    tracer = Tracer(backend="local", trace_dir=str(trace_dir), sidecar=False)
    made: list = []
    tracer.submit = made.append
    t = tracer.open_trajectory(step=4)
    tracer.reward(t.id, 1.0, {"format": 0.0})
    tracer.training(t.id, {"policy_version": 3})
    tracer.close_trajectory(t)
    tracer.close(10)

    start, reward, training, end = (wire.unpack(wire.join([wire.pack(e)]))[0] for e in made)
    assert start[ev.KIND] == ev.TRAJECTORY_START and start[ev.TRAJECTORY].id == t.id
    assert start[ev.TRAJECTORY].step == 4 and end[ev.TRAJECTORY].id == t.id
    assert reward[ev.TRAJECTORY_ID] == t.id and reward[ev.REWARD_VALUE] == 1.0
    assert reward[ev.REWARD_DETAILS] == {"format": 0.0}
    assert training[ev.TRAINING_RECORD] == {"policy_version": 3}
