"""An LLM turn stored as what it adds: the vocabulary of a prompt recorded as a continuation of an
earlier turn, and the one function that makes every such prompt whole again.

A multi-turn loop sends its whole context at every turn: the previous prompt, the reply, the
tool's answer. Recorded whole, each turn would store the context again, and a trajectory's trace
would grow with the square of its length. So an llm span whose prompt continues an earlier turn of
its trajectory holds, instead of ``prompt_ids`` (and ``prompt_text``):

- ``prompt_base``: ``{"span": id, "tokens": n, "reply": r}``: the prompt starts with the first
  ``n`` tokens of span ``id``'s prompt (all of it) and the first ``r`` tokens of its reply
  (``outputs.token_ids``); ``"text_cut": c`` when the text below replaces the last ``c``
  characters of that span's prompt text (a character whose bytes the boundary split);
- ``prompt_ids_added``: the tokens after those;
- with token2text, the text of the reply's ``r`` tokens and the added ones, decoded after the
  last tokens of the prompt they follow (``text_after``): where that text is exactly what the ids
  decode to (nothing in it was redacted or cut), ``prompt_base`` says ``"text": "ids"`` and names
  the tokenizer (``"decoder"``), and the text is decoded again where the trace is read: storing it
  would double what the turn costs; else it is stored, as shaped, under ``prompt_text_added``.

``resolve_prompts`` turns these back into ``prompt_ids`` and ``prompt_text``, exactly as the loop
passed them: the store's reader calls it for every trajectory it reads, and so does every backend
that writes whole calls (Weave, MLflow, OpenTelemetry), so nobody above sees a continuation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollscope.semconv import (
    PROMPT_BASE,
    PROMPT_CONTINUES,
    PROMPT_IDS,
    PROMPT_IDS_ADDED,
    PROMPT_TEXT,
    PROMPT_TEXT_ADDED,
    PROMPT_UNRESOLVED,
)
from rollscope.trajectory import tokens
from rollscope.trajectory.text import load_decoder


def is_continuation(inputs: Any) -> bool:
    return type(inputs) is dict and PROMPT_BASE in inputs


WINDOW = 8  # tokens before added ones that their text is decoded after: more than a character's bytes


def text_after(decode: Callable[[list[int]], str], before: list[int], piece: list[int]) -> tuple[str, int]:
    """The text ``piece`` adds after the tokens ``before`` (their last ``WINDOW``), and how many
    characters at the end of ``before``'s text it replaces: a character whose bytes the boundary
    split reads whole, and a tokenizer that drops a leading space at the start of a decode does
    not drop it here."""
    tail = before[-WINDOW:]
    alone = decode(tail)
    joined = decode(tail + piece)
    same, limit = 0, min(len(alone), len(joined))
    while same < limit and alone[same] == joined[same]:
        same += 1
    return joined[same:], len(alone) - same


def resolve_prompts(spans: list[Any], decoder: Callable[[str], Any] = load_decoder) -> int:
    """Makes the prompt of every continuing llm span among ``spans`` (one trajectory's, stored or
    live; anything with ``id``, ``kind``, ``inputs``, ``outputs`` and ``attributes``) whole, in
    place; returns how many could not be (the turn they continue is missing or was not recorded
    as expected): those keep what they added, and say why under ``PROMPT_UNRESOLVED``. Linear in the
    spans' tokens: each turn's prompt is built once, from its base's. ``decoder``: the tokenizer
    a continuation's text is decoded with where only its ids were stored (by name); without it
    here the prompt's ids are whole and its text absent, as with token2text off."""
    llm = {s.id: s for s in spans if s.kind == "llm" and type(s.inputs) is dict}
    pending = [s for s in llm.values() if PROMPT_BASE in s.inputs]
    if not pending:
        return 0
    whole: dict[str, tuple[list[int], str | None]] = {}  # span id -> its prompt ids and text, whole
    failed = 0
    for span in pending:
        chain = []  # the continuations from ``span`` down to a prompt already whole
        s: Any = span
        while s is not None and PROMPT_BASE in s.inputs and s.id not in whole:
            chain.append(s)
            base = s.inputs[PROMPT_BASE]
            s = llm.get(base.get("span")) if type(base) is dict else None
            if s is not None and s in chain:  # (a cycle: only a crafted store holds one)
                s = None
        for c in reversed(chain):
            problem = _make_whole(c, llm, whole, decoder)
            if problem is not None:
                failed += 1
                c.attributes = {**(c.attributes or {}), PROMPT_UNRESOLVED: problem}
    return failed


def _make_whole(
    span: Any, llm: dict[str, Any], whole: dict[str, tuple[list[int], str | None]], decoder: Callable[[str], Any]
) -> str | None:
    inputs = span.inputs
    base = inputs.get(PROMPT_BASE)
    added = inputs.get(PROMPT_IDS_ADDED)
    if type(base) is not dict or type(added) is not list:
        return f"a malformed {PROMPT_BASE}"
    source = llm.get(base.get("span"))
    if source is None:
        return f"the turn it continues ({str(base.get('span'))[:40]}) is not in the trace"
    if source.id in whole:
        ids, text = whole[source.id]
    elif PROMPT_BASE not in source.inputs:
        ids, text = source.inputs.get(PROMPT_IDS), source.inputs.get(PROMPT_TEXT)
    else:
        return f"the turn it continues ({source.id}) could not be made whole"
    tokens, reply = base.get("tokens"), base.get("reply", 0)
    if type(ids) is not list or type(tokens) is not int or len(ids) != tokens or type(reply) is not int:
        return f"the turn it continues ({source.id}) does not hold the {tokens} prompt tokens it starts with"
    reply_ids = _field(source.outputs, "token_ids") if reply else []
    if type(reply_ids) is not list or len(reply_ids) < reply:
        return f"the turn it continues ({source.id}) does not hold the {reply} reply tokens it starts with"
    prompt = ids + reply_ids[:reply] + added
    new_text = inputs.get(PROMPT_TEXT_ADDED)
    cut = base.get("text_cut", 0)
    if new_text is None and base.get("text") == "ids" and isinstance(text, str):
        new_text, cut = _decoded(decoder, base.get("decoder"), ids, reply_ids[:reply] + added)
    full_text = None
    if isinstance(new_text, str) and isinstance(text, str) and type(cut) is int and 0 <= cut <= len(text):
        full_text = text[: len(text) - cut] + new_text
    whole[span.id] = (prompt, full_text)
    shared = len(ids) + reply
    span.attributes = {
        **(span.attributes or {}),
        PROMPT_CONTINUES: {
            "span": source.id,
            "tokens": shared,
            "chars": len(text) - cut if full_text is not None else None,
        },
    }
    rebuilt: dict[str, Any] = {}
    for key, value in inputs.items():  # the inputs as they were recorded whole, in their order
        if key == PROMPT_BASE:
            rebuilt[PROMPT_IDS] = prompt
            if full_text is not None:
                rebuilt[PROMPT_TEXT] = full_text
        elif key not in (PROMPT_IDS_ADDED, PROMPT_TEXT_ADDED):
            rebuilt[key] = value
    span.inputs = rebuilt
    return None


def _decoded(decoder: Callable[[str], Any], name: Any, before: list[int], piece: list[int]) -> tuple[str | None, int]:
    """``text_after`` with the tokenizer named ``name``; (None, 0) where it is not here."""
    tokenizer = decoder(name) if isinstance(name, str) else None
    if tokenizer is None:
        return None, 0
    try:
        return text_after(lambda ids: tokens.decode(tokenizer, ids), before, piece)
    except Exception:  # ids this tokenizer cannot decode: the prompt's ids stay whole, its text absent
        return None, 0


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)
