"""An LLM turn recorded as what it adds (the vocabulary: ``rollscope.trajectory.turns``), in two halves:

- on the rollout's thread (``prompt_inputs``, ``replied``): whether a turn's prompt continues the
  trajectory's previous turn, found with one comparison in C against the trajectory's own copy of
  its context, which grows by the new tokens only: no copy, pickle, hash or decode of the whole
  context per turn. A prompt that does not continue it (a loop that truncates, summarises or
  rewrites its context) is recorded whole, and becomes the context the next turn is compared to;
- where events are shaped (``TurnTexts``): the last few tokens of each turn's prompt, and its
  reply, so the next turn's added tokens are decoded after them (``store.turns.text_after``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from rollscope.semconv import PROMPT_BASE, PROMPT_IDS, PROMPT_IDS_ADDED
from rollscope.tracing.spans import Trajectory
from rollscope.trajectory.turns import WINDOW, token_ids


class Context:
    """A trajectory's last recorded turn, as the rollout's thread compares the next prompt to it:
    its span, its prompt's length, and the rollout's own copy of the prompt and (once the turn
    returned) its reply."""

    __slots__ = ("ids", "prompt_len", "span_id")

    def __init__(self, span_id: str, ids: list[int], prompt_len: int) -> None:
        self.span_id, self.ids, self.prompt_len = span_id, ids, prompt_len


def prompt_inputs(trajectory: Trajectory, span_id: str, prompt: list[int], inputs: dict[str, Any]) -> Context:
    """Puts the prompt into ``inputs`` as what it adds to the trajectory's last turn, or whole;
    returns the context the next turn is compared to (``replied`` adds the reply to it)."""
    last: Context | None = trajectory.turns
    if last is not None:
        ids, k, p = last.ids, len(last.ids), last.prompt_len
        if len(prompt) >= k:
            ids += prompt[k:]
            if ids == prompt:  # (in C; the items are mostly the same int objects: a pointer check each)
                return _continued(trajectory, last, span_id, ids, k - p, prompt, inputs)
            del ids[k:]
        if k > p and len(prompt) >= p and ids[:p] == prompt[:p]:  # the prompt, without the reply
            del ids[p:]
            ids += prompt[p:]
            return _continued(trajectory, last, span_id, ids, 0, prompt, inputs)
    inputs[PROMPT_IDS] = prompt.copy()
    context = trajectory.turns = Context(span_id, prompt.copy(), len(prompt))  # (a copy of its own: it grows)
    return context


def _continued(
    trajectory: Trajectory,
    last: Context,
    span_id: str,
    ids: list[int],
    reply: int,
    prompt: list[int],
    inputs: dict[str, Any],
) -> Context:
    """``prompt`` recorded as ``last``'s prompt, ``reply`` tokens of its reply and the rest;
    ``ids``, the trajectory's copy of its context, already equal to ``prompt``."""
    inputs[PROMPT_BASE] = {"span": last.span_id, "tokens": last.prompt_len, "reply": reply}
    inputs[PROMPT_IDS_ADDED] = prompt[last.prompt_len + reply :]
    context = trajectory.turns = Context(span_id, ids, len(prompt))
    return context


def replied(trajectory: Trajectory, context: Context, output: Any) -> None:
    """The turn's reply joins the context, unless another turn of the trajectory started since."""
    if trajectory.turns is not context:
        return
    reply = token_ids(output)
    if type(reply) is list:
        context.ids += reply
    elif reply is not None:
        try:
            context.ids += [int(t) for t in reply]
        except (TypeError, ValueError):  # not ids: the next prompt is compared to the prompt alone
            pass


TAIL_CHARS = 4096  # of a prompt's text kept to scan the next turn's boundary with (``_payload.CROSSING_CHARS``)


class TurnTexts:
    """Where spans are shaped: per trajectory, the last tokens of each llm turn's prompt and its
    reply, so the next turn's added tokens decode as they read in the whole context, and are
    scanned for secrets with what came before them: a key whose first lines ended one turn's
    prompt and whose rest begins the next (a tool streaming its output in chunks) is found whole.
    The latest turn keeps ``SCAN_CONTEXT`` tokens (more than the longest secret the redactor knows,
    a private key's block); earlier ones ``WINDOW``. Bounded: a trajectory is forgotten when it
    ends, and at most ``MAX_TRAJECTORIES`` are held (a trajectory forgotten early has its later
    turns' text decoded without that context)."""

    MAX_TRAJECTORIES = 4096
    MAX_TURNS = 16  # a turn continues the trajectory's last one, or one a few back (calls in parallel)
    SCAN_CONTEXT = 1024

    def __init__(self) -> None:
        self._turns: OrderedDict[str, OrderedDict[str, tuple[list[int], list[int], str | None]]] = OrderedDict()

    def forget(self, trajectory_id: str) -> None:
        self._turns.pop(trajectory_id, None)

    def remember(
        self, trajectory_id: str, span_id: str, inputs: Any, outputs: Any, added: tuple[str, int, str] | None = None
    ) -> None:
        """After an llm span is shaped from its raw ``inputs``: its prompt's last tokens and its
        reply, and (a continuation: ``added``, the text it adds, the characters of the prompt
        before it that text replaces, and that prompt's last text) its own prompt's last
        ``TAIL_CHARS`` of text, so the next turn is scanned across its boundary without decoding
        its context again."""
        if type(inputs) is not dict:
            return
        tail_text = None
        if PROMPT_BASE in inputs:
            before = self.before(trajectory_id, inputs)
            if before is None:
                return
            tail, reply, _ = before
            tail = (tail + reply + inputs[PROMPT_IDS_ADDED])[-self.SCAN_CONTEXT :]
            if added is not None:
                text, cut, earlier = added
                tail_text = (earlier[: len(earlier) - cut] + text)[-TAIL_CHARS:]
        elif type(inputs.get(PROMPT_IDS)) is list:
            tail = inputs[PROMPT_IDS][-self.SCAN_CONTEXT :]
        else:
            return
        reply_ids = token_ids(outputs)
        turns = self._turns.get(trajectory_id)
        if turns is None:
            turns = self._turns[trajectory_id] = OrderedDict()
            if len(self._turns) > self.MAX_TRAJECTORIES:
                self._turns.popitem(last=False)
        if turns:  # (the turn before keeps what its text is decoded after)
            last = next(reversed(turns))
            earlier_tail, replied, _ = turns[last]
            turns[last] = (earlier_tail[-WINDOW:], replied, None)
        turns[span_id] = (tail, reply_ids if type(reply_ids) is list else [], tail_text)
        if len(turns) > self.MAX_TURNS:
            turns.popitem(last=False)

    def before(self, trajectory_id: str, inputs: dict[str, Any]) -> tuple[list[int], list[int], str | None] | None:
        """A continuation's base as known here: the last tokens of its prompt, the reply tokens
        the continuation includes (its text is ``store.turns.text_after`` them and the added ones),
        and its prompt's last text where known (None: decode the tokens); None when its base is not
        known here (or it is malformed)."""
        base, added = inputs[PROMPT_BASE], inputs.get(PROMPT_IDS_ADDED)
        turns = self._turns.get(trajectory_id)
        known = turns.get(base.get("span")) if turns is not None and type(base) is dict else None
        if known is None or type(added) is not list:
            return None
        tail, reply, tail_text = known
        return tail, reply[: base.get("reply", 0)], tail_text
