"""Token ids as text when a trajectory is read, whatever ``token2text`` was when it ran.

verl's default records token ids only (``token2text=False``: no decoding in the rollout's
process). A traced loop records its tokenizer's directory on the run span (``REPLAY``, as a
replay needs it); readers (the viewer, ``traces show``) decode the llm turns' ``token_ids`` and
``prompt_ids`` with it into ``response_text`` and ``prompt_text``, in memory, where those are
missing. Without the tokenizer here (another machine, a hub name not cached), the ids stay ids.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rollscope.semconv import PROMPT_BASE, REPLAY
from rollscope.trajectory import tokens
from rollscope.trajectory.records import TrajectoryRecord

log = logging.getLogger("rollscope.trajectory")


def recorded_tokenizer(spans: Iterable[Any]) -> str | None:
    """The tokenizer directory (or hub name) a trajectory's loop recorded, from its spans."""
    for span in spans:
        info = (span.attributes or {}).get(REPLAY)
        if isinstance(info, dict) and isinstance(info.get("tokenizer"), str):
            return info["tokenizer"]
    return None


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


def with_text(record: TrajectoryRecord, tokenizer: Any = None) -> int:
    """Decode the llm turns' token ids that have no text beside them (in place; a turn stored as
    what it adds is decoded when ``record.prompts`` is asked for its text, with the same
    tokenizer); returns how many fields were decoded. ``tokenizer``: one to use instead of the
    recorded one."""
    llm = [s for s in record.spans if s.kind == "llm"]
    todo = [
        (s, d, ids, text)
        for s in llm
        for d, ids, text in ((s.outputs, "token_ids", "response_text"), (s.inputs, "prompt_ids", "prompt_text"))
        if isinstance(d, dict) and not isinstance(d.get(text), str) and _ids(d.get(ids))
    ]
    continued = any(isinstance(s.inputs, dict) and PROMPT_BASE in s.inputs for s in llm)
    if not todo and not continued:
        return 0
    if tokenizer is None:
        name = recorded_tokenizer(record.spans)
        tokenizer = load_decoder(name) if name else None
    if tokenizer is None:
        return 0
    for _, fields, ids, text in todo:
        fields[text] = tokens.decode(tokenizer, fields[ids])
    if continued:
        from rollscope.trajectory.turns import Prompts  # (turns decodes with this module's loaders)

        record._prompts = Prompts(record.spans, tokenizer=tokenizer)
    return len(todo)


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)
