"""Shapes whole trace events: which fields of a span, trajectory or reward become JSON-safe,
redacted, truncated values (``PayloadShaper`` does the values themselves).

Runs where the payloads are turned into what backends store: on the exporter thread when a
backend lives in the traced process (or token2text needs the traced object's tokenizer), else in
the trace sidecar, off the traced process entirely.
"""

from __future__ import annotations

from rollscope.tracing import exporter as ev
from rollscope.tracing.callargs import CallArgs
from rollscope.tracing.payload import PayloadShaper
from rollscope.tracing.spans import Span, Trajectory


class EventShaper:
    def __init__(self, shaper: PayloadShaper) -> None:
        self.shaper = shaper

    def __call__(self, event: Span | tuple) -> Span | tuple:
        shape = self.shaper.shape
        if type(event) is Span:
            self._span(event, ended=True)
            return event
        kind = event[0]
        if kind == ev.SPAN_START:
            self._span(event[1], ended=False)
        elif kind == ev.TRAJECTORY_START or kind == ev.TRAJECTORY_END:
            t: Trajectory = event[1]
            if t.attributes:
                t.attributes = shape(t.attributes)
            if t.error_message is not None:
                t.error_message = shape(t.error_message)
        elif kind == ev.REWARD:
            return (kind, event[1], event[2], shape(event[3]))
        return event

    def _span(self, span: Span, ended: bool) -> None:
        shape = self.shaper.shape
        if not span.shaped:  # inputs once, at the first event seen for the span
            raw = span.inputs
            if isinstance(raw, CallArgs):
                if self.shaper.token2text:
                    span.decoder = getattr(raw.owner(), "tokenizer", None)
                raw = raw.bind()
            span.inputs = shape(raw, span.decoder)
            span.shaped = True
        span.attributes = shape(span.attributes) if span.attributes else {}
        if ended:
            span.outputs = shape(span.outputs, span.decoder)
            if span.error_message is not None:
                span.error_message = shape(span.error_message)
