"""The sidecar's wire between the two processes: length-prefixed frames over the child's stdin and a
private copy of its stdout, their kinds, and how either end builds the backends from the config.

    parent -> child   CONFIG (first), EVENTS, FLUSH id, CLOSE timeout, SECRETS (when the parent's environment
                      gains a secret-looking value after the start: redacted from then on)
    child -> parent   READY pid resume or FAILED, LOG, FLUSHED id stats, CLOSED ok stats, POSITIONS
EVENTS bodies are ``_wire`` buffers of trace events (``_events``).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
from typing import Any

from rollscope.tracing._exporter import BackendWorker
from rollscope.tracing._payload import PayloadShaper
from rollscope.tracing._redaction import Redactor
from rollscope.tracing._shaping import EventShaper

log = logging.getLogger("rollscope.tracing")

_HEADER = struct.Struct("<IB")  # body length, frame kind
CONFIG, EVENTS, FLUSH, CLOSE, READY, FAILED, LOG, FLUSHED, CLOSED = range(9)
SECRETS = 9  # parent -> child: secret-looking environment values of the traced process, now
POSITIONS = 10  # child -> parent: per backend, how many of the events sent it has flushed
POSITIONS_INTERVAL_S = 0.2


def write_frame(fd: int, kind: int, body: bytes = b"") -> None:
    data = memoryview(_HEADER.pack(len(body), kind) + body)
    while data:
        data = data[os.write(fd, data) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> tuple[int, bytes] | None:
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    length, kind = _HEADER.unpack(header)
    body = _read_exact(fd, length) if length else b""
    return None if body is None else (kind, body)


def read_frame_timeout(fd: int, timeout: float) -> tuple[int, bytes] | None:
    result: list = []
    reader = threading.Thread(target=lambda: result.append(read_frame(fd)), daemon=True)
    reader.start()
    reader.join(timeout)
    return result[0] if result else None


def shaper_for(config: dict[str, Any]) -> EventShaper | None:
    """How the backends' events are shaped outside the traced process (None: it shaped them)."""
    if config["shaped"]:
        return None
    token2text = bool(config.get("token2text"))
    default = config.get("tokenizer")
    shaper = PayloadShaper(
        Redactor(tuple(config["redact_patterns"])),
        config["max_payload_chars"],
        token2text,
        sidecar_tokenizer(default) if default else None,
    )
    return EventShaper(shaper, sidecar_tokenizer)


_unloadable: set[str] = set()


def sidecar_tokenizer(name: str) -> Any:
    """A span's tokenizer, loaded here from what the traced process loaded it from (kept: one load
    per name): what finds the tokens of a secret, and token2text's text. One that cannot be loaded
    here is said once: its ids are stored as they came, unchecked (readers decode them where the
    tokenizer is: ``store.text``)."""
    from rollscope.trajectory.decoders import load_decoder

    tokenizer = load_decoder(name)
    if tokenizer is None and name not in _unloadable:
        _unloadable.add(name)
        log.warning(
            "the trace sidecar cannot load the tokenizer %r: its token ids are stored as they came, "
            "not checked for the tokens of a secret (nor decoded, with token2text)",
            name,
        )
    return tokenizer


def worker_for(config: dict[str, Any], path: str, options: dict[str, Any], resume: dict | None = None) -> BackendWorker:
    from rollscope._imports import load_object

    return BackendWorker(load_object(path)(**config["settings"], **options, **(resume or {})), config["max_queue"])
