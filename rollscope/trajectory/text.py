"""Token ids as text when a trajectory is read, whatever ``token2text`` was when it ran.

verl's default records token ids only (``token2text=False``: no decoding in the rollout's
process). A traced loop records its tokenizer's directory on the run span (``REPLAY``, as a
replay needs it); readers (the viewer, ``traces show``) decode the llm turns' ``token_ids`` and
``prompt_ids`` with it into ``response_text`` and ``prompt_text``, in memory, where those are
missing. Without the tokenizer here (another machine, a hub name not cached), or with another
vocabulary at that path than the one recorded (``decoders``), the ids stay ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rollscope.semconv import PROMPT_BASE, REPLAY, TOKENIZER_CHANGED
from rollscope.trajectory import tokens
from rollscope.trajectory.decoders import changed, decoder_for
from rollscope.trajectory.records import TrajectoryRecord


def recorded_tokenizer(spans: Iterable[Any]) -> str | None:
    """The tokenizer directory (or hub name) a trajectory's loop recorded, from its spans."""
    info = _recorded(spans)
    return info["tokenizer"] if info is not None else None


def recorded_decoder(spans: Iterable[Any]) -> Any:
    """What decodes a trajectory's ids: the tokenizer its loop recorded, where the one at that path
    here has the vocabulary recorded with it (``decoders.decoder_for``); else None."""
    info = _recorded(spans)
    return decoder_for(info["tokenizer"], info.get("vocab")) if info is not None else None


def _recorded(spans: Iterable[Any]) -> dict[str, Any] | None:
    for span in spans:
        info = (span.attributes or {}).get(REPLAY)
        if isinstance(info, dict) and isinstance(info.get("tokenizer"), str):
            return info
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
        tokenizer = recorded_decoder(record.spans)
        name = recorded_tokenizer(record.spans)
        if tokenizer is None and name in changed:  # (said on the record: a reader shows it)
            record.attributes = {**(record.attributes or {}), TOKENIZER_CHANGED: changed[name]}
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
