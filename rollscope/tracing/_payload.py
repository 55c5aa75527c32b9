"""Turns whatever a traced call received or returned into a JSON-safe, bounded, secret-free value.

Runs in the trace sidecar or on the exporter thread, never on the rollout's event loop. Anything
goes in (pydantic models, dataclasses, numpy and torch values, objects that refuse to be
serialized, cycles, NaN); what comes out is plain JSON types only, so every backend can store it
as is.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import orjson

from rollscope.tracing._redaction import REDACTED, Redactor
from rollscope.tracing._redaction.tokens import redacted, secret_positions
from rollscope.tracing._values import MAX_ITEMS, UNKNOWN, error_text, native
from rollscope.trajectory.tokens import decode_each

log = logging.getLogger("rollscope.tracing")

MAX_DEPTH = 24
# No secret shape is shorter than this ('pwd=abcd'), so shorter strings skip the redaction regex.
MIN_SECRET_TEXT = 8
DEFAULT_MAX_PAYLOAD_CHARS = 20_000

# Token-id fields and the name their decoded text is stored under (verl's names where it has them).
_TEXT_FIELD = {
    "prompt_ids": "prompt_text",
    "response_ids": "response_text",
    "token_ids": "response_text",
    "input_ids": "input_text",
    "output_ids": "output_text",
}


UNRECORDED = "rollscope.shape_error"  # the attribute of a span whose payloads could not be recorded


def unrecorded(exc: BaseException) -> str:
    """What stands in for the payloads of a span that could not be read (``UNRECORDED``): the
    span itself is kept, with its place in the tree, timing and status."""
    return f"<payload not recorded: {type(exc).__name__}: {exc}>"[:500]


def text_field_for(key: str) -> str | None:
    if key in _TEXT_FIELD:
        return _TEXT_FIELD[key]
    if key.endswith("_token_ids"):
        return key[: -len("_token_ids")] + "_text"
    if key.endswith("_ids"):
        return key[: -len("_ids")] + "_text"
    return None


def carries_token_ids(value: Any) -> bool:
    """Whether a span's inputs or outputs (a mapping) hold token ids under a field that has a text."""
    return isinstance(value, Mapping) and any(
        type(k) is str and text_field_for(k) is not None and _is_token_list(v) for k, v in value.items()
    )


def _is_token_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value[:64])


class NoRedaction:
    """For a shaper that only makes values plain (redaction happens later, elsewhere)."""

    generation = 0

    @staticmethod
    def text(s: str) -> str:
        return s

    @staticmethod
    def texts(strings: list[str]) -> list[str]:
        return strings

    @staticmethod
    def is_secret_key(key: str) -> bool:
        return False

    @staticmethod
    def refresh_environment() -> None:
        pass


class CutText(str):
    """A string cut before it crossed to the trace sidecar (``_wire.cut_before_crossing``): its
    first part, and how long the whole was (``original``), so the truncation written counts it."""

    original: int


class PayloadShaper:
    """JSON conversion + truncation + redaction + token2text, in one pass over the value. Given a
    tokenizer, a list of token ids is checked for the tokens of a secret whatever token2text is
    (``_redaction.tokens``); token2text adds their text."""

    def __init__(
        self,
        redactor: Redactor | NoRedaction,
        max_payload_chars: int | None = DEFAULT_MAX_PAYLOAD_CHARS,
        token2text: bool = False,
        tokenizer: Any = None,
    ) -> None:
        self.redactor = redactor
        # Keys repeat endlessly (prompt_ids, sampling_params, ...): per key, decided once, its text
        # as stored and whether it names a secret (as of the redactor's ``generation`` below).
        self._keys: dict[str, tuple[str, bool]] = {}
        self._generation = redactor.generation
        self.max_chars = max_payload_chars
        # Strings shorter than this are stored as they are when ASCII: no secret is that short,
        # and no truncation cuts them.
        self._short = MIN_SECRET_TEXT if max_payload_chars is None or max_payload_chars >= MIN_SECRET_TEXT else 0
        self.token2text = token2text
        self.tokenizer = tokenizer
        self._path: set[int] = set()  # ids of the containers being walked, past _CYCLE_CHECK_DEPTH
        self._pending: list[tuple[dict, str, str]] | None = None  # (``deferred``) long strings to redact
        self.unredacted = 0  # values left as PENDING_REDACTION: their redaction failed
        self.redacted_tokens = 0  # token ids replaced as carrying a secret (``store.tokens.REDACTED_ID``)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Long string values shaped in this block are redacted together as it ends: one scan of the
        secret engine for many strings (its fixed cost per scan, as much as a few KB of text cost,
        paid once). Until then a value holds a marker, never its unredacted text."""
        if self._pending is not None:
            yield
            return
        self._pending = []
        try:
            yield
        finally:
            pending, self._pending = self._pending, None
            self._redact_pending(pending)

    def _redact_pending(self, pending: list[tuple[dict, str, str]]) -> None:
        start = 0
        while start < len(pending):
            end, size = start + 1, len(pending[start][2])
            while end < len(pending) and size + len(pending[end][2]) <= _DEFERRED_CHARS:
                size += len(pending[end][2])
                end += 1
            group, start = pending[start:end], end
            try:
                texts = self.redactor.texts([p[2] for p in group])
            except Exception as exc:  # (the values keep their marker: never their text unredacted)
                self.unredacted += len(group)
                log.warning("could not redact %d values, recorded as not recorded: %s", len(group), error_text(exc))
                continue
            for (out, key, _), text in zip(group, texts, strict=True):
                out[key] = self._truncated(text)

    def shape(self, value: Any, tokenizer: Any = None) -> Any:
        decoder = tokenizer or self.tokenizer
        if self.redactor.generation != self._generation:  # new secrets: keys are redacted anew
            self._keys, self._generation = {}, self.redactor.generation
        t = type(value)
        if t is str:  # a name: the commonest call, straight to its end
            return self._string(value)
        if t is dict:  # a payload: as ``_convert`` takes one at the top, two calls sooner
            try:
                return self._mapping(value, 0, decoder)
            except Exception as exc:
                return f"<unreadable dict: {error_text(exc)}>"
        return self._convert(value, 0, decoder)

    def _precut(self, s: str) -> CutText | None:
        """A string far past what is kept, cut before it is redacted (``_cut_string``): redacting
        text that is then thrown away costs time that grows with it, and a secret that spans the
        cut is still found whole within the margin kept."""
        if self.max_chars is None or len(s) <= self.max_chars + CUT_MARGIN_CHARS:
            return None
        cut = CutText(s[: self.max_chars + CUT_MARGIN_CHARS])
        cut.original = len(s)
        return cut

    def _string(self, s: str) -> str:
        cut = self._precut(s)
        if cut is not None:
            return self._cut_string(cut)
        if not s.isascii():
            s = encodable(s)
        if len(s) >= MIN_SECRET_TEXT:
            s = self.redactor.text(s)
        return self._truncated(s)

    def _truncated(self, s: str) -> str:
        if self.max_chars is not None and len(s) > self.max_chars:
            return f"{s[: self.max_chars]}…[truncated {len(s) - self.max_chars} chars]"
        return s

    def _cut_string(self, s: CutText) -> str:
        """A string cut in the traced process, shaped as ``_string`` shapes the whole: redacted, at
        most ``max_chars`` kept, the truncation counting what was left there too."""
        text = str.__str__(s)
        text = self.redactor.text(text if text.isascii() else encodable(text))
        keep = len(text) if self.max_chars is None else min(len(text), self.max_chars)
        return f"{text[:keep]}…[truncated {len(text) - keep + s.original - len(s)} chars]"

    def _convert(self, v: Any, depth: int, decoder: Any) -> Any:
        t = type(v)
        if t is str:
            return self._string(v)
        if t is CutText:
            return self._cut_string(v)
        if t is int:
            return v if -(2**63) <= v < 2**63 else str(v)  # JSON readers choke on bigger ints
        if v is None or t is bool:
            return v
        if t is float:
            return v if math.isfinite(v) else str(v)
        if depth >= MAX_DEPTH:
            return f"<max depth {MAX_DEPTH} reached: {t.__name__}>"
        try:
            if depth < _CYCLE_CHECK_DEPTH:  # (no real payload nests this deep: only a cycle is looked for)
                return self._container(v, t, depth, decoder)
            return self._on_path(v, t, depth, decoder)
        except Exception as exc:  # an object that fails when read costs its own field, nothing more
            return f"<unreadable {t.__name__}: {error_text(exc)}>"

    def _on_path(self, v: Any, t: type, depth: int, decoder: Any) -> Any:
        """``_container``, with the containers above ``v`` remembered: a cycle ends in a marker
        at its second visit, not after ``MAX_DEPTH`` levels of a tree that doubles at each."""
        key = id(v)
        if key in self._path:
            return f"<cycle: {t.__name__}>"
        self._path.add(key)
        try:
            return self._container(v, t, depth, decoder)
        finally:
            self._path.discard(key)

    def _container(self, v: Any, t: type, depth: int, decoder: Any) -> Any:
        if t is dict:
            return self._mapping(v, depth, decoder)
        if t is list or t is tuple:
            if v and len(v) <= MAX_NUMBERS and type(v[0]) in _NUMBER_TYPES and _plain_numbers(v):
                return v  # token ids and log-probabilities: the big lists, checked in C, kept whole
            if len(v) > MAX_ITEMS:
                return [*self._convert(v[:MAX_ITEMS], depth, decoder), f"…[truncated {len(v) - MAX_ITEMS} items]"]
            return [self._convert(x, depth + 1, decoder) for x in v]
        if hasattr(v, "__pydantic_fields_set__") or hasattr(v, "__dataclass_fields__"):  # pydantic / dataclass, first:
            converted = native(v)  # the ABC checks below cost more than this
            if converted is not UNKNOWN:
                return self._convert(converted, depth + 1, decoder)
        if isinstance(v, str):
            return self._string(str.__str__(v))  # a str enum member: its value
        if isinstance(v, bool | int):
            return int(v) if not isinstance(v, bool) else bool(v)
        if isinstance(v, float):
            return self._convert(float(v), depth, decoder)
        converted = native(v)  # numpy, torch, pandas, enums, datetimes, bytes, ... (``_values``)
        if converted is not UNKNOWN:
            return self._convert(converted, depth + 1, decoder)
        if isinstance(v, Mapping):
            return self._mapping(v, depth, decoder)
        if isinstance(v, list | tuple | set | frozenset):
            items = v if isinstance(v, list | tuple) else sorted(v, key=repr)
            return self._convert(list(items), depth, decoder)
        try:
            text = repr(v)
        except Exception as exc:  # an object whose repr itself fails
            text = f"<unrepresentable {t.__name__}: {error_text(exc)}>"
        return self._string(text)

    def _mapping(self, m: Mapping, depth: int, decoder: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        keys, short = self._keys, self._short
        for k, val in m.items():
            known = keys.get(k) if type(k) is str else None
            key, secret = known if known is not None else self._key(k)
            t = type(val)
            if val is None or t is bool or (t is int and -(2**63) <= val < 2**63):
                out[key] = val  # the common scalars, without a call per value
                continue
            if t is str:
                if secret:
                    out[key] = REDACTED
                elif len(val) < short and val.isascii():
                    out[key] = val
                elif self._pending is not None and _DEFERRED_MIN < len(val) <= _DEFERRED_MAX:
                    out[key] = PENDING_REDACTION
                    self._pending.append((out, key, val if val.isascii() else encodable(val)))
                else:
                    out[key] = self._string(val)
                continue
            out[key] = self._convert(val, depth + 1, decoder)
            if decoder is not None and out[key] is val and _is_token_list(val):
                text_key = text_field_for(key)
                if text_key:
                    self._token_ids(out, m, key, text_key, decoder)
        return out

    def _token_ids(self, out: dict[str, Any], m: Mapping, key: str, text_key: str, decoder: Any) -> None:
        """``out[key]``, a list of token ids, with the tokens of a secret its text holds replaced;
        with token2text, its text under ``text_key`` (and a reply's text token by token, for the
        viewer's token view), unless the value has its own."""
        try:
            ids, clean = self.without_secrets(out[key], decoder)
        except Exception:  # ids this tokenizer cannot decode: none of its readers decodes them either
            return
        out[key] = ids
        if not self.token2text:
            return
        if text_key not in m:
            out[text_key] = self._truncated(clean)
        if key == "token_ids" and "token_texts" not in m:
            try:
                texts = decode_each(decoder, ids)
            except Exception:
                return
            out["token_texts"] = [self._string(t) for t in texts]

    def without_secrets(
        self, ids: list[int], decoder: Any, text: str | None = None, context: list[int] = (), before: str | None = None
    ) -> tuple[list[int], str]:
        """``ids`` with the tokens of a secret their text holds replaced (a copy, where any is), and
        that text, redacted. ``text``: theirs as already decoded after ``context`` (the tokens just
        before them: a continuing turn's), else decoded here. A secret that begins in ``context``
        and ends in ``ids`` is found whole: its part here is replaced too (``before``: the text
        ``text`` follows, a continuing turn's prompt's end). Raises what decoding raises."""
        text = encodable(decoder.decode(ids) if text is None else text)
        clean = self.redactor.text(text)
        crossing = _crossing(self.redactor, encodable(before), text) if before else 0
        if crossing:  # (the end of a secret begun before these ids: replaced with the rest)
            clean = REDACTED + self.redactor.text(text[crossing:])
        if clean != text:
            positions = secret_positions([*context, *ids], decoder, self.redactor, len(context))
            self.redacted_tokens += len(positions)
            ids = redacted(ids, [p - len(context) for p in positions])
        return ids, clean

    def _key(self, k: Any) -> tuple[str, bool]:
        """A key not seen yet: its text as stored (a secret can be a key too) and whether its
        string values are secrets (``{"api_key": ...}``); remembered (``_mapping`` looks it up)."""
        key = k if type(k) is str else str(k)
        text = self._string(key)
        known = (text, self.redactor.is_secret_key(text))
        if type(k) is str and len(self._keys) < _MAX_KEYS_REMEMBERED:  # (keys a model invents: not all)
            self._keys[k] = known
        return known


def _crossing(redactor: Redactor, before: str, text: str) -> int:
    """How far into ``text`` a secret that begins in ``before`` runs (0: none does). Scanned: the
    last ``CROSSING_CHARS`` of ``before`` and the first of ``text`` where ``before`` ends inside a
    private key's block (the longest secret the redactor knows), else ``CROSSING_TOKEN`` of each
    (a token, a key and its value): one scan of the engine."""
    width = CROSSING_CHARS if before.rfind("-----BEGIN", -CROSSING_CHARS) > before.rfind("-----END") else CROSSING_TOKEN
    before, text = before[-width:], text[:width]
    n = len(before)
    return max((b - n for a, b in redactor.spans(before + text) if a < n < b), default=0)


CROSSING_CHARS = 4096
CROSSING_TOKEN = 512


_MAX_KEYS_REMEMBERED = 4096
# What a long value holds until ``deferred`` redacts it (only if redaction itself failed, for good).
PENDING_REDACTION = "<not recorded: its redaction did not finish>"
_DEFERRED_MIN = 512  # (shorter strings repeat: the redactor remembers them one by one)
_DEFERRED_CHARS = 6144  # text redacted in one scan, at most (the engine slows per byte on longer input)
_DEFERRED_MAX = _DEFERRED_CHARS  # (a longer value is a scan of its own: ``_string``, cut first if far too long)
# What is kept past ``max_payload_chars`` of a long string before it is redacted and cut: a secret
# that spans the cut is still redacted whole (also where a string is cut before crossing to the sidecar).
CUT_MARGIN_CHARS = 4096
_NUMBER_TYPES = (int, float)
MAX_NUMBERS = 1 << 20  # a list of plain numbers (a context's token ids) is kept whole up to this length
_CYCLE_CHECK_DEPTH = 12


def _plain_numbers(v: list | tuple) -> bool:
    """Whether every item is a JSON number as it stands: an int of 53 bits (bools too), a finite
    float. Checked in C, since these are the big lists (a walk in Python cost more than the rest
    of a span's shaping); any other list is converted item by item."""
    try:
        if type(v[0]) is int:
            if type(sum(v)) is not int:  # (a float, a numpy scalar makes the sum one; a string raises)
                return False
        elif not math.isfinite(math.fsum(v)):  # (an infinity or a NaN anywhere makes the sum one)
            return False
        orjson.dumps(v, option=orjson.OPT_STRICT_INTEGER)  # ints of 53 bits, no numpy scalar, or it raises
    except (TypeError, ValueError, ArithmeticError):  # (Decimal infinities of both signs: InvalidOperation)
        return False
    return True


def encodable(s: str) -> str:
    """``s``, with what UTF-8 cannot encode (lone surrogates: text decoded with
    ``surrogateescape``, a byte-level tokenizer's half characters) escaped as ``\\udc80``: a
    backend that stores UTF-8 would otherwise refuse the whole span."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")
