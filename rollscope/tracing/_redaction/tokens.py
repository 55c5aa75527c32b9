"""The tokens of a secret: which token ids carry part of a secret their text holds.

Redacting a turn's text leaves its token ids decoding to the secret. Where a list of ids is shaped
with its tokenizer at hand, its text is scanned as any text is; when the scan finds a secret, the
tokens whose own text overlaps it are the ones replaced (``store.tokens.REDACTED_ID``). Each
token's own text is what the viewer's token view shows, and their concatenation is the text the
secret is looked for in, so what a token covers is known exactly. Where that concatenation reads
differently from the whole decode (a tokenizer that drops a word's leading space when a token is
decoded alone) and the tokens found do not take the secret out, every token of the list is
replaced: the ids are lost, the secret never stored.

The cost is the scan of the text, which token2text pays anyway; the per-token work only for a
list that holds a secret.
"""

from __future__ import annotations

import bisect
from typing import Any

from rollscope.semconv import REDACTED_ID
from rollscope.trajectory.tokens import decode


def secret_positions(ids: list[int], tokenizer: Any, redactor: Any, start: int = 0) -> list[int]:
    """The positions (from ``start`` on) of the tokens in ``ids`` that carry part of a secret.
    ``ids`` before ``start`` are context (the end of the turn a continuation follows): a secret
    that begins there is found whole, and only the tokens from ``start`` on are named."""
    pieces = tokenizer.batch_decode([[i] for i in ids])
    ends, at = [], 0
    for piece in pieces:
        at += len(piece)
        ends.append(at)
    found: set[int] = set()
    for a, b in redactor.spans("".join(pieces)):
        first = bisect.bisect_right(ends, a)  # the first token whose text ends after ``a``
        while first < len(ids) and ends[first] - len(pieces[first]) < b:
            found.add(first)
            first += 1
    masked = [REDACTED_ID if i in found else token for i, token in enumerate(ids)]
    text = decode(tokenizer, masked)
    if redactor.text(text) != text:  # the pieces read otherwise than the whole: nothing kept
        return list(range(start, len(ids)))
    return sorted(p for p in found if p >= start)


def redacted(ids: list[int], positions: list[int]) -> list[int]:
    """A copy of ``ids`` with the tokens at ``positions`` replaced by ``REDACTED_ID``."""
    out = list(ids)
    for p in positions:
        out[p] = REDACTED_ID
    return out
