"""Secret redaction, applied to every payload before any backend (the local store included) sees it.

Four nets, because each misses what the others catch: well-known credential shapes (provider
key prefixes, bearer tokens, JWTs, private keys); the detectors of Yelp's detect-secrets, a
maintained set (its regex detectors — AWS, Azure storage, Artifactory, Cloudant, Discord, GitLab,
IBM, Mailchimp, npm, PyPI, SendGrid, Slack, Square, Stripe, Telegram, Twilio, ... — and its keyword
detector's assignment and comparison patterns for many languages and config formats, compiled here
once, each behind a cheap substring test); values under secret-sounding keys (``password=...``,
``{"api_key": ...}``, ``--password x``); and the literal values of secret-looking environment
variables of this process (so a key that leaks into a prompt or tool output is caught whatever
its shape). A hand-written list alone finds the next gap in each new corpus
(``tests/fixtures/detect_secrets``: detect-secrets' own test cases).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"

# Credential shapes, each with a literal every match contains: a substring test (tens of
# nanoseconds) decides whether the regex runs at all, which keeps plain text cheap.
_SHAPES: list[tuple[str, str, str]] = [  # (literal, regex, replacement)
    ("sk-", r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}", REDACTED),  # OpenAI / Anthropic (sk-ant-)
    ("k_", r"\b[spr]k_(?:live|test)_[A-Za-z0-9]{10,}", REDACTED),  # Stripe secret / publishable / restricted
    ("glpat-", r"glpat-[A-Za-z0-9_\-]{20,}", REDACTED),  # GitLab
    # DSN / URL credential, the user possibly empty (redis://:password@host)
    ("://", r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]*:)[^\s@/]+(?=@)", rf"\g<keep>{REDACTED}"),
    ("AKIA", r"AKIA[0-9A-Z]{16}", REDACTED),  # AWS access key id
    ("_", r"gh[pousr]_[A-Za-z0-9]{20,}", REDACTED),  # GitHub
    ("github_pat_", r"github_pat_[A-Za-z0-9_]{20,}", REDACTED),
    ("hf_", r"hf_[A-Za-z0-9]{20,}", REDACTED),  # Hugging Face
    ("xox", r"xox[abprs]-[A-Za-z0-9\-]{10,}", REDACTED),  # Slack
    ("AIza", r"AIza[0-9A-Za-z\-_]{35}", REDACTED),  # Google
    ("eyJ", r"eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", REDACTED),  # JWT
    ("PRIVATE KEY", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----", REDACTED),
    ("earer", r"(?P<keep>[Bb]earer\s+)[A-Za-z0-9\-._~+/]{8,}=*", rf"\g<keep>{REDACTED}"),
    ("EARER", r"(?P<keep>BEARER\s+)[A-Za-z0-9\-._~+/]{8,}=*", rf"\g<keep>{REDACTED}"),
    # Authorization: Basic <base64>; a digit, '+', '/' or '=' in it tells it from "basic information"
    ("asic", r"(?P<keep>\b[Bb]asic\s+)(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{8,}=*", rf"\g<keep>{REDACTED}"),
]
# A command line's secret flag and its value: --password X, --db-password=X, --api-key X.
_SHAPES.append(("--", r"(?i)(?P<keep>--(?:[a-z0-9]+-)*(?:password|passwd|pass|secret|token|api-?key|access-?key|"
                      r"secret-?key|auth)(?:\s+|=))(?!-)[^\s\"']+", rf"\g<keep>{REDACTED}"))
# A long hex or base64 value right after a secret-sounding word in prose ("my api key is 9f86...",
# "the secret: dGhp..."): a value that cannot be a word, in a context that says what it is.
_SHAPES.append(("", r"(?i)(?P<keep>\b(?:api[ _-]?key|secret(?:[ _-]?key)?|token|password|access[ _-]?key|"
                   r"private[ _-]?key)\b(?:\s+(?:is|was|=|:)|\s*[:=])?\s+)"
                   r"(?:[A-Fa-f0-9]{32,}|(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{24,}={0,2})(?![A-Za-z0-9+/=])",
               rf"\g<keep>{REDACTED}"))  # (any case: no literal to test first)
# detect-secrets' detectors that name no secret (a public IP address is not a credential)
_NOT_SECRETS = frozenset({"IPPublicDetector"})
# A private key block cut off (a truncated paste, an END line missing): from BEGIN to the end.
_OPEN_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-*[\s\S]*")


def _detector_rules() -> tuple[list[tuple[re.Pattern[str], tuple[str, ...], bool]], list[tuple[re.Pattern[str], int]]]:
    """detect-secrets' regex detectors' patterns, each with the substrings one of which it needs
    (its gate: the pattern is run only on text holding one) and whether the gate is tested on the
    lower-cased text; and its keyword detector's (pattern, group of the secret) pairs over every
    file type it knows, each once."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector

    shapes: list[tuple[re.Pattern[str], tuple[str, ...], bool]] = []
    for cls in get_mapping_from_secret_type_to_class().values():
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in _NOT_SECRETS:
            continue
        for pattern in cls().denylist:
            if any(p is pattern for p, _, _ in shapes):
                continue
            if pattern.pattern.startswith(_ASSIGNMENT_PREFIX):  # a vendor's `<name>_<key word> = value`
                shapes.append((pattern, _KEYWORD_HINTS, True))
            else:
                lower = bool(pattern.flags & re.IGNORECASE)
                gate = required_literals(pattern)
                shapes.append((pattern, tuple(g.lower() for g in gate) if lower else gate, lower))
    keywords: dict[re.Pattern[str], int] = {}
    for table in (*keyword.REGEX_BY_FILETYPE.values(), keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
        keywords.update(table)
    return shapes, list(keywords.items())


def _gate(literals: tuple[str, ...]) -> str | re.Pattern[str] | None:
    """A detector's gate in its quickest test, run for every string against each of ~45
    detectors: one literal as a string (``in``), several as one alternation (a single scan);
    None for the key-word-hinted ones."""
    if literals is _KEYWORD_HINTS:
        return None
    if len(literals) == 1:
        return literals[0]
    return re.compile("|".join(map(re.escape, literals)))


# How detect-secrets' ``build_assignment_regex`` patterns begin: each also needs a key word
# (key, pass, pwd, pw, token, secret) in the text.
_ASSIGNMENT_PREFIX = r"(?:(?<=\W)|(?<=^))"


def required_literals(pattern: re.Pattern[str]) -> tuple[str, ...]:
    """Substrings one of which every match of ``pattern`` contains: its longest run of literal
    characters outside any optional or repeated part, or, for a leading alternation, each
    branch's leading run. ``("",)`` (always true) when there is none."""
    try:
        from re import _parser as parser  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse as parser  # type: ignore[no-redef]
    try:
        items = list(parser.parse(pattern.pattern, pattern.flags))
    except Exception:
        return ("",)
    return _literals_of(items) or ("",)


def _literals_of(items: list) -> tuple[str, ...]:
    from re import _constants as c  # type: ignore[attr-defined]

    best, run = "", ""
    alternatives: tuple[str, ...] = ()
    for op, arg in _flatten(items, c):
        if op is c.LITERAL:
            run += chr(arg)
            continue
        best, run = max(best, run, key=len), ""
        if op is c.BRANCH and not best and not alternatives:
            heads = tuple(_leading(list(branch), c) for branch in arg[1])
            alternatives = heads if all(heads) else ()
    best = max(best, run, key=len)
    return (best,) if best else alternatives


def _flatten(items: list, c: Any) -> list:
    """A pattern's top-level items with plain groups opened (their contents are as mandatory)."""
    out = []
    for op, arg in items:
        if op is c.SUBPATTERN:
            inner = list(arg[-1])
            if len(inner) == 1 and inner[0][0] is c.BRANCH:
                out.append(inner[0])
            else:
                out.extend(_flatten(inner, c))
        else:
            out.append((op, arg))
    return out


def _leading(items: list, c: Any) -> str:
    run = ""
    for op, arg in _flatten(items, c):
        if op is not c.LITERAL:
            break
        run += chr(arg)
    return run

# The words one of the keyword patterns needs (detect-secrets' DENYLIST, lower-cased): a line
# without any is not looked at.
_KEYWORD_HINTS = ("pass", "pw", "secret", "key", "token", "auth", "private", "cred")
_LINE = re.compile(r"[^\n]+")
_GLOBAL_MIN = 8  # a found secret this long is redacted wherever it occurs, not only where found
# Cheap pre-check for the assignment pattern, which has no literal prefix.
_ASSIGNMENT_WORDS = ("key", "secret", "pass", "pwd", "token")

# `name = value`, `name: value`, `"name": "value"`: keep the name, redact the value.
_ASSIGNMENT = (
    r"(?i)(?P<name>\b(?:api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|password|passwd|pwd|"
    r"access[_-]?token|auth[_-]?token|refresh[_-]?token|api[_-]?token|token)\b[\"']?\s*[:=]\s*[\"']?)"
    r"(?P<value>[^\s\"',;}{]{4,})"
)

# A key names a secret when it ends in one of these words (``aws_secret_access_key``, ``db_password``;
# not ``max_tokens``), or has ``secret`` / ``password`` as a word anywhere in it.
_SECRET_KEY = re.compile(
    r"(?i)(?:^(?:.*[_\-.])?(?:api[_\-]?key|apikey|secret|client[_\-]?secret|password|passwd|"
    r"authorization|credentials?|private[_\-]?key|access[_\-]?key|secret[_\-]?key|access[_\-]?token|"
    r"auth[_\-]?token|refresh[_\-]?token|api[_\-]?token|bearer[_\-]?token|session[_\-]?token|id[_\-]?token|"
    r"token|dsn)$)|(?:(?:^|[_\-.])(?:secret|password|passwd)(?:$|[_\-.]))"
)

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

    def __init__(self, extra_patterns: Iterable[str] = (), include_environment: bool = True) -> None:
        self._literals = secret_env_values() if include_environment else []
        self._environment = include_environment
        self._refreshed = time.monotonic()
        self._shapes = [(hint, re.compile(p), repl) for hint, p, repl in _SHAPES]
        self._user: list[re.Pattern[str]] = []
        for p in extra_patterns:
            try:
                self._user.append(re.compile(p))
            except re.error as exc:
                raise ValueError(f"redact pattern {p!r} is not a valid regular expression: {exc}") from exc
        self._assignment = re.compile(_ASSIGNMENT)
        detectors, self._keywords = _detector_rules()
        self._detectors = [(pattern, _gate(gate), lower) for pattern, gate, lower in detectors]

    def text(self, s: str) -> str:
        for value in self._literals:
            if value in s:
                s = s.replace(value, REDACTED)
        for hint, pattern, replacement in self._shapes:
            if hint in s:
                s = pattern.sub(replacement, s)
        s = self._detected(s)
        for pattern in self._user:
            s = pattern.sub(REDACTED, s)
        if ("=" in s or ":" in s) and any(w in s.lower() for w in _ASSIGNMENT_WORDS):
            s = self._assignment.sub(lambda m: m.group("name") + REDACTED, s)
        return s

    def _detected(self, s: str) -> str:
        """What detect-secrets' detectors find in ``s``, replaced where found; a long secret (one
        that cannot be an ordinary word) also wherever else it occurs."""
        spans: list[tuple[int, int]] = []
        lowered = s.lower()
        hinted = any(h in lowered for h in _KEYWORD_HINTS)
        for pattern, gate, lower in self._detectors:
            if gate is None:  # a vendor's `<name>_<key word> = value`
                if not hinted:
                    continue
            elif type(gate) is str:
                if gate not in (lowered if lower else s):
                    continue
            elif gate.search(lowered if lower else s) is None:
                continue
            for match in pattern.finditer(s):
                groups = [i for i, g in enumerate(match.groups(), 1) if g]
                spans.extend(match.span(i) for i in groups or [0])
        if hinted:
            for line in _LINE.finditer(s):
                low = line.group().lower()
                if any(h in low for h in _KEYWORD_HINTS):
                    for pattern, group in self._keywords:
                        match = pattern.search(line.group())
                        if match and match.group(group):
                            start, end = match.span(group)
                            spans.append((line.start() + start, line.start() + end))
        if "PRIVATE KEY" in s:
            spans.extend(m.span() for m in _OPEN_PRIVATE_KEY.finditer(s))
        if not spans:
            return s
        long = {s[a:b] for a, b in spans if b - a >= _GLOBAL_MIN}
        out, at = [], 0
        for a, b in sorted(spans):
            if b <= at:
                continue
            out.append(s[at:max(a, at)])
            out.append(REDACTED)
            at = b
        out.append(s[at:])
        s = "".join(out)
        for secret in sorted(long, key=len, reverse=True):
            s = s.replace(secret, REDACTED)
        return s

    @staticmethod
    def is_secret_key(key: str) -> bool:
        return bool(_SECRET_KEY.search(key))

    def add_literals(self, values: Iterable[str]) -> None:
        """Also redact these values (secrets of another process's environment; old ones are kept:
        events holding them may still be on their way)."""
        merged = set(self._literals) | {v for v in values if len(v) >= _MIN_ENV_SECRET_LEN}
        self._literals = sorted(merged, key=len, reverse=True)

    def refresh_environment(self) -> None:
        """Pick up secret-looking environment variables set since the last look (at most every
        ``REFRESH_S``): a key exported after tracing started is redacted from then on."""
        now = time.monotonic()
        if self._environment and now - self._refreshed >= self.REFRESH_S:
            self._refreshed = now
            self.add_literals(secret_env_values())
