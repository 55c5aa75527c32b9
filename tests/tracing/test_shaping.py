"""An llm span's usage attributes are derived where it is shaped, from its raw inputs and output."""

from dataclasses import dataclass

import pytest

from rollscope.tracing._payload import PayloadShaper
from rollscope.tracing._redaction import Redactor
from rollscope.tracing._shaping import EventShaper
from rollscope.tracing.spans import Span, SpanKind, Trajectory


@dataclass
class TokenOutput:  # the fields of verl's TokenOutput that matter here
    token_ids: list
    stop_reason: str | None


def _trajectory():
    return Trajectory(project="p", experiment="e", step=0, sample_index=0, rollout_n=0, validate=False, agent_name="a")


def _shaped(inputs, output, attributes=None, kind=SpanKind.LLM, max_chars=20_000):
    span = Span("llm.generate", kind, _trajectory(), None, inputs, attributes)
    span.finish(output)
    span.end_ns = span.start_ns + 250_000_000
    return EventShaper(PayloadShaper(Redactor(), max_chars))(span)


def test_token_counts_finish_reason_and_latency_come_from_the_span():
    span = _shaped({"prompt_ids": list(range(12)), "sampling_params": {}}, TokenOutput(list(range(7)), "stop"))
    assert span.attributes == {
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["stop"],
        "latency_s": 0.25,
    }


def test_counts_are_taken_before_truncation_and_from_a_packed_output():
    # the trace sidecar receives the output as its fields; a long prompt is truncated when shaped
    span = _shaped({"prompt_ids": list(range(5000))}, {"token_ids": [1, 2], "stop_reason": None}, max_chars=200)
    assert span.attributes["gen_ai.usage.input_tokens"] == 5000
    assert span.attributes["gen_ai.usage.output_tokens"] == 2
    assert span.attributes["gen_ai.response.finish_reasons"] == [None]


def test_attributes_the_caller_set_win_and_the_callers_dict_is_left_alone():
    given = {"gen_ai.usage.input_tokens": 3, "verl.traced": "weave"}
    span = _shaped({"prompt_ids": [1, 2, 3, 4]}, TokenOutput([5], "length"), given)
    assert span.attributes["gen_ai.usage.input_tokens"] == 3 and span.attributes["verl.traced"] == "weave"
    assert given == {"gen_ai.usage.input_tokens": 3, "verl.traced": "weave"}


def test_other_spans_get_no_usage_attributes():
    assert _shaped({"prompt_ids": [1]}, TokenOutput([2], "stop"), kind=SpanKind.TOOL).attributes == {}


class ChangedWhileRead(dict):
    """A dict the traced code changes while the exporter thread walks it (what a rollout mutating
    its own output does when the exporter lags on a busy machine)."""

    def __iter__(self):
        raise RuntimeError("dictionary changed size during iteration")

    items = keys = values = __iter__


UNREADABLE = "<unreadable ChangedWhileRead: RuntimeError: dictionary changed size during iteration>"


def test_a_payload_that_cannot_be_read_costs_its_own_field_with_the_reason():
    secret = "sk-ant-" + "a1b2c3d4" * 5
    span = Span("llm.generate", SpanKind.LLM, _trajectory(), "parent", {"prompt_ids": [1, 2]}, {"k": secret})
    span.finish({"token_ids": [1], "extra": ChangedWhileRead(a=1)})
    shaper = EventShaper(PayloadShaper(Redactor(), 20_000))
    shaped = shaper(span)
    assert (shaped.name, shaped.kind, shaped.parent_id, shaped.status) == ("llm.generate", SpanKind.LLM, "parent", "ok")
    assert shaped.inputs == {"prompt_ids": [1, 2]}
    assert shaped.outputs == {"token_ids": [1], "extra": UNREADABLE}
    assert shaped.attributes["k"] == "[REDACTED]" and shaper.unshapeable == 0


class UnreadableUsage(dict):
    """Inputs that fail where the shaper reads an llm call's usage from them, before any field."""

    def get(self, key, default=None):
        raise RuntimeError("no usage for you")


def test_a_span_that_cannot_be_read_at_all_keeps_its_place_with_the_reason():
    span = Span("llm.generate", SpanKind.LLM, _trajectory(), "parent", UnreadableUsage(prompt_ids=[1]), {})
    span.finish(None)
    shaper = EventShaper(PayloadShaper(Redactor(), 20_000))
    shaped = shaper(span)
    assert (shaped.name, shaped.kind, shaped.parent_id, shaped.status) == ("llm.generate", SpanKind.LLM, "parent", "ok")
    assert shaped.inputs == "<payload not recorded: RuntimeError: no usage for you>"
    assert shaped.attributes == {"rollscope.shape_error": shaped.inputs} and shaped.outputs is None
    assert shaper.unshapeable == 1


@pytest.mark.parametrize("sidecar", [True, False], ids=["through the sidecar", "in process"])
def test_such_a_span_is_stored_in_its_trajectory(sidecar, tmp_path):
    from rollscope import tracing
    from rollscope.store import TraceStore

    tracing.init_tracing(trace_dir=str(tmp_path), sidecar=sidecar)
    try:
        with (
            tracing.rollout_trace_attr(step=1, sample_index=0),
            tracing.trace_span("run", kind="agent"),
            tracing.trace_span("llm.generate", kind="llm") as turn,
        ):
            turn.outputs = ChangedWhileRead(token_ids=[1])
        assert tracing.flush_tracing()
    finally:
        tracing.shutdown_tracing()
    [t] = TraceStore(tmp_path).trajectories()
    [run] = t.tree()
    [turn] = run.children
    assert (t.num_spans, t.num_llm_calls, turn.name, turn.kind) == (2, 1, "llm.generate", "llm")
    assert turn.outputs == UNREADABLE


def test_token_ids_left_unchecked_are_said_once_and_a_span_of_text_alone_says_nothing(caplog):
    """In the sidecar (a tokenizer loader given) an llm span naming no tokenizer: its ids cannot be
    checked for secrets, which is said, once; a span carrying only text has nothing unchecked."""
    shaper = EventShaper(PayloadShaper(Redactor(), 20_000), load_tokenizer=lambda name: None)

    def llm(inputs, output):
        span = Span("llm.generate", SpanKind.LLM, _trajectory(), None, inputs, None)
        span.finish(output)
        shaper(span)

    with caplog.at_level("WARNING", logger="rollscope.tracing"):
        llm({"prompt": "What is 2 + 2?"}, {"response_text": "4"})
        assert "tokenizer" not in caplog.text
        llm({"prompt_ids": [1, 2, 3]}, {"token_ids": [4], "stop_reason": "stop"})
        llm({"prompt_ids": [1, 2, 3]}, {"token_ids": [5], "stop_reason": "stop"})
    assert caplog.text.count("not checked for the tokens of a secret") == 1
