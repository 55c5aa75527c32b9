"""What decodes a trajectory's token ids where it is read, known by its vocabulary, not its path.

A trace names its tokenizer by where it was loaded from (a directory, a hub name). That path can
point at another model by the time the trace is read (a reused ``/models/current``, a store copied
to another machine): ids decoded with that vocabulary read as garbage, and nothing would say so.
So the vocabulary's ``fingerprint`` is recorded beside the name, and ``decoder_for`` hands out a
decoder only when the one at that path today has the same vocabulary; else it says so, once per
path, and the ids stay ids (``changed`` lists such paths for a reader to show).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("rollscope.trajectory")


class Decoder:
    """A tokenizer's decoding alone, from its ``tokenizer.json`` with the ``tokenizers`` library:
    what decodes token ids where transformers (and the torch it imports) would take seconds to
    import — a reader, or the trace sidecar starting under a busy trainer. Decodes as
    transformers' fast tokenizer does (``decode``, ``batch_decode``; special tokens kept unless
    asked otherwise)."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self._tokenizer = tokenizer
        self.name_or_path = name

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch_decode(self, batch: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return self._tokenizer.decode_batch(batch, skip_special_tokens=skip_special_tokens)

    def vocab_size(self) -> int:
        """Its tokens, added ones too: what ``len()`` of transformers' fast tokenizer counts (not
        ``__len__``: a truth test of a decoder would ask it, and it takes ~40 ms)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)


@functools.lru_cache(maxsize=8)
def load_decoder(name: str) -> Any:
    """What decodes ids for ``name``: a ``Decoder`` where its directory has a ``tokenizer.json``
    that transformers would decode the same way (no space clean-up after it), else the whole
    tokenizer (``load_tokenizer``); None if neither is here."""
    path = Path(name)
    try:
        config = json.loads((path / "tokenizer_config.json").read_text()) if path.is_dir() else None
        if config is not None and (path / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
            if not config.get("clean_up_tokenization_spaces") or type(tokenizer.model).__name__ == "BPE":
                return Decoder(tokenizer, name)
    except Exception as exc:  # tokenizers not installed, a file unreadable: transformers decides
        log.info("decoding with transformers for %r (%s)", name, exc)
    return load_tokenizer(name)


@functools.lru_cache(maxsize=8)
def load_tokenizer(name: str) -> Any:
    """A tokenizer from this machine only (a directory, or the Hugging Face cache); None if absent."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception as exc:  # not installed, not here, unreadable: the ids stay ids
        log.info("no tokenizer %r here to decode token ids with (%s)", name, exc)
        return None


_fingerprints: dict[int, tuple[Any, str | None]] = {}  # id(tokenizer) -> (it, its fingerprint)
_lock = threading.Lock()


def fingerprint(tokenizer: Any) -> str | None:
    """A short hash of how ``tokenizer`` decodes: its vocabulary's size and the text of
    ``_SAMPLED`` ids spread over it and of its last ``_LAST`` (where added and special tokens
    sit). Equal for two tokenizers that decode alike, whatever their paths; another model's
    vocabulary differs on them at once. A few milliseconds (the whole vocabulary, listed and
    hashed, took 0.4 s), worked out once per tokenizer object; None for one that cannot say."""
    with _lock:
        known = _fingerprints.get(id(tokenizer))
    if known is not None and known[0] is tokenizer:
        return known[1]
    try:
        size = tokenizer.vocab_size() if isinstance(tokenizer, Decoder) else len(tokenizer)
        ids = sorted({i * size // _SAMPLED for i in range(_SAMPLED)} | set(range(max(0, size - _LAST), size)))
        texts = tokenizer.batch_decode([[i] for i in ids])
        found: str | None = hashlib.sha256(
            f"{size}\n{chr(0).join(texts)}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:16]
    except Exception:  # (a tokenizer that cannot say its size or decode single ids: nothing to tell it by)
        found = None
    with _lock:
        _fingerprints[id(tokenizer)] = (tokenizer, found)
    return found


_SAMPLED, _LAST = 2048, 256


changed: dict[str, str] = {}  # path -> what is wrong with the tokenizer there, as said to a reader


def decoder_for(name: str | None, vocab: Any = None) -> Any:
    """The decoder at ``name`` (``load_decoder``), if its vocabulary is the one recorded
    (``vocab``: a ``fingerprint``; a trace that recorded none is decoded as before); else None,
    said once per path and kept in ``changed``."""
    if not isinstance(name, str) or not name:
        return None
    tokenizer = load_decoder(name)
    if tokenizer is None or not isinstance(vocab, str):
        return tokenizer
    found = fingerprint(tokenizer)
    if found is None or found == vocab:
        return tokenizer
    if name not in changed:
        changed[name] = (
            f"the tokenizer at {name} is not the one this trace was recorded with (its vocabulary's "
            f"fingerprint is {found}, the trace's {vocab}): token ids are shown as ids, not decoded"
        )
        log.warning("%s", changed[name])
    return None
