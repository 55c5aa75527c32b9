"""Yelp's detect-secrets (a maintained detector set, with its own test suite: tests/fixtures/
detect_secrets) as the redactor's second engine: its regex detectors' patterns — the bare
credential formats Kingfisher's rules leave to entropy filters (``AKIA…``, ``SK…``, ``AP…``) — and
its keyword detector's assignment and comparison patterns for many languages and config formats,
compiled once, each behind a cheap substring test.
"""

from __future__ import annotations

import re
from typing import Any

# detect-secrets' detectors that name no secret (a public IP address is not a credential)
_NOT_SECRETS = frozenset({"IPPublicDetector"})


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
# What the keyword detector takes for a value but code reads as an expression: unquoted, a name, a
# dotted name, a call or a lookup without a digit before it (``password = password``, ``secret :=
# maskSecret(f.Secret, percent)``, ``passwd = getpass.getpass(prompt)``, ``secret_key =
# os.environ["HF_TOKEN"]``), or a statement (``raise ...``); a comment after it is no part of it
# (``self.secret = secret  # ...``). A number of a few digits is a count or an id, not a secret
# (``"NuGetApiKey": 916``).
_CODE = re.compile(r"(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:[(\[].*)?|(?:raise|return|await|not)\b.*)", re.DOTALL)
_TRAILING_COMMENT = re.compile(r"\s+(?:#|//).*$", re.DOTALL)
_SHORT_NUMBER = re.compile(r"\d{1,4}")
# An environment file's key (``export APP_PASSWORD=``): what follows is a literal value, never code.
_ENV_KEY = re.compile(r"[ \t]*(?:export[ \t]+)?[A-Z][A-Z0-9_]*[ \t]*=[ \t]*")


def _is_code(s: str, start: int, end: int) -> bool:
    value = _TRAILING_COMMENT.sub("", s[start:end])
    if start > 0 and s[start - 1] in "\"'`":
        return False
    if _ENV_KEY.fullmatch(s, s.rfind("\n", 0, start) + 1, start):  # ``DB_PASSWORD=hunter``: a literal
        return False
    if _SHORT_NUMBER.fullmatch(value):
        return True
    head = re.split(r"[(\[]", value, maxsplit=1)[0]
    return _CODE.fullmatch(value) is not None and not any(c.isdigit() for c in head)


def _value(s: str, start: int, end: int) -> tuple[int, int]:
    """A matched value without the comment after it (the comment is kept as written)."""
    comment = _TRAILING_COMMENT.search(s, start, end)
    return (start, comment.start()) if comment is not None and comment.start() > start else (start, end)


class DetectSecretsRules:
    """Where detect-secrets' detectors find a secret in a string, as ``(start, end)`` spans."""

    def __init__(self) -> None:
        detectors, self._keywords = _detector_rules()
        self._detectors = [(pattern, _gate(gate), lower) for pattern, gate, lower in detectors]

    def spans(self, s: str) -> list[tuple[int, int]]:
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
                found = [match.span(i) for i in groups or [0]]
                spans.extend(found if gate is not None else
                             [_value(s, a, b) for a, b in found if not _is_code(s, a, b)])  # fmt: skip
        if hinted:
            for line in _LINE.finditer(s):
                low = line.group().lower()
                if any(h in low for h in _KEYWORD_HINTS):
                    for pattern, group in self._keywords:
                        match = pattern.search(line.group())
                        if match and match.group(group):
                            start, end = match.span(group)
                            if not _is_code(s, line.start() + start, line.start() + end):
                                spans.append(_value(s, line.start() + start, line.start() + end))
        return spans
