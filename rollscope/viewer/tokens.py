"""An llm turn's tokens with their sampled log-probabilities, and a trained-on response's tokens
with the trainer's and the rollout's log-probs: what the token views draw and ``traces show
--tokens`` prints.

Each token falls in a likelihood bucket (a CSS class, so the page's style policy holds); the
least likely tokens are listed with their positions, since that is where a reply went somewhere
unexpected; the turn's mean log-prob and the share of tokens below ``threshold`` summarise it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from rollscope.semconv import INPUT_TOKENS, OUTPUT_TOKENS, REDACTED_ID, REDACTED_TEXT, RETOKENIZATION
from rollscope.trajectory.records import SpanRecord, TrajectoryRecord
from rollscope.trajectory.tokens import count

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
    redacted: int = 0  # tokens that carried a secret (``store.tokens``), shown as [REDACTED]

    @property
    def below_in_words(self) -> str:
        """``share_below`` as a reader takes it: the share of tokens the model was unsure of."""
        chance = math.exp(self.threshold)
        return (
            f"{100 * (self.share_below or 0):.0f}% of its tokens sampled at a probability under {100 * chance:.0f}% "
            f"(log-prob < {self.threshold:.2f})"
        )


def _shown(token_id: object) -> str:
    """A token without recorded text: its id, or ``[REDACTED]``."""
    return REDACTED_TEXT if token_id == REDACTED_ID else f"[{token_id}]"


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
        text = texts[i] if i < len(texts) and isinstance(texts[i], str) else _shown(token_id)
        tokens.append(Token(i, token_id if type(token_id) is int else None, text, lp, _bucket(lp)))
    scored = [t for t in tokens if t.log_prob is not None]
    mean = sum(t.log_prob for t in scored) / len(scored) if scored else None  # type: ignore[misc]
    below = sum(t.log_prob < threshold for t in scored) / len(scored) if scored else None  # type: ignore[operator]
    lowest = sorted(scored, key=lambda t: (t.log_prob, t.position))[:least]
    return TokenView(tokens, lowest, mean, below, threshold, bool(scored), bool(texts), count(ids))


# Upper edges of the |trainer - rollout| log-prob buckets (nats): agreement to float noise, then worse.
DELTA_BUCKETS = (1e-4, 1e-2, 0.1, 0.5, 2.0)
# Upper edges of the entropy buckets (nats): near-certain, then ever wider spread.
ENTROPY_BUCKETS = (0.1, 0.5, 1.0, 2.0, 4.0)
# Edges of the advantage buckets: 0 (most negative) .. len (most positive); the middle one is about 0.
ADVANTAGE_EDGES = (-1.0, -0.3, -0.01, 0.01, 0.3, 1.0)
DEFAULT_WORST = 10
# The token overlays a trained-on response is drawn with: (name, CSS class prefix, what it colours).
OVERLAYS = (
    ("delta", "d", "|trainer - rollout| log-prob"),
    ("entropy", "e", "the policy's entropy"),
    ("kl", "k", "|policy - reference| log-prob (the KL term)"),
    ("advantage", "a", "the advantage"),
    ("trainer", "l", "the trainer's log-prob"),
)

# What each overlay's colours say, shown under the switch.
LEGENDS = {
    "delta": "white: trainer and rollout agree (< 1e-4 nats) · green, yellow, orange: 1e-2, 0.1, 0.5 · red: ≥ 2 nats "
    "(the policy trained on is not the one that sampled)",
    "entropy": "red: the policy was near-certain there (< 0.1 nats) · orange, yellow: < 0.5, < 1 · white: ≥ 4 nats "
    "(spread wide); a response all red is an entropy collapse",
    "kl": "white: policy and reference agree (< 1e-4 nats) · red: ≥ 2 nats apart, where the KL term pulls hardest",
    "advantage": "green: pushed up (positive advantage) · red: pushed down · white: about 0, no signal",
    "trainer": "the trainer's log-prob: white: likely (p ≥ 0.9) · red: unlikely (p < 0.02)",
}


@dataclass
class TrainingToken:
    position: int  # in the response (the sequence the trainer trained on, after the prompt)
    token_id: int | None
    text: str
    trainer: float | None  # the trainer's log-prob (verl's old_log_probs)
    rollout: float | None  # the rollout server's
    delta: float | None  # trainer - rollout; None where the loss does not use the token
    bucket: int  # of |delta|: 0 (agree) .. len(DELTA_BUCKETS); -1: masked (a tool response, not trained on)
    masked: bool = False
    entropy: float | None = None
    reference: float | None = None  # the reference policy's log-prob
    kl: float | None = None  # trainer - reference, where the loss uses the token
    advantage: float | None = None  # where the loss uses the token

    @property
    def classes(self) -> str:
        """One CSS class per overlay (``OVERLAYS``' prefix and bucket, ``x`` without a value), and
        ``m`` for a masked token: the page switches overlays with CSS alone."""
        kl = _above(abs(self.kl), DELTA_BUCKETS) if self.kl is not None else None
        buckets = {
            "d": None if self.bucket < 0 else self.bucket,
            "e": _above(self.entropy, ENTROPY_BUCKETS),
            "k": kl,
            "a": _above(self.advantage, ADVANTAGE_EDGES),
            "l": _likelihood(self.trainer),
        }
        found = [f"{prefix}{'x' if b is None else b}" for prefix, b in buckets.items()]
        return " ".join([*found, "m"] if self.masked else found)

    @property
    def title(self) -> str:
        """Every value the token has, for its tooltip."""
        parts = [f"#{self.position}", f"id {self.token_id}"]
        if self.masked:
            parts.append("masked: not trained on")
        for label, value in (
            ("trainer", self.trainer),
            ("rollout", self.rollout),
            ("Δ", self.delta),
            ("entropy", self.entropy),
            ("reference", self.reference),
            ("KL", self.kl),
            ("advantage", self.advantage),
        ):
            if value is not None:
                parts.append(f"{label} {value:.4g}")
        return " · ".join(parts)


# overlay -> (what its table lists, the value each of its tokens is ranked and shown by: largest first)
WORST: dict[str, tuple[str, Callable[[TrainingToken], float | None]]] = {
    "delta": ("largest |trainer - rollout| log-prob", lambda t: None if t.delta is None else abs(t.delta)),
    "entropy": ("surest (lowest entropy, nats)", lambda t: None if t.entropy is None or t.masked else -t.entropy),
    "kl": ("largest |policy - reference| log-prob", lambda t: None if t.kl is None else abs(t.kl)),
    "advantage": ("pushed hardest (|advantage|)", lambda t: None if t.advantage is None else abs(t.advantage)),
    "trainer": (
        "least likely to the trainer (log-prob)",
        lambda t: None if t.trainer is None or t.masked else -t.trainer,
    ),
}


@dataclass
class TrainingTokenView:
    tokens: list[TrainingToken]
    worst: dict[str, tuple[str, list[tuple[TrainingToken, float]]]]  # overlay -> (what, the top tokens and values)
    masked: int  # tokens in the response the loss does not use
    has_texts: bool
    overlays: list[tuple[str, str, str]]  # those of ``OVERLAYS`` the record has values for


def _above(value: float | None, edges: tuple[float, ...]) -> int | None:
    """How many of ``edges`` ``value`` is at or past: its bucket, None without a value."""
    return None if value is None else sum(value >= edge for edge in edges)


def _likelihood(lp: float | None) -> int | None:
    return None if lp is None else _bucket(lp)


def _delta_bucket(delta: float | None) -> int:
    if delta is None:
        return -1
    for i, edge in enumerate(DELTA_BUCKETS):
        if abs(delta) < edge:
            return i
    return len(DELTA_BUCKETS)


def _per_token(values: dict, name: str) -> list:
    found = values.get(name)
    return found if isinstance(found, list) else []


def training_token_view(record: TrajectoryRecord, worst: int = DEFAULT_WORST) -> TrainingTokenView | None:
    """The response's tokens with what the trainer computed at each (log-probs, their difference,
    entropy, the reference's log-prob, the advantage), masked tokens apart: None without a training
    record holding the loss mask and a per-token array. The token texts are the llm turns'
    (token2text), which are the loss tokens in order; a masked token (a tool response) shows its id."""
    training = record.training
    values = training.values if training is not None else {}
    mask = _per_token(values, "response_mask")
    old, rollout = _per_token(values, "old_log_probs"), _per_token(values, "rollout_log_probs")
    entropy, reference = _per_token(values, "entropy"), _per_token(values, "ref_log_probs")
    advantages = _per_token(values, "advantages")
    if not mask or not (old or entropy):
        return None
    run = next((s for s in record.spans if s.kind == "agent" and isinstance(s.outputs, dict)), None)
    ids = (run.outputs.get("response_ids") if run is not None else None) or []
    texts: list[str] = []
    for span in record.spans:
        if span.kind == "llm" and isinstance(span.outputs, dict) and isinstance(span.outputs.get("token_texts"), list):
            texts.extend(str(t) for t in span.outputs["token_texts"])

    def at(values: list, i: int) -> float | None:
        return _number(values[i]) if i < len(values) else None

    tokens, sampled = [], 0
    for i, m in enumerate(mask):
        token_id = ids[i] if i < len(ids) and type(ids[i]) is int else None
        shown = _shown(token_id) if token_id is not None else f"#{i}"
        if m:
            text = texts[sampled] if sampled < len(texts) else shown
            sampled += 1
        else:
            text = shown
        o, r, ref = at(old, i), at(rollout, i), at(reference, i)
        delta = o - r if m and o is not None and r is not None else None
        kl = o - ref if m and o is not None and ref is not None else None
        advantage = (at(advantages, i) if advantages else _number(values.get("advantage"))) if m else None
        tokens.append(
            TrainingToken(
                i, token_id, text, o, r, delta, _delta_bucket(delta), not m, at(entropy, i), ref, kl, advantage
            )
        )
    present = {
        "delta": bool(old and rollout),
        "entropy": bool(entropy),
        "kl": bool(old and reference),
        "advantage": any(t.advantage is not None for t in tokens),
        "trainer": bool(old),
    }
    overlays = [o for o in OVERLAYS if present[o[0]]]
    ranked = {}
    for name, _, _ in overlays:  # (each overlay's table: the tokens it colours most)
        what, key = WORST[name]
        scored = sorted(((t, v) for t in tokens if (v := key(t)) is not None), key=lambda tv: (-tv[1], tv[0].position))
        ranked[name] = (what, [(t, abs(v)) for t, v in scored[:worst]])
    return TrainingTokenView(tokens, ranked, sum(1 for m in mask if not m), bool(texts), overlays)


def drift_span(record: TrajectoryRecord, drift: dict | None) -> str | None:
    """The id of the span whose tokens the drift starts in: the llm turn whose reply covers its
    position (a turn's prompt is everything before it, so its reply starts at its input tokens),
    else the first tool call after the last turn that ends before it (its response is there)."""
    position = drift.get("position") if drift else None
    if not isinstance(position, int):
        return None
    before = None
    for span in sorted((s for s in record.spans if s.kind == "llm"), key=lambda s: s.start_ns):
        start = (span.attributes or {}).get(INPUT_TOKENS)
        length = (span.attributes or {}).get(OUTPUT_TOKENS)
        if isinstance(start, int) and isinstance(length, int):
            if start <= position < start + length:
                return span.id
            if start + length <= position:
                before = span
    if before is None:
        return None
    after = [s for s in record.spans if s.kind == "tool" and s.start_ns >= (before.end_ns or before.start_ns)]
    return min(after, key=lambda s: s.start_ns).id if after else None


def retokenization(record: TrajectoryRecord) -> dict | None:
    """The run span's chat-template check (``agentloops.retokenization``) when it found the template
    rendering the conversation to other tokens: position, both id windows, lengths."""
    for span in record.spans:
        check = (span.attributes or {}).get(RETOKENIZATION) if span.kind == "agent" else None
        if isinstance(check, dict) and check.get("match") is False:
            return check
    return None
