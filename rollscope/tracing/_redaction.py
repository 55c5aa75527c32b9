"""Secret redaction, applied to every payload before any backend (the local store included) sees it.

Three nets, because each misses what the others catch: well-known credential shapes (provider
key prefixes, bearer tokens, JWTs, private keys), values under secret-sounding keys
(``password=...``, ``{"api_key": ...}``), and the literal values of secret-looking environment
variables of this process (so a key that leaks into a prompt or tool output is caught whatever
its shape).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping

REDACTED = "[REDACTED]"

# Credential shapes, each with a literal every match contains: a substring test (tens of
# nanoseconds) decides whether the regex runs at all, which keeps plain text cheap.
_SHAPES: list[tuple[str, str, str]] = [  # (literal, regex, replacement)
    ("sk-", r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}", REDACTED),  # OpenAI / Anthropic (sk-ant-)
    ("k_", r"\b[spr]k_(?:live|test)_[A-Za-z0-9]{10,}", REDACTED),  # Stripe secret / publishable / restricted
    ("glpat-", r"glpat-[A-Za-z0-9_\-]{20,}", REDACTED),  # GitLab
    ("://", r"(?P<keep>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@]+:)[^\s@/]+(?=@)", rf"\g<keep>{REDACTED}"),  # DSN
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

    def text(self, s: str) -> str:
        for value in self._literals:
            if value in s:
                s = s.replace(value, REDACTED)
        for hint, pattern, replacement in self._shapes:
            if hint in s:
                s = pattern.sub(replacement, s)
        for pattern in self._user:
            s = pattern.sub(REDACTED, s)
        if ("=" in s or ":" in s) and any(w in s.lower() for w in _ASSIGNMENT_WORDS):
            s = self._assignment.sub(lambda m: m.group("name") + REDACTED, s)
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
