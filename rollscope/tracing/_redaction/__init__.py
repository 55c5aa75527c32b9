"""Secret redaction, applied to every payload before any backend (the local store included) sees it.

Four nets: the engine (``engine``: Kingfisher's scanner, ~1,850 rules in one scan — vendor
formats from its and Betterleaks' catalogs; rollscope's own rules for the shapes no vendor rule
names, ``rollscope_rules.yml``; detect-secrets' detectors, ``detect_secrets``; and the candidates
that a check here decides: detect-secrets' keyword patterns on the lines the scan points at, keys
only their neighbourhood or look gives away, ``named_tokens``); values under secret-named keys
(``{"api_key": ...}``, ``is_secret_key``, applied by the shaper); the literal values of
secret-looking environment variables of this process and of the traced one (so a key that leaks
into a prompt or tool output is caught whatever its shape); and the user's ``redact_patterns``.
Only what a net reports is replaced, never the whole string; a found secret long enough not to be
a word is replaced wherever else it occurs too.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Iterable, Mapping

from rollscope.semconv import REDACTED_TEXT as REDACTED
from rollscope.tracing._redaction import named_tokens
from rollscope.tracing._redaction.detect_secrets import (
    ASSIGNMENT,
    KEYWORD_POINTER,
    Keywords,
    is_code,
    is_placeholder,
    value_span,
)
from rollscope.tracing._redaction.engine import SecretEngine, shared

_GLOBAL_MIN = 8  # a found secret this long is redacted wherever it occurs, not only where found
_REMEMBERED_LEN = 512  # strings up to this long are redacted once per redactor (``text``)
_REMEMBERED = 8192
_SEPARATOR = "\n\0\n"  # between strings scanned together: ends every line-bound rule's match

# A key names a secret when it ends in one of these words (``aws_secret_access_key``, ``db_password``;
# not ``max_tokens``), or has ``secret`` / ``password`` as a word anywhere in it.
_SECRET_KEY = re.compile(
    r"(?i)(?:^(?:.*[_\-.])?(?:api[_\-]?key|apikey|secret|client[_\-]?secret|password|passwd|"
    r"authorization|credentials?|private[_\-]?key|access[_\-]?key|secret[_\-]?key|access[_\-]?token|"
    r"auth[_\-]?token|refresh[_\-]?token|api[_\-]?token|bearer[_\-]?token|session[_\-]?token|id[_\-]?token|"
    r"token|dsn)$)|(?:(?:^|[_\-.])(?:secret|password|passwd)(?:$|[_\-.]))"
)

# Rules that find a value assigned to a secret-sounding name, unquoted or in any syntax: what they
# find is a secret unless it reads as code (``credentials = includeCredentials``: another name).
_READ_AS_CODE = (ASSIGNMENT, "rollscope.assignment.2", "rollscope.assignment.3")

_SECRET_ENV = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)")
_MIN_ENV_SECRET_LEN = 8


def secret_env_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look like they hold secrets."""
    env = os.environ if environ is None else environ
    return sorted(
        {v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= _MIN_ENV_SECRET_LEN},
        key=len,
        reverse=True,
    )


class Redactor:
    """Replaces secrets in strings and under secret-named keys with ``[REDACTED]``."""

    #: How often ``refresh_environment`` looks at the environment again, at most.
    REFRESH_S = 0.1

    def __init__(
        self, extra_patterns: Iterable[str] = (), include_environment: bool = True, preload: bool = True
    ) -> None:
        """``preload``: start loading the rules now (on the engine's own thread), so the first
        string does not wait for them; else at the first string (a traced process whose trace
        sidecar redacts never loads them: ~0.5 s of CPU, and detect-secrets' imports)."""
        self._engine: SecretEngine | None = None
        self._keywords: Keywords | None = None
        self._literals = secret_env_values() if include_environment else []
        self._environment = include_environment
        self._refreshed = time.monotonic()
        # Short strings repeat endlessly (span and tool names, a task's question, stop reasons): each
        # scanned once (the engine's fixed cost per call is most of a short string's), forgotten
        # whenever what counts as a secret changes (``add_literals``).
        self._done: dict[str, str] = {}
        self.generation = 0  # counts those changes: a cache of redacted text elsewhere is stale past one
        self.masked_values = 0  # values whose rest was masked unscanned, too dense with secrets (``_scan``)
        self.masked_chars = 0
        self._user: list[re.Pattern[str]] = []
        for p in extra_patterns:
            try:
                self._user.append(re.compile(p))
            except re.error as exc:
                raise ValueError(f"redact pattern {p!r} is not a valid regular expression: {exc}") from exc
        if preload:
            self.preload()

    def preload(self) -> None:
        """Load the rules, if not yet: the engine's on a thread of its own, detect-secrets' keyword
        patterns here."""
        if self._engine is None:
            self._keywords = _keywords()
            self._engine = shared()

    def text(self, s: str) -> str:
        short = len(s) <= _REMEMBERED_LEN
        if short:
            done = self._done.get(s)
            if done is not None:
                return done
        if self._engine is None:
            self.preload()
        findings, scanned = self._scan(s)
        out = self._redacted(s, findings, scanned)
        if short:
            if len(self._done) >= _REMEMBERED:
                self._done.clear()
            self._done[s] = out
        return out

    def texts(self, strings: list[str]) -> list[str]:
        """``text`` of each, the engine scanning them together: its fixed cost per scan (~17 µs,
        as much as 6 KB of text costs) paid once for all."""
        if len(strings) < 2:
            return [self.text(s) for s in strings]
        if self._engine is None:
            self.preload()
        joined = _SEPARATOR.join(strings)
        starts, at = [], 0
        for s in strings:
            starts.append(at)
            at += len(s) + len(_SEPARATOR)
        found: list[list[tuple[int, int, str]]] = [[] for _ in strings]
        findings, scanned = self._scan(joined)
        for a, b, rule in findings:
            i = bisect.bisect_right(starts, a) - 1
            end = min(b - starts[i], len(strings[i]))  # (a finding never reaches past its own string)
            if a - starts[i] < end:
                found[i].append((a - starts[i], end, rule))
        return [
            self._redacted(s, f, max(0, min(len(s), scanned - at)))
            for s, f, at in zip(strings, found, starts, strict=True)
        ]

    def _scan(self, s: str) -> tuple[list[tuple[int, int, str]], int]:
        """What the engine's rules find in ``s``, and how far it was scanned (``len(s)``: all of it).

        A text up to ``_SCAN_PIECE`` is scanned whole. A longer one is probed first (its first
        ``_FIRST_PIECE``), then scanned in overlapping pieces: the engine's cost per finding grows
        with the length of what it scans (a 256 KB line of keys took 10 s whole, 0.3 s in pieces),
        and is ~20 µs however short the piece, so a text dense with secrets (a ``password=`` pair
        every 18 characters: 57,000 findings a MB) costs seconds a MB. Where a piece holds more
        than ``_DENSE`` secrets a KB — a dump of credentials; real code's densest KB holds 4 —
        the scan stops at its end and the rest of the value is masked (``_dense_mark``): a value's
        scan costs at most one dense piece past its sparse ones. A secret shorter than the
        overlap (a PEM key is ~3 KB) that crosses a piece's end is found whole in the next."""
        engine = self._engine
        if len(s) <= _SCAN_PIECE:
            return engine.findings(s), len(s)  # type: ignore[union-attr]
        found: set[tuple[int, int, str]] = set()
        start, end = 0, _FIRST_PIECE
        while True:
            piece = s[start:end]
            here = engine.findings(piece)  # type: ignore[union-attr]
            found.update((a + start, b + start, rule) for a, b, rule in here)
            if end >= len(s):
                return sorted(found), len(s)
            limit = max(_DENSE_MIN, _DENSE * len(piece) / 1024)  # (the checks only drop findings: count them past it)
            if len(here) > limit and len(self._found(piece, here)) > limit:
                return sorted(found), end
            end = min(len(s), max(end + _SCAN_PIECE, _SCAN_PIECE + _SCAN_OVERLAP))
            start = max(0, end - _SCAN_PIECE - _SCAN_OVERLAP)

    def spans(self, s: str) -> list[tuple[int, int]]:
        """Where ``text`` would replace: the (start, end) of each secret in ``s``, in order (they may
        overlap; a masked rest is one span). What maps a secret onto the tokens that carry it (``tokens``)."""
        if self._engine is None:
            self.preload()
        findings, scanned = self._scan(s)
        spans = self._secret_spans(s[:scanned], findings)
        return sorted(spans + ([(scanned, len(s))] if scanned < len(s) else []))

    def _redacted(self, s: str, findings: list[tuple[int, int, str]], scanned: int) -> str:
        """``s`` redacted up to ``scanned``; past it (a scan stopped by the secrets' density) masked whole."""
        spans = self._secret_spans(s[:scanned], findings)
        out = _replaced(s[:scanned], sorted(spans)) if spans else s[:scanned]
        if scanned < len(s):
            self.masked_values += 1
            self.masked_chars += len(s) - scanned
            out += _dense_mark(len(s) - scanned)
        return out

    def _secret_spans(self, s: str, findings: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
        spans = self._found(s, findings)
        for value in self._literals:
            if value in s:
                spans += _occurrences(s, value)
        for pattern in self._user:
            spans += (m.span() for m in pattern.finditer(s))
        return _everywhere(s, spans) if spans else spans

    def _found(self, s: str, findings: list[tuple[int, int, str]]) -> list[tuple[int, int]]:
        """The secrets in ``s`` from what the engine's rules found, those that need a second look
        checked, each made the secret's own characters, whole (``_whole``)."""
        spans, pointers = [], []
        for start, end, rule in findings:
            if rule == KEYWORD_POINTER:
                pointers.append((start, end))
            elif rule.startswith(named_tokens.CANDIDATE):
                spans += named_tokens.after_name(s, start, end)
            elif rule == named_tokens.STANDALONE:
                spans += named_tokens.standalone(s, start, end)
            elif not rule.startswith(_READ_AS_CODE):
                spans.append((start, end))
            elif not is_code(s, start, end):
                spans.append(value_span(s, start, end))
        if pointers:
            spans += self._keywords.spans(s, pointers)  # type: ignore[union-attr]
        if spans:
            spans += named_tokens.beside(s, spans)
        return [w for a, b in spans if (w := _whole(s, a, b)) is not None]

    @staticmethod
    def is_secret_key(key: str) -> bool:
        return bool(_SECRET_KEY.search(key))

    def add_literals(self, values: Iterable[str]) -> None:
        """Also redact these values (secrets of another process's environment; old ones are kept:
        events holding them may still be on their way)."""
        merged = set(self._literals) | {v for v in values if len(v) >= _MIN_ENV_SECRET_LEN}
        if len(merged) != len(self._literals):
            self._literals = sorted(merged, key=len, reverse=True)
            self._done = {}
            self.generation += 1

    def refresh_environment(self) -> None:
        """Pick up secret-looking environment variables set since the last look (at most every
        ``REFRESH_S``): a key exported after tracing started is redacted from then on."""
        now = time.monotonic()
        if self._environment and now - self._refreshed >= self.REFRESH_S:
            self._refreshed = now
            self.add_literals(secret_env_values())


_SEARCHED_ONE_BY_ONE = 16  # found secrets each looked for again everywhere in its text, at most
_TOKEN_RUN = re.compile(r"[^\s\"'`<>()\[\]{},;=:]+")
_FIRST_PIECE = 512  # characters a long text's scan starts with (a dense value stops after them)
_SCAN_PIECE = 8192  # characters of a long text the engine scans at once, past the overlap
_SCAN_OVERLAP = 4096
_DENSE = 8  # secrets a KB past which a value is a dump of them: its rest is masked, not scanned
_DENSE_MIN = 8  # (and more than this many in the piece: a short probe needs more than a rate)


def _dense_mark(chars: int) -> str:
    """What stands for a value's rest that was masked unscanned: how much, and why."""
    return f"[REDACTED: {chars:,} more characters, too dense with secrets to scan]"


_KEYWORDS: list[Keywords] = []


def _keywords() -> Keywords:
    """detect-secrets' keyword patterns, compiled once per process."""
    if not _KEYWORDS:
        _KEYWORDS.append(Keywords())
    return _KEYWORDS[0]


def _occurrences(s: str, value: str) -> list[tuple[int, int]]:
    found, at = [], s.find(value)
    while at != -1:
        found.append((at, at + len(value)))
        at = s.find(value, at + len(value))
    return found


def _everywhere(s: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans``, and each found secret of ``_GLOBAL_MIN`` characters or more wherever else it
    stands on its own in ``s`` (not inside a longer name: a password ``Password`` found as a value
    leaves ``UserCreationPasswordSecretKey`` as written)."""
    long = {s[a:b] for a, b in spans if b - a >= _GLOBAL_MIN}
    if len(long) <= _SEARCHED_ONE_BY_ONE:
        for secret in long:
            spans += [(a, b) for a, b in _occurrences(s, secret) if not _inside_word(s, a, b)]
    else:  # (many: each looked for as a token of its own, in one pass, rather than one pass each)
        spans += [m.span() for m in _TOKEN_RUN.finditer(s) if m.group() in long]
    return spans


_WORD = re.compile(r"[A-Za-z0-9_]")
_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_+/=-]")


def _inside_word(s: str, a: int, b: int) -> bool:
    """Whether ``s[a:b]`` begins or ends inside a longer word (a letter, digit or ``_`` on both
    sides of its edge)."""
    return bool(
        (a > 0 and _WORD.match(s, a - 1) and _WORD.match(s, a))
        or (b < len(s) and _WORD.match(s, b) and _WORD.match(s, b - 1))
    )


def _whole(s: str, a: int, b: int) -> tuple[int, int] | None:
    """A finding as the secret's own characters, whole: a match that begins inside a word is code
    (``foreignKeyJsonObject``'s ``eyJsonObject`` is no token), a placeholder is filled elsewhere
    (``{_github_pat(name)}``), and a match that stops inside a token runs on to the token's end (a
    rule that reads a key's first 13 characters of 24 leaves no 11 behind)."""
    if a >= b or (a > 0 and s[a - 1].isalnum() and _WORD.match(s, a)) or is_placeholder(s[a:b]):
        return None  # (after ``_`` a key may start: ``web_<key>``, ``rdme_<key>``)
    while b < len(s) and _TOKEN_CHAR.match(s, b) and _TOKEN_CHAR.match(s, b - 1):
        b += 1
    return a, b


def _replaced(s: str, spans: list[tuple[int, int]]) -> str:
    """``s`` with each span (in order; merged where they overlap) replaced by REDACTED."""
    out, at = [], 0
    for a, b in spans:
        if b <= at:
            continue
        if a < at:  # overlapping what was just replaced: that one grows
            at = b
            continue
        out.append(s[at:a])
        out.append(REDACTED)
        at = b
    out.append(s[at:])
    return "".join(out)
