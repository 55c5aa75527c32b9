"""Token ids as text when a trajectory is read, whatever ``token2text`` was when it ran.

verl's default records token ids only (``token2text=False``: no decoding in the rollout's
process). A traced loop records its tokenizer's directory on the run span (``REPLAY``, as a
replay needs it); readers (the viewer, ``traces show``) decode the llm turns' ``token_ids`` and
``prompt_ids`` with it into ``response_text`` and ``prompt_text``, in memory, where those are
missing. Without the tokenizer here (another machine, a hub name not cached), the ids stay ids.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from rollscope.store.records import TrajectoryRecord

log = logging.getLogger("rollscope.store")

REPLAY = "rollscope.replay"  # the run span's attribute: what a replay rebuilds the loop from (its tokenizer too)


def recorded_tokenizer(record: TrajectoryRecord) -> str | None:
    """The tokenizer directory (or hub name) the trajectory's loop recorded."""
    for span in record.spans:
        info = (span.attributes or {}).get(REPLAY)
        if isinstance(info, dict) and isinstance(info.get("tokenizer"), str):
            return info["tokenizer"]
    return None


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
    """Decode the llm turns' token ids that have no text beside them (in place); returns how many
    fields were decoded. ``tokenizer``: one to use instead of the recorded one."""
    llm = [s for s in record.spans if s.kind == "llm"]
    todo = [(s, d, ids, text) for s in llm for d, ids, text in ((s.outputs, "token_ids", "response_text"),
                                                               (s.inputs, "prompt_ids", "prompt_text"))
            if isinstance(d, dict) and _ids(d.get(ids)) and not isinstance(d.get(text), str)]  # fmt: skip
    if not todo:
        return 0
    if tokenizer is None:
        name = recorded_tokenizer(record)
        tokenizer = load_tokenizer(name) if name else None
    if tokenizer is None:
        return 0
    for _, fields, ids, text in todo:
        fields[text] = tokenizer.decode(fields[ids], skip_special_tokens=False)
    return len(todo)


def _ids(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)
