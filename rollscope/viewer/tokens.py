"""An llm turn's tokens with their sampled log-probabilities: what the token view draws and
``traces show --tokens`` prints.

Each token falls in a likelihood bucket (a CSS class, so the page's style policy holds); the
least likely tokens are listed with their positions, since that is where a reply went somewhere
unexpected; the turn's mean log-prob and the share of tokens below ``threshold`` summarise it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rollscope.store.records import SpanRecord

# Upper edges of the buckets, most likely first: p >= 0.9, 0.6, 0.37, 0.14, 0.02, below.
BUCKETS = (-0.1, -0.5, -1.0, -2.0, -4.0)
DEFAULT_THRESHOLD = math.log(0.1)  # a token the model gave less than a one-in-ten chance
DEFAULT_LEAST = 5


@dataclass
class Token:
    position: int
    token_id: int | None
    text: str  # the token's text when recorded, else its id
    log_prob: float | None
    bucket: int  # 0 (likely) .. len(BUCKETS) (unlikely); -1 without a log-prob


@dataclass
class TokenView:
    tokens: list[Token]
    least_likely: list[Token]
    mean_log_prob: float | None
    share_below: float | None
    threshold: float
    has_log_probs: bool
    has_texts: bool


def _bucket(lp: float | None) -> int:
    if lp is None:
        return -1
    for i, edge in enumerate(BUCKETS):
        if lp >= edge:
            return i
    return len(BUCKETS)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def token_view(span: SpanRecord, least: int = DEFAULT_LEAST, threshold: float = DEFAULT_THRESHOLD) -> TokenView | None:
    """None for a span with no response tokens (not an llm turn, or nothing recorded)."""
    out = span.outputs if isinstance(span.outputs, dict) else {}
    ids = out.get("token_ids")
    if not isinstance(ids, list) or not ids:
        return None
    log_probs = out.get("log_probs") if isinstance(out.get("log_probs"), list) else []
    texts = out.get("token_texts") if isinstance(out.get("token_texts"), list) else []
    tokens = []
    for i, token_id in enumerate(ids):
        lp = _number(log_probs[i]) if i < len(log_probs) else None
        text = texts[i] if i < len(texts) and isinstance(texts[i], str) else f"[{token_id}]"
        tokens.append(Token(i, token_id if type(token_id) is int else None, text, lp, _bucket(lp)))
    scored = [t for t in tokens if t.log_prob is not None]
    mean = sum(t.log_prob for t in scored) / len(scored) if scored else None  # type: ignore[misc]
    below = sum(t.log_prob < threshold for t in scored) / len(scored) if scored else None  # type: ignore[operator]
    lowest = sorted(scored, key=lambda t: (t.log_prob, t.position))[:least]
    return TokenView(tokens, lowest, mean, below, threshold, bool(scored), bool(texts))
