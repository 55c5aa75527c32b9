"""An LLM turn stored as what it adds: the vocabulary of a prompt recorded as a continuation of an
earlier turn, and ``Prompts``, which makes any such prompt whole again when asked.

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

Reading keeps that shape, so that what a read costs grows with what is stored, not with the square
of a trajectory's length (a 1,000-turn trajectory of 1M tokens would be 500M ids made whole). The
store's reader returns each turn as stored, marked by ``mark`` (``PROMPT_CONTINUES``: which turn,
how many tokens; ``PROMPT_UNRESOLVED``: why it cannot be made whole); ``Prompts`` gives what a
turn adds (``added_text``) or its whole prompt (``ids``, ``text``), one turn at a time, built when
asked and not kept. Backends that write whole calls (Weave, MLflow, OpenTelemetry) make each
trajectory's prompts whole in place with ``resolve_prompts``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rollscope.semconv import (
    PROMPT_BASE,
    PROMPT_CONTINUES,
    PROMPT_IDS,
    PROMPT_IDS_ADDED,
    PROMPT_TEXT,
    PROMPT_TEXT_ADDED,
    PROMPT_UNRESOLVED,
    REDACTED_ID,
)
from rollscope.trajectory import tokens
from rollscope.trajectory.decoders import changed, decoder_for


def is_continuation(inputs: Any) -> bool:
    return type(inputs) is dict and PROMPT_BASE in inputs


WINDOW = 8  # tokens before added ones that their text is decoded after: more than a character's bytes


def text_after(decode: Callable[[list[int]], str], before: list[int], piece: list[int]) -> tuple[str, int]:
    """The text ``piece`` adds after the tokens ``before`` (their last ``WINDOW``), and how many
    characters at the end of ``before``'s text it replaces: a character whose bytes the boundary
    split reads whole, and a tokenizer that drops a leading space at the start of a decode does
    not drop it here."""
    tail = before[-WINDOW:]
    return _after(decode(tail), decode(tail + piece))


def _after(alone: str, joined: str) -> tuple[str, int]:
    """What ``joined`` (a tail's text with a piece after it) adds to ``alone`` (the tail's text)."""
    same, limit = 0, min(len(alone), len(joined))
    while same < limit and alone[same] == joined[same]:
        same += 1
    return joined[same:], len(alone) - same


def reply_ids(span: Any) -> Any:
    """A turn's reply tokens (``outputs.token_ids``: a dict's key or an object's attribute), as stored or live."""
    return token_ids(span.outputs)


def token_ids(output: Any) -> Any:
    return output.get("token_ids") if isinstance(output, dict) else getattr(output, "token_ids", None)


class Prompts:
    """One trajectory's llm prompts as stored, each made whole only when asked.

    ``spans``: one trajectory's (stored or live; anything with ``id``, ``kind``, ``inputs``,
    ``outputs`` and ``attributes``). Checking how the turns continue each other is linear in the
    spans and decodes nothing; ``added_text`` decodes one turn's added tokens (kept: together they
    are the trajectory's text once); ``ids`` and ``text`` build one whole prompt (not kept: the
    caller holds it as long as it needs it). ``decoder``: the tokenizer by name and vocabulary
    (``decoders.decoder_for``), for a turn whose text was stored as its ids (``"text": "ids"``):
    None where the one at that path has another vocabulary; ``tokenizer``: one that decodes the turns that
    stored no text at all (token2text off), where the reader has one.
    """

    def __init__(
        self, spans: Iterable[Any], decoder: Callable[[str, Any], Any] = decoder_for, tokenizer: Any = None
    ) -> None:
        self._llm = {s.id: s for s in spans if s.kind == "llm" and type(s.inputs) is dict}
        self._decoder, self._tokenizer = decoder, tokenizer
        self._length: dict[str, int] = {}  # span id -> its whole prompt's length in tokens
        self._problem: dict[str, str] = {}  # span id -> why its prompt cannot be made whole
        self._added: dict[str, tuple[str | None, int]] = {}  # span id -> (its new text, chars it replaces)
        for span in self._llm.values():
            self._check(span)

    def continuations(self) -> list[Any]:
        return [s for s in self._llm.values() if PROMPT_BASE in s.inputs]

    def problem(self, span: Any) -> str | None:
        """Why ``span``'s prompt cannot be made whole (None: it can, or it is stored whole)."""
        return self._problem.get(span.id)

    def base(self, span: Any) -> Any:
        """The span whose prompt (and reply) ``span``'s continues; None for a whole prompt."""
        base = span.inputs.get(PROMPT_BASE) if span.id in self._llm else None
        return self._llm.get(base.get("span")) if type(base) is dict else None

    def length(self, span: Any) -> int | None:
        """The whole prompt's length in tokens, without building it."""
        return self._length.get(span.id)

    def ids(self, span: Any) -> list[int] | None:
        """The prompt's ids, whole, exactly as the loop passed them (None: not recorded, or cannot
        be made whole)."""
        if span.id not in self._length:
            return None
        chain = self._chain(span)
        root = chain[-1].inputs[PROMPT_IDS]
        out = list(root)
        for c in reversed(chain[:-1]):
            base = c.inputs[PROMPT_BASE]
            if base.get("reply"):
                out += reply_ids(self._llm[base["span"]])[: base["reply"]]
            out += c.inputs[PROMPT_IDS_ADDED]
        return out

    def text(self, span: Any) -> str | None:
        """The prompt's text, whole (None where it was not recorded and cannot be decoded here)."""
        if span.id not in self._length:
            return None
        chain = self._chain(span)
        root = chain[-1].inputs.get(PROMPT_TEXT)
        if not isinstance(root, str):
            return None
        parts, size = [root], len(root)
        for c in reversed(chain[:-1]):
            new, cut = self._new_text(c)
            if new is None or type(cut) is not int or not 0 <= cut <= size:
                return None
            while cut:  # (a character the boundary split: the last ``cut`` characters are replaced)
                last = parts.pop()
                keep = max(len(last) - cut, 0)
                cut -= len(last) - keep
                size -= len(last) - keep
                if keep:
                    parts.append(last[:keep])
            parts.append(new)
            size += len(new)
        return "".join(parts)

    def added_text(self, span: Any) -> str | None:
        """What ``span``'s prompt adds to the turn it continues, as text (the reply it starts with,
        then the new messages); a whole prompt's own text. None where it cannot be read here."""
        if span.id not in self._llm:
            return None
        if PROMPT_BASE not in span.inputs:
            text = span.inputs.get(PROMPT_TEXT)
            return text if isinstance(text, str) else None
        return self._new_text(span)[0] if span.id in self._length else None

    def whole_inputs(self, span: Any) -> Any:
        """``span``'s inputs as the loop passed them: a continuing turn's with its prompt whole
        (``prompt_ids``, ``prompt_text`` where readable) in place of what it added; any other's as
        they are."""
        if span.id not in self._llm or PROMPT_BASE not in span.inputs or span.id not in self._length:
            return span.inputs
        out: dict[str, Any] = {}
        for key, value in span.inputs.items():  # in the order they were recorded
            if key == PROMPT_BASE:
                out[PROMPT_IDS] = self.ids(span)
                text = self.text(span)
                if text is not None:
                    out[PROMPT_TEXT] = text
            elif key not in (PROMPT_IDS_ADDED, PROMPT_TEXT_ADDED):
                out[key] = value
        return out

    @property
    def note(self) -> str | None:
        """Why the turns whose text was stored as their ids cannot be read as text here: the
        tokenizer at the path they name has another vocabulary than the one recorded (None: they can,
        or none was stored so)."""
        named = {
            (base.get("decoder"), base.get("vocab"))
            for s in self.continuations()
            if type(base := s.inputs[PROMPT_BASE]) is dict and base.get("text") == "ids"
        }
        for name, vocab in named:
            if isinstance(name, str) and self._decoder(name, vocab) is None and name in changed:
                return changed[name]
        return None

    def mark(self) -> int:
        """Says on each continuing span which turn it continues and with how many tokens
        (``PROMPT_CONTINUES``), or why it cannot be made whole (``PROMPT_UNRESOLVED``); returns how
        many cannot."""
        for span in self.continuations():
            problem = self._problem.get(span.id)
            if problem is not None:
                span.attributes = {**(span.attributes or {}), PROMPT_UNRESOLVED: problem}
                continue
            base = span.inputs[PROMPT_BASE]
            shared = base["tokens"] + base.get("reply", 0)
            span.attributes = {**(span.attributes or {}), PROMPT_CONTINUES: {"span": base["span"], "tokens": shared}}
        return len(self._problem)

    # ---- checking, walked without recursion (a chain may be thousands of turns long) ----
    def _check(self, span: Any) -> None:
        chain: list[Any] = []
        s: Any = span
        while s.id not in self._length and s.id not in self._problem:
            base = s.inputs.get(PROMPT_BASE)
            if base is None:
                ids = s.inputs.get(PROMPT_IDS)
                if type(ids) is list:
                    self._length[s.id] = len(ids)
                break
            chain.append(s)
            source = self._llm.get(base.get("span")) if type(base) is dict else None
            if source is None or source in chain:  # (a cycle: only a crafted store holds one)
                break
            s = source
        for c in reversed(chain):
            problem = self._continues(c)
            if problem is None:
                base = c.inputs[PROMPT_BASE]
                self._length[c.id] = base["tokens"] + base.get("reply", 0) + len(c.inputs[PROMPT_IDS_ADDED])
            else:
                self._problem[c.id] = problem

    def _continues(self, span: Any) -> str | None:
        base, added = span.inputs.get(PROMPT_BASE), span.inputs.get(PROMPT_IDS_ADDED)
        if type(base) is not dict or type(added) is not list:
            return f"a malformed {PROMPT_BASE}"
        source = self._llm.get(base.get("span"))
        if source is None:
            return f"the turn it continues ({str(base.get('span'))[:40]}) is not in the trace"
        if source.id in self._problem or (PROMPT_BASE in source.inputs and source.id not in self._length):
            return f"the turn it continues ({source.id}) could not be made whole"
        n, reply = base.get("tokens"), base.get("reply", 0)
        if type(n) is not int or self._length.get(source.id) != n or type(reply) is not int or reply < 0:
            return f"the turn it continues ({source.id}) does not hold the {n} prompt tokens it starts with"
        replied = reply_ids(source)
        if type(replied) is not list or len(replied) < reply:
            return f"the turn it continues ({source.id}) does not hold the {reply} reply tokens it starts with"
        return None

    def _chain(self, span: Any) -> list[Any]:
        """``span``, the turn it continues, that one's, ... down to a prompt stored whole."""
        chain = [span]
        while PROMPT_BASE in chain[-1].inputs:
            chain.append(self._llm[chain[-1].inputs[PROMPT_BASE]["span"]])
        return chain

    def _tail(self, span: Any, n: int) -> list[int]:
        """The last ``n`` ids of ``span``'s whole prompt, without building it."""
        out: list[int] = []
        s = span
        while len(out) < n:
            if PROMPT_BASE not in s.inputs:
                return s.inputs[PROMPT_IDS][-(n - len(out)) :] + out
            base = s.inputs[PROMPT_BASE]
            out = s.inputs[PROMPT_IDS_ADDED][-(n - len(out)) :] + out
            s = self._llm[base["span"]]
            if len(out) < n and base.get("reply"):
                out = reply_ids(s)[: base["reply"]][-(n - len(out)) :] + out
        return out[len(out) - n :]

    def _new_text(self, span: Any) -> tuple[str | None, int]:
        found = self._added.get(span.id)
        if found is None:
            found = self._added[span.id] = self._decode_added(span)
        return found

    def prefetch(self, spans: Iterable[Any]) -> None:
        """Decode what each of ``spans`` adds, many at once: one batch per tokenizer (a fast
        tokenizer decodes a batch on every core), where ``added_text`` would decode them one by one."""
        batches: dict[int, tuple[Any, list[tuple[Any, list[int], list[int]]]]] = {}
        for span in spans:
            if span.id in self._added or span.id not in self._length or PROMPT_BASE not in span.inputs:
                continue
            found = self._piece(span)
            if found is None or not hasattr(found[0], "batch_decode"):
                continue
            tokenizer, tail, piece = found
            if REDACTED_ID not in tail and REDACTED_ID not in piece:  # (those read through ``tokens.decode``)
                batches.setdefault(id(tokenizer), (tokenizer, []))[1].append((span, tail, piece))
        for tokenizer, items in batches.values():
            try:
                alone = tokenizer.batch_decode([tail for _, tail, _ in items])
                joined = tokenizer.batch_decode([tail + piece for _, tail, piece in items])
            except Exception:  # (ids it cannot decode: each is tried alone, when asked)
                continue
            for (span, _, _), a, j in zip(items, alone, joined, strict=True):
                self._added[span.id] = _after(a, j)

    def _piece(self, span: Any) -> tuple[Any, list[int], list[int]] | None:
        """(the tokenizer, the tail, the ids) a continuing turn's stored-as-ids text is decoded from;
        None where it stored its text, or no tokenizer here decodes it."""
        inputs, base = span.inputs, span.inputs[PROMPT_BASE]
        if isinstance(inputs.get(PROMPT_TEXT_ADDED), str):
            return None
        if base.get("text") == "ids":
            name = base.get("decoder")
            tokenizer = self._decoder(name, base.get("vocab")) if isinstance(name, str) else None
        else:
            tokenizer = self._tokenizer
        if tokenizer is None:
            return None
        source = self._llm[base["span"]]
        return (
            tokenizer,
            self._tail(source, WINDOW),
            reply_ids(source)[: base.get("reply", 0)] + inputs[PROMPT_IDS_ADDED],
        )

    def _decode_added(self, span: Any) -> tuple[str | None, int]:
        inputs, base = span.inputs, span.inputs[PROMPT_BASE]
        if isinstance(inputs.get(PROMPT_TEXT_ADDED), str):
            return inputs[PROMPT_TEXT_ADDED], base.get("text_cut", 0)
        found = self._piece(span)
        if found is None:
            return None, 0
        tokenizer, tail, piece = found
        try:
            return text_after(lambda ids: tokens.decode(tokenizer, ids), tail, piece)
        except Exception:  # ids this tokenizer cannot decode: the prompt's ids stay whole, its text absent
            return None, 0


def resolve_prompts(spans: list[Any], decoder: Callable[[str, Any], Any] = decoder_for) -> int:
    """Makes the prompt of every continuing llm span among ``spans`` whole, in place, for a
    backend that writes each call whole; returns how many could not be (those keep what they added,
    and say why under ``PROMPT_UNRESOLVED``). Costs the whole prompts' size: each is built once."""
    prompts = Prompts(spans, decoder)
    pending = prompts.continuations()
    failed = prompts.mark()
    whole = {}
    for span in pending:
        if prompts.problem(span) is None:
            inputs, added = prompts.whole_inputs(span), prompts.added_text(span)
            text = inputs.get(PROMPT_TEXT)
            whole[span.id] = inputs, None if text is None or added is None else len(text) - len(added)
    for span in pending:
        if span.id in whole:
            span.inputs, span.attributes[PROMPT_CONTINUES]["chars"] = whole[span.id]
    return failed


def compact_prompts(spans: list[Any]) -> int:
    """The inverse of ``resolve_prompts``, in place: each llm span whose whole prompt says which
    turn it continues (``PROMPT_CONTINUES``, as ``resolve_prompts`` leaves it) is stored again as
    what it adds, so a trajectory read back from a destination that holds whole calls (Weave) reads
    as the local store's does. A span whose prompt does not start with its base's is left whole.
    Returns how many were made compact."""
    llm = {s.id: s for s in spans if s.kind == "llm" and type(s.inputs) is dict}
    done = 0
    for span in llm.values():
        cont = (span.attributes or {}).get(PROMPT_CONTINUES)
        base = llm.get(cont.get("span")) if type(cont) is dict else None
        ids, shared = span.inputs.get(PROMPT_IDS), cont.get("tokens") if type(cont) is dict else None
        base_ids = base.inputs.get(PROMPT_IDS) if base is not None else None
        if type(ids) is not list or type(base_ids) is not list or type(shared) is not int:
            continue
        reply = shared - len(base_ids)
        replied = reply_ids(base)
        if not (0 <= reply <= len(replied or [])) or ids[:shared] != base_ids + list(replied[:reply]):
            continue
        pointer: dict[str, Any] = {"span": base.id, "tokens": len(base_ids), "reply": reply}
        text, base_text, chars = span.inputs.get(PROMPT_TEXT), base.inputs.get(PROMPT_TEXT), cont.get("chars")
        added_text = None
        readable = isinstance(text, str) and isinstance(base_text, str) and type(chars) is int
        if readable and 0 <= chars <= len(base_text) and text[:chars] == base_text[:chars]:
            added_text = text[chars:]
            if len(base_text) > chars:
                pointer["text_cut"] = len(base_text) - chars
        compact: dict[str, Any] = {}
        for key, value in span.inputs.items():
            if key == PROMPT_IDS:
                compact[PROMPT_BASE] = pointer
                compact[PROMPT_IDS_ADDED] = ids[shared:]
                if added_text is not None:
                    compact[PROMPT_TEXT_ADDED] = added_text
            elif key != PROMPT_TEXT:
                compact[key] = value
        span.inputs = compact
        span.attributes = {k: v for k, v in span.attributes.items() if k != PROMPT_CONTINUES}
        done += 1
    return done
