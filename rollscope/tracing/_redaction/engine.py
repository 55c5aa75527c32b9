"""Kingfisher (MongoDB's secret scanner, Rust with vectorscan; PyPI ``kingfisher-secret-scanner``)
as the redactor's engine: its built-in rules (the Betterleaks catalog), Kingfisher's own catalog
(``kingfisher_rules.yml``, written by ``tests/fixtures/kingfisher/extract.py``), rollscope's
rules for the shapes no vendor rule names (``rollscope_rules.yml``), detect-secrets' detectors
translated (``detect_secrets``), and the candidates a check in Python decides (``named_tokens``,
detect-secrets' keyword patterns): about 1,850 rules compiled into one database and run in one
scan per string (or per few strings: ``Redactor.texts``).

The database is compiled once per machine (~8 s; the SDK keeps it in its cache) and loaded in
~0.5 s of CPU, once per process (``shared``): on a thread of its own, started when a redactor
first needs it (``Redactor.preload``: at once in a trace sidecar, which so answers at once and waits
for the rules only at its first string to redact; never in a traced process whose sidecar
redacts). Rules that cannot be loaded are an error at that string, never a silent pass.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from rollscope.tracing._redaction import detect_secrets, named_tokens

RULES = [Path(__file__).with_name("kingfisher_rules.yml"), Path(__file__).with_name("rollscope_rules.yml")]
#: The ids of rules (their beginnings) that report no secret, only where a check in Python is to look.
POINTERS = (detect_secrets.KEYWORD_POINTER, named_tokens.CANDIDATE, named_tokens.STANDALONE)


class SecretEngine:
    """Where a string holds what a rule finds, as ``(start, end, rule id)`` with indices of the
    string: every rule that reports on its own, and the pointers (rules that only say where to look)."""

    def __init__(self) -> None:
        self._scanner: Any = None
        self._error: BaseException | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._load, name="rollscope-secret-rules", daemon=True).start()

    def _load(self) -> None:
        try:
            from kingfisher_sdk import Rules, Scanner

            with tempfile.TemporaryDirectory() as tmp:
                generated = Path(tmp) / "generated_rules.yml"
                generated.write_text(yaml.safe_dump({"rules": generated_rules()}, sort_keys=False, width=100_000))
                # every confidence: a trace loses a false positive safely, a missed key for good
                self._scanner = Scanner(Rules([*RULES, generated], confidence="low"))
        except BaseException as exc:  # surfaced at the first scan, in the thread that shapes
            self._error = exc
        finally:
            self._ready.set()

    def findings(self, s: str) -> list[tuple[int, int, str]]:
        if self._scanner is None:
            self._ready.wait()
            if self._error is not None:
                raise RuntimeError(f"secret rules could not be loaded: {self._error}") from self._error
        # (a rule that is not visible supplies a part to another, unless it is a pointer)
        found = [(f.location, f.rule_id) for f in self._scanner.scan(s) if f.visible or f.rule_id.startswith(POINTERS)]
        if not found:
            return []
        if s.isascii():
            return [(at["start_offset"], at["end_offset"], rule) for at, rule in found]
        data = s.encode("utf-8")  # the scanner's offsets count UTF-8 bytes
        index = _char_index(data)
        return [(index(at["start_offset"]), index(at["end_offset"]), rule) for at, rule in found]


def generated_rules() -> list[dict]:
    """The rules written here: detect-secrets' detectors translated, and the pointers."""
    names = named_tokens.vendor_names(RULES[:1])
    return [*detect_secrets.rules(), *named_tokens.candidate_rules(names), named_tokens.standalone_rule()]


_SHARED: tuple[int, SecretEngine] | None = None
_LOCK = threading.Lock()


def shared() -> SecretEngine:
    """This process's engine (its rules loaded once, whoever asks first; a forked child loads its
    own: the loading thread did not come with it)."""
    global _SHARED
    with _LOCK:
        if _SHARED is None or _SHARED[0] != os.getpid():
            _SHARED = (os.getpid(), SecretEngine())
        return _SHARED[1]


def _char_index(data: bytes) -> Any:
    def index(offset: int) -> int:
        return len(data[:offset].decode("utf-8", "ignore"))

    return index
