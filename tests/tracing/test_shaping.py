"""An llm span's usage attributes are derived where it is shaped, from its raw inputs and output."""

from dataclasses import dataclass

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
        "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ["stop"], "latency_s": 0.25,
    }  # fmt: skip


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
