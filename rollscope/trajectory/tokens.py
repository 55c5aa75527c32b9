"""Token ids as a trace stores them: a token that carried a secret is stored as ``REDACTED_ID``.

Redaction replaces a secret in a turn's text with ``[REDACTED]``; the turn's token ids would still
decode to it. So where spans are shaped, each token that carries part of a redacted secret is
replaced by ``REDACTED_ID`` (``tracing._redaction.tokens``): the list keeps its length (log-probs,
masks and positions still line up), and no stored id decodes to the secret. Every reader that
turns ids into text decodes through ``decode`` here, which shows such tokens as ``[REDACTED]``;
what needs the real tokens (a replay feeding them to a model) finds them with ``count``.
"""

from __future__ import annotations

from typing import Any

from rollscope.semconv import REDACTED_ID, REDACTED_TEXT


def count(ids: Any) -> int:
    """How many of ``ids`` were redacted (0 for anything that is not a list)."""
    return ids.count(REDACTED_ID) if type(ids) is list else 0


def decode(tokenizer: Any, ids: list[int], skip_special_tokens: bool = False) -> str:
    """``tokenizer.decode(ids)``, each run of redacted tokens read as ``[REDACTED]``."""
    if REDACTED_ID not in ids:
        return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
    parts, run = [], []
    for i, token in enumerate(ids):
        if token != REDACTED_ID:
            run.append(token)
            continue
        if run:
            parts.append(tokenizer.decode(run, skip_special_tokens=skip_special_tokens))
            run = []
        if i == 0 or ids[i - 1] != REDACTED_ID:
            parts.append(REDACTED_TEXT)
    if run:
        parts.append(tokenizer.decode(run, skip_special_tokens=skip_special_tokens))
    return "".join(parts)


def decode_each(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's own text (one call: a fast tokenizer decodes the batch in Rust); a redacted
    token's is ``[REDACTED]``."""
    if REDACTED_ID not in ids:
        return list(tokenizer.batch_decode([[i] for i in ids]))
    texts = iter(tokenizer.batch_decode([[i] for i in ids if i != REDACTED_ID]))
    return [REDACTED_TEXT if i == REDACTED_ID else next(texts) for i in ids]
