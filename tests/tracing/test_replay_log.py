"""The sidecar parent's replay log, without a sidecar: what a store continued in the traced process
gets again — every kept event from its committed position on, none it already has — and, past the
bound, exactly which events can no longer be given back."""

from rollscope.tracing import _wire as wire
from rollscope.tracing._sidecar.replay_log import ReplayLog


def frames_of(log, numbers):
    """Send events ``numbers`` as frames of three, as the parent's sender does."""
    for i in range(0, len(numbers), 3):
        part = numbers[i : i + 3]
        log.keep(part[0], part[-1] + 1, wire.join([wire.encode(("event", n)) for n in part]))


def test_a_resumed_store_gets_every_event_after_its_position_once():
    log = ReplayLog(lambda body: [e[1] for e in wire.unpack(body)])
    frames_of(log, list(range(12)))
    log.stored(6)  # the store reported events 0-5 stored: their frames are let go
    assert [n for part in log.since(0) for n in part] == list(range(6, 12))
    assert [n for part in log.since(7) for n in part] == list(range(7, 12))  # its committed position: 7
    assert log.kept_from == 0
    log.clear()
    assert list(log.since(0)) == [] and log.bytes == 0


def test_past_its_bound_the_oldest_frames_go_and_say_where_the_log_starts():
    nothing = ReplayLog(lambda body: [e[1] for e in wire.unpack(body)], max_bytes=0)
    frames_of(nothing, list(range(6)))
    assert nothing.kept_from == 6 and list(nothing.since(0)) == [] and nothing.bytes == 0
    bounded = ReplayLog(lambda body: [e[1] for e in wire.unpack(body)], max_bytes=10**6)
    frames_of(bounded, list(range(6)))
    one_frame = bounded.bytes // 2
    bounded.max_bytes = one_frame  # room for one frame of three
    frames_of(bounded, [6, 7, 8])
    assert bounded.kept_from == 6 and [n for p in bounded.since(0) for n in p] == [6, 7, 8]
