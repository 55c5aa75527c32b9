"""Yelp's detect-secrets (a maintained detector set, with its own test suite: tests/fixtures/
detect_secrets) inside the engine's one scan: its regex detectors — the bare credential formats
Kingfisher's rules leave to entropy filters (``AKIA…``, ``SK…``, ``AP…``) — translated into
Kingfisher rules (``rules``); its keyword detector, whose patterns need what the engine's
regex dialect lacks (look-arounds, back-references), run in Python only on the lines where the
engine found one of its key words (a pointer rule), never on the whole string.
"""

from __future__ import annotations

import re

from rollscope.tracing._redaction.named_tokens import random_letters

#: The rule ids this module gives the engine; findings of the first two are checked here (``Keywords``).
ASSIGNMENT = "detect-secrets.assignment."  # a vendor's ``<name>_<key word> = value``: code or a literal?
KEYWORD_POINTER = "detect-secrets.keyword-pointer"  # a line with a key word: the keyword detector's to read
DETECTOR = "detect-secrets.detector."

# detect-secrets' detectors that name no secret: a public IP address is not a credential, and a
# private key's ``BEGIN`` line is its label (the key's body is what Kingfisher's rules redact).
_NOT_SECRETS = frozenset({"IPPublicDetector", "PrivateKeyDetector"})
# How detect-secrets' ``build_assignment_regex`` patterns begin, and what means the same without a look-behind
_ASSIGNMENT_PREFIX = r"(?:(?<=\W)|(?<=^))"
_BOUNDARY = r"(?:^|\W)"
# the leading and trailing delimiters of Artifactory's patterns, kept out of what is redacted
_LEAD = r'(?:\s|=|:|"|^)'
_TRAIL = r'(?:\s|"|$)'


def rules() -> list[dict]:
    """detect-secrets' regex detectors as Kingfisher rules (each with one capture group: what is
    redacted), and the keyword pointer."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.base import RegexBasedDetector

    rules: list[dict] = []
    seen = set()
    for cls in get_mapping_from_secret_type_to_class().values():
        if not issubclass(cls, RegexBasedDetector) or cls.__name__ in _NOT_SECRETS:
            continue
        for pattern in cls().denylist:
            if pattern.pattern in seen:
                continue
            seen.add(pattern.pattern)
            assignment = pattern.pattern.startswith(_ASSIGNMENT_PREFIX)
            rules.append(
                {
                    "name": f"detect-secrets {cls.__name__}",
                    "id": f"{ASSIGNMENT if assignment else DETECTOR}{len(rules) + 1}",
                    "pattern": translated(pattern),
                    "min_entropy": 0,
                    "confidence": "low",
                }
            )
    words = "|".join(keyword.DENYLIST)
    rules.append(
        {
            "name": "detect-secrets' key words (a line for its keyword detector)",
            "id": KEYWORD_POINTER,
            "pattern": f"(?i)(?:{words})",
            "min_entropy": 0,
            "confidence": "low",
            "visible": False,
        }
    )
    return rules


def translated(pattern: re.Pattern[str]) -> str:
    r"""A detect-secrets pattern in the engine's dialect, its secret the first capture group. The
    engine has no look-around: a look-behind for a word's start becomes a non-word character
    matched before it; a negative look-ahead (``(?!\w)``: the key ends there) is left out, so a
    rule also finds a key's first characters in a longer run (redacting a little more)."""
    text = pattern.pattern.replace(_ASSIGNMENT_PREFIX, _BOUNDARY)
    text = re.sub(r"\(\?!(?:\\w|\[[^\]]+\])\)", "", text)
    # a group that is only a prefix's alternatives (``(ghp|gho)_``) or optional is not the secret
    text = re.sub(r"\((?!\?)((?:[\w-]+\|)+[\w-]+)\)", r"(?:\1)", text)
    text = re.sub(r"\((?!\?)([^()]*)\)\?", r"(?:\1)?", text)
    if re.compile(text).groups == 0:
        lead = _LEAD if text.startswith(_LEAD) else ""
        trail = _TRAIL if text.endswith(_TRAIL) else ""
        text = f"{lead}({text[len(lead) : len(text) - len(trail)]}){trail}"
    return ("(?i)" if pattern.flags & re.IGNORECASE else "") + text


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
_ENV_LINE = 256  # (an environment file's key is at the start of a short line: looked for that far back)


def is_code(s: str, start: int, end: int) -> bool:
    """Whether ``s[start:end]``, found as a value assigned to a secret-sounding name, is code that
    reads a secret from elsewhere rather than the secret."""
    value = _TRAILING_COMMENT.sub("", s[start:end])
    if start > 0 and s[start - 1] in "\"'`":
        return False
    lo = max(0, start - _ENV_LINE)
    newline = s.rfind("\n", lo, start)
    if (newline >= 0 or lo == 0) and _ENV_KEY.fullmatch(s, newline + 1, start):  # ``DB_PASSWORD=hunter``: a literal
        return False
    if _SHORT_NUMBER.fullmatch(value) or is_placeholder(value):
        return True
    if _PATH.fullmatch(value) and not any(random_letters(part) for part in value.split(".")):
        return True
    head = re.split(r"[(\[]", value, maxsplit=1)[0]
    if _CODE.fullmatch(value) is None or any(c.isdigit() for c in head):
        return False
    return not (_NAME.fullmatch(value) and random_letters(value))  # a key of letters alone: no name


# A bare name, which is code unless it is as random as a key of letters alone (``KIhDrgYcsaNQafAhYcmp``).
_NAME = re.compile(r"[A-Za-z]{16,}")


# Where an unquoted value ends: at a space, or at what code writes after a value (a comma, a
# semicolon, a closing bracket, a brace): ``password=None):``'s value is ``None``.
_UNQUOTED_END = re.compile(r"[\s,;)\]}]")
# What code, not a config's value, writes after a value: a bracket or a brace (a semicolon ends a
# connection string's pairs too: ``Pwd=myPassword;`` is a value, ``;`` and all)
_CODE_AFTER = re.compile(r"[(){}\[\]]")


def value_end(s: str, start: int, end: int) -> int:
    """The end of the value that starts at ``start``, within ``end``: its closing quote where it is
    quoted; else, where code follows it (a bracket or a brace on the rest of the line),
    the first character code writes after a value; else ``end`` (a config's value, spaces and
    all). The keyword patterns take the rest of the line (``jwt({ secret: process.env.SECRET }),
    function(req, res) {``); a finding is the value's own characters, never the code after it."""
    quote = s[start - 1] if start > 0 else ""
    if quote in ('"', "'", "`"):
        close = s.find(quote, start, end)
        return end if close == -1 else close
    if s.startswith("-----BEGIN", start):  # (a key's block: its lines, spaces and all)
        return end
    found = _UNQUOTED_END.search(s, start, end)
    if found is None or found.start() == start or not _CODE_AFTER.search(s, found.start(), end):
        return end  # (a config's value runs to its line's end: ``key: value with spaces``, ``A,.:-@*?!``)
    return found.start()


# A value that is a path of names (``_step2.value.key``, ``creds.Password``): code, digits or not.
_PATH = re.compile(r"[A-Za-z_$@][\w$]*(?:\.[A-Za-z_$][\w$]*)+")
# A value that is a template's placeholder (``{_github_pat(name)}``, ``${TOKEN}``, ``{{ secret }}``,
# ``%(password)s``, ``<your-api-key>``): what fills it is elsewhere.
# (short, on one line, no quote or colon in it: a JSON object's braces hold data, not a placeholder)
_PLACEHOLDER = re.compile(r"\$?\{\{?[^{}\n\"':]{1,100}\}?\}|%\([\w.]+\)[sdr]|<[\w .-]{1,60}>")


def is_placeholder(value: str) -> bool:
    return _PLACEHOLDER.fullmatch(value) is not None


def value_span(s: str, start: int, end: int) -> tuple[int, int]:
    """A matched value without the comment after it (the comment is kept as written)."""
    comment = _TRAILING_COMMENT.search(s, start, end)
    return (start, comment.start()) if comment is not None and comment.start() > start else (start, end)


class Keywords:
    """detect-secrets' keyword detector's patterns (every file type it knows, each once), run where
    the engine found one of its key words: anchored there, as each pattern begins with the key
    word, but for the comparison written the other way round (``"value" == password``), read on
    the line when it compares."""

    def __init__(self) -> None:
        from detect_secrets.plugins import keyword

        patterns: dict[re.Pattern[str], int] = {}
        for table in (*keyword.REGEX_BY_FILETYPE.values(), keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP):
            patterns.update(table)
        self._anchored = [
            (p, g) for p, g in patterns.items() if p.pattern.startswith("(") and not p.pattern.startswith(_QUOTE_FIRST)
        ]
        self._reversed = [(p, g) for p, g in patterns.items() if (p, g) not in self._anchored]

    def spans(self, s: str, pointers: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Secrets found from the key words at ``pointers``."""
        spans: list[tuple[int, int]] = []
        for (start, end), words in _lines(s, sorted(at for at, _ in pointers)).items():
            covered = start  # this line's secrets found so far reach here
            for at in words:
                if at < covered:  # (a key word inside a value already found: it can find nothing past it)
                    continue
                stop = min(end, at + _VALUE_WINDOW)
                for p, group in self._anchored:
                    match = p.match(s, at, stop)
                    if match and match.group(group):
                        a, b = match.span(group)
                        if b >= stop > 0 and stop < end:  # cut by the window: the value runs on to the line's end
                            b = end
                        b = value_end(s, a, b)
                        if not is_code(s, a, b):
                            spans.append(value_span(s, a, b))
                            covered = max(covered, b)
            line = s[start:end] if end - start <= _COMPARISON_LINE else ""
            if "==" in line or "!=" in line:
                for p, group in self._reversed:
                    match = p.search(line)
                    if match and match.group(group):
                        a, b = start + match.start(group), start + match.end(group)
                        b = value_end(s, a, b)
                        if not is_code(s, a, b):
                            spans.append(value_span(s, a, b))
        return spans


# How far from its key word a value is matched: the keyword patterns take the rest of the line,
# and run from every key word of a line full of them, they cost the square of its length. A value
# that reaches this far is taken to the line's end, as the pattern would take it; a key word inside
# a value already found is skipped (it can find nothing beyond that value).
_VALUE_WINDOW = 512
# The longest line searched for a comparison written the other way round (``"value" == password``):
# a longer one is data, not a line of code (its search would cost the square of its length).
_COMPARISON_LINE = 4096

# how the keyword pattern that finds ``"value" == password`` begins
_QUOTE_FIRST = "([\\'\"`])"


def _lines(s: str, positions: list[int]) -> dict[tuple[int, int], list[int]]:
    """The lines (start, end) holding ``positions`` (sorted), each with its positions: every
    character read once, however many key words a line holds."""
    lines: dict[tuple[int, int], list[int]] = {}
    line: tuple[int, int] = (0, -1)
    for at in positions:
        if at > line[1]:  # (a line past the last: its start is looked for back to the last's end only)
            after = line[1] + 1 if line[1] >= 0 else 0
            end = s.find("\n", at)
            line = (s.rfind("\n", after, at) + 1 or after, len(s) if end == -1 else end)
        lines.setdefault(line, []).append(at)
    return lines
