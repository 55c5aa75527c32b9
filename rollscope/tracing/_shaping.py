"""Shapes whole trace events: which fields of a span, trajectory or reward become JSON-safe,
redacted, truncated values (``PayloadShaper`` does the values themselves).

Runs where the payloads are turned into what backends store: on the exporter thread when a
backend lives in the traced process (or token2text needs the traced object's tokenizer), else in
the trace sidecar, off the traced process entirely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rollscope.semconv import (
    CONSTRAINED,
    FINISH_REASONS,
    INPUT_TOKENS,
    LATENCY_S,
    OUTPUT_TOKENS,
    PROMPT_BASE,
    PROMPT_IDS_ADDED,
    PROMPT_TEXT_ADDED,
    REDACTED_TOKENS,
    RETOKENIZATION,
    RETOKENIZATION_REQUEST,
    TOOL_SCHEMAS,
)
from rollscope.tracing import _events as ev
from rollscope.tracing._callargs import CallArgs
from rollscope.tracing._payload import UNRECORDED, PayloadShaper, carries_token_ids, unrecorded
from rollscope.tracing._turns import TurnTexts
from rollscope.tracing._wire import tokenizer_name
from rollscope.tracing.spans import Span, SpanKind, Trajectory
from rollscope.trajectory.decoders import fingerprint
from rollscope.trajectory.retokenization import check_request
from rollscope.trajectory.turns import is_continuation, text_after

log = logging.getLogger("rollscope.tracing")


class EventShaper:
    """``load_tokenizer``: where token2text runs outside the traced process (the sidecar), spans
    carry their tokenizer's name, and this loads (and keeps) a tokenizer by name."""

    def __init__(self, shaper: PayloadShaper, load_tokenizer: Callable[[str], Any] | None = None) -> None:
        self.shaper = shaper
        self.load_tokenizer = load_tokenizer
        self.unshapeable = 0  # spans kept with their payloads replaced (``_span_or_placeholder``)
        self.said_unnamed = False
        self.turns = TurnTexts()  # what a continuing llm turn's added tokens are decoded after

    def refresh_secrets(self) -> None:
        """Environment secrets set since tracing started are redacted from now on."""
        self.shaper.redactor.refresh_environment()

    def __call__(self, event: Span | tuple) -> Span | tuple:
        shape = self.shaper.shape
        if type(event) is Span:
            self._span_or_placeholder(event, ended=True)
            return event
        kind = event[ev.KIND]
        if kind == ev.SPAN_START:
            self._span_or_placeholder(event[ev.SPAN], ended=False)
        elif kind == ev.TRAJECTORY_START or kind == ev.TRAJECTORY_END:
            t: Trajectory = event[ev.TRAJECTORY]
            if kind == ev.TRAJECTORY_END:
                self.turns.forget(t.id)
            # plain columns too: a secret in an experiment or agent name is as stored as one in a payload
            t.experiment, t.agent_name, t.project = shape(t.experiment), shape(t.agent_name), shape(t.project)
            if t.attributes:
                t.attributes = shape(t.attributes)
            if t.error_message is not None:
                t.error_message = shape(t.error_message)
        elif kind == ev.REWARD:
            return (kind, event[ev.TRAJECTORY_ID], event[ev.REWARD_VALUE], shape(event[ev.REWARD_DETAILS]))
        return event

    def _span_or_placeholder(self, span: Span, ended: bool) -> None:
        """A span whose payloads cannot be shaped (a container the traced code changed while this
        thread read it, an object that fails when walked) keeps its place in the tree, its name,
        kind, timing and status, with what went wrong in place of the payloads: never dropped."""
        try:
            self._span(span, ended)
        except Exception as exc:
            self.unshapeable += 1
            problem = unrecorded(exc)
            span.name = self.shaper.shape(span.name) if isinstance(span.name, str) else "span"
            span.inputs, span.outputs, span.shaped = self.shaper.shape(problem), None, True
            span.attributes = {UNRECORDED: span.inputs}
            if span.error_message is not None:
                span.error_message = self.shaper.shape(str(span.error_message))

    def _say_unchecked(self, span: Span) -> None:
        """Once: token ids left unchecked for secrets because their tokenizer cannot be loaded here.
        Said only where the span does carry token ids (a span of text alone has nothing unchecked)."""
        if carries_token_ids(span.inputs) or carries_token_ids(span.outputs):
            self.said_unnamed = True
            log.warning(
                "an llm span's tokenizer has no directory the trace sidecar can load it from (one "
                "built in memory?): its token ids are stored as they came, not checked for the "
                "tokens of a secret (nor decoded, with token2text)"
            )

    def _span(self, span: Span, ended: bool) -> None:
        shape = self.shaper.shape
        span.name = shape(span.name)
        llm = span.kind == SpanKind.LLM
        attributes = dict(span.attributes) if span.attributes else {}
        redacted_before = self.shaper.redacted_tokens
        if self.load_tokenizer is not None:  # in the sidecar: the tokenizer the span named
            if type(span.decoder) is str:
                span.decoder = self.load_tokenizer(span.decoder)
            elif llm and span.decoder is None and self.shaper.tokenizer is None and not self.said_unnamed:
                self._say_unchecked(span)
        if not span.shaped:  # inputs once, at the first event seen for the span
            raw = span.inputs
            if isinstance(raw, CallArgs):
                span.decoder = getattr(raw.owner(), "tokenizer", None)
                raw = raw.bind()
            if llm:
                _input_usage(raw, attributes)
                raw = _without_unset_kwargs(raw)
                recorded, added = raw, None
                if is_continuation(raw) and span.decoder is not None:
                    raw, added = self._continuation(span, raw)
                if ended:
                    self.turns.remember(span.trajectory_id, span.id, recorded, span.outputs, added)
            span.inputs = shape(raw, span.decoder)
            span.shaped = True
        if ended:
            if RETOKENIZATION_REQUEST in attributes:  # the loop's chat-template check, run here
                drift = check_request(attributes.pop(RETOKENIZATION_REQUEST))
                if drift is not None:
                    attributes[RETOKENIZATION] = self._drift_without_secrets(drift, span.decoder)
            if llm:
                _output_usage(span, attributes)
            span.outputs = shape(span.outputs, span.decoder)
            if span.error_message is not None:
                span.error_message = shape(span.error_message)
        redacted_now = self.shaper.redacted_tokens - redacted_before
        if redacted_now:
            attributes[REDACTED_TOKENS] = attributes.get(REDACTED_TOKENS, 0) + redacted_now
        span.attributes = shape(attributes) if attributes else {}

    def _drift_without_secrets(self, drift: dict[str, Any], decoder: Any) -> dict[str, Any]:
        """The retokenization check's token windows (both sides, at each difference) with the
        tokens of a secret replaced, as the turns' own ids are."""
        if decoder is None:
            return drift
        for part in [drift, *drift.get("differences", ())]:
            for side in ("rollout", "template"):
                ids = part.get(side)
                if type(ids) is list and ids and all(type(i) is int for i in ids):
                    try:
                        part[side] = self.shaper.without_secrets(ids, decoder)[0]
                    except Exception:  # (ids this tokenizer cannot decode: no reader decodes them either)
                        continue
        return drift

    def _continuation(self, span: Span, raw: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, int, str] | None]:
        """A continuing turn's inputs with the tokens of a secret among those it adds replaced
        (``_redaction.tokens``), and, with token2text, the text it adds, decoded in its context.
        Text that is exactly what its ids decode to is not stored: the base names the tokenizer and
        readers decode it (``store.turns``); text that redaction or truncation changed is stored,
        shaped. Where the turn it continues is not known here (a sidecar that took over
        mid-trajectory) its added tokens are checked alone, their text is left out and said, and
        their ids still make the prompt whole. Returns the inputs, and the text the turn adds, the
        characters it replaces and the text before it (None where not decoded), for
        ``TurnTexts.remember``."""
        decoder, added = span.decoder, raw[PROMPT_IDS_ADDED]
        known = self.turns.before(span.trajectory_id, raw)
        tail, reply, before = known if known is not None else ([], [], None)
        try:
            text, cut = text_after(lambda ids: decoder.decode(ids), tail, reply + added)
            if before is None:  # (the first continuation of a prompt stored whole: its tail decoded once)
                before = decoder.decode(tail) if tail else ""
            kept, clean = self.shaper.without_secrets(added, decoder, text, tail + reply, before)
            inputs = raw if kept is added else {**raw, PROMPT_IDS_ADDED: kept}
        except Exception as exc:  # a tokenizer that cannot decode these ids: they stay ids
            failed = {**raw, PROMPT_TEXT_ADDED: f"<not decoded: {type(exc).__name__}>"}
            return (failed if self.shaper.token2text else raw), None
        if not self.shaper.token2text:
            return inputs, (text, cut, before)
        if known is None:
            return {
                **inputs,
                PROMPT_TEXT_ADDED: "<not decoded: the turn this prompt continues was not seen here>",
            }, None
        base = dict(raw[PROMPT_BASE])
        if cut:
            base["text_cut"] = cut
        name = tokenizer_name(decoder)
        limit = self.shaper.max_chars
        if name is not None and (limit is None or len(text) <= limit) and clean == text:
            base["text"], base["decoder"], base["vocab"] = "ids", name, fingerprint(decoder)
            return {**inputs, PROMPT_BASE: base}, (text, cut, before)
        return {**inputs, PROMPT_BASE: base, PROMPT_TEXT_ADDED: clean}, (text, cut, before)


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _without_unset_kwargs(inputs: Any) -> Any:
    """An llm call's extra arguments without the None ones (verl passes every media field, None
    on a text-only turn); dropped here rather than on the rollout's thread at each turn."""
    kwargs = inputs.get("kwargs") if isinstance(inputs, dict) else None
    if not isinstance(kwargs, dict) or all(v is not None for v in kwargs.values()):
        return inputs
    return {**inputs, "kwargs": {k: v for k, v in kwargs.items() if v is not None}}


def _input_usage(inputs: Any, attributes: dict[str, Any]) -> None:
    """An llm span's usage attributes (OpenTelemetry GenAI names), derived here from its raw inputs
    rather than computed on the rollout's thread at each turn. Values the caller set win."""
    prompt_ids = _field(inputs, "prompt_ids")
    if isinstance(prompt_ids, list | tuple):
        attributes.setdefault(INPUT_TOKENS, len(prompt_ids))
    elif is_continuation(inputs):
        base, added = inputs[PROMPT_BASE], inputs.get(PROMPT_IDS_ADDED)
        if type(base) is dict and type(added) is list:
            attributes.setdefault(INPUT_TOKENS, base.get("tokens", 0) + base.get("reply", 0) + len(added))
    sampling = _field(inputs, "sampling_params")
    if isinstance(sampling, dict) and sampling.get(TOOL_SCHEMAS):
        attributes.setdefault(CONSTRAINED, "tool_schemas")


def _output_usage(span: Span, attributes: dict[str, Any]) -> None:
    output = span.outputs
    token_ids = _field(output, "token_ids")
    if isinstance(token_ids, list | tuple):
        attributes.setdefault(OUTPUT_TOKENS, len(token_ids))
    if (isinstance(output, dict) and "stop_reason" in output) or hasattr(output, "stop_reason"):
        attributes.setdefault(FINISH_REASONS, [_field(output, "stop_reason")])
    if span.end_ns is not None:
        attributes.setdefault(LATENCY_S, (span.end_ns - span.start_ns) / 1e9)
