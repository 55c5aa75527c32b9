"""Retokenization drift: do the tokens the model was trained on equal what the chat template makes
of the same conversation?

A multi-turn loop builds its token sequence turn by turn (the prompt, the sampled tokens of each
reply, each tool response rendered on its own); the trainer trains on that sequence. Whoever later
renders the conversation's messages with the chat template — an SFT export, a reward model, the
next turn of a loop that re-renders — gets different tokens wherever the template does not
reproduce what the model sampled (whitespace a template strips, reasoning it drops, a tool call it
re-serialises). The check renders the whole conversation once and reports every place the two
sequences differ, each with both sides and its cause. What one sequence has past the other's end
is not compared: the template's closing markup after the last reply is not a drift.

Where the tokenizer can decode both sequences, the check also says why they differ (``cause``):
``"text"`` when the rendered text itself differs (what a template fixes: whitespace, a dropped
tool call), ``"split"`` when the text is the same and only its tokens differ — the model sampled a
split of that text its tokenizer never produces ("7" "4" where it encodes "74"). No template can
prevent a split; any re-tokenized export still differs there, so it is kept and shown, apart
from the drift a template causes (``SPLIT_ONLY``).

Rendering costs a few hundred microseconds, more than the rest of tracing a trajectory, so it is
not done on the rollout's thread where it can be avoided: the loop puts a ``RETOKENIZATION_REQUEST`` (the
messages, the template, the tokens) on its run span, and the check runs where spans are shaped —
the trace sidecar, or the exporter's thread (``check_request``) — as transformers'
``apply_chat_template`` would render and encode it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollscope.semconv import SPLIT_ONLY

__all__ = ["check_request", "first_difference", "render", "tokenizer_file"]
log = logging.getLogger("rollscope.tracing")
WINDOW = 8  # tokens shown on each side of the first difference


MAX_DIFFERENCES = 16  # differences listed one by one; past them, counted
WHITESPACE = "whitespace"  # a difference whose two sides differ only in spaces and newlines


def first_difference(
    rollout_ids: list[int],
    template_ids: list[int],
    window: int = WINDOW,
    decode: Callable[[list[int]], str] | None = None,
) -> dict[str, Any]:
    """The comparison of the loop's token sequence with the template's rendering of its messages.

    Every place the two differ is found, not only the first (an early, harmless difference must
    not hide a later, real one): ``differences`` lists each (``position`` in the rollout,
    ``template_position``, both sides' ids and, with ``decode``, both texts and the ``cause``:
    ``split`` where the text is the same and only its tokens differ, ``whitespace`` where only
    spaces and newlines do, ``text`` otherwise). The top level keeps the first difference's
    ``position`` and id windows, and a ``cause`` that is ``split`` only when every difference is
    one. Where one sequence ends, what the other has past it is not a difference (the template's
    closing markup after the last reply, a reply cut short)."""
    result: dict[str, Any] = {"match": True, "rollout_length": len(rollout_ids), "template_length": len(template_ids)}
    blocks = _differing_blocks(rollout_ids, template_ids)
    if not blocks:
        return result
    differences = []
    for i1, i2, j1, j2 in blocks[:MAX_DIFFERENCES]:
        difference: dict[str, Any] = {
            "position": i1,
            "template_position": j1,
            "rollout": rollout_ids[i1:i2],
            "template": template_ids[j1:j2],
        }
        if decode is not None:
            ours, theirs = decode(rollout_ids[i1:i2]), decode(template_ids[j1:j2])
            cause = _cause(ours, theirs)
            difference.update(
                {"rollout_text": ours, "template_text": theirs, "cause": cause, "said": _said(cause, ours, theirs)}
            )
        differences.append(difference)
    at = blocks[0][0]
    low = max(0, at - window)
    result.update(
        {
            "match": False,
            "position": at,
            "window_start": low,
            "rollout": rollout_ids[low : at + window],
            "template": template_ids[max(0, blocks[0][2] - (at - low)) : blocks[0][2] + window],
            "differences": differences,
            "difference_count": len(blocks),
        }
    )
    if decode is not None:
        # (a split across a block's edges shows as two texts that differ; the whole texts settle it)
        all_split = all(d["cause"] == SPLIT_ONLY for d in differences) or _same_text(
            decode(rollout_ids), decode(template_ids)
        )
        result["cause"] = SPLIT_ONLY if all_split else "text"
    return result


def _differing_blocks(ours: list[int], theirs: list[int]) -> list[tuple[int, int, int, int]]:
    """(rollout start, end, template start, end) of each place the two sequences differ, in order;
    a tail only one sequence has is left out."""
    shared = 0
    limit = min(len(ours), len(theirs))
    while shared < limit and ours[shared] == theirs[shared]:  # (the common case: equal for long)
        shared += 1
    if shared == limit:
        return []
    matcher = difflib.SequenceMatcher(None, ours[shared:], theirs[shared:], autojunk=False)
    blocks = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, i2, j1, j2 = i1 + shared, i2 + shared, j1 + shared, j2 + shared
        if i1 == len(ours) or j1 == len(theirs):  # past the end of one of them
            continue
        blocks.append((i1, i2, j1, j2))
    return blocks


def _cause(ours: str, theirs: str) -> str:
    if ours == theirs and "\ufffd" not in ours:
        return SPLIT_ONLY
    if "".join(ours.split()) == "".join(theirs.split()):
        return WHITESPACE
    return "text"


def _said(cause: str, ours: str, theirs: str) -> str:
    """The difference in words: what the template does to the conversation there."""
    if cause == SPLIT_ONLY:
        return "the same text, in other tokens than its tokenizer makes of it (the model's split)"
    if cause == WHITESPACE:
        return "the template writes it with other spacing (a tool call's JSON re-rendered, say)"
    if not ours:
        return "the template adds text the model did not write"
    if not theirs:
        return "the template leaves out text the model wrote"
    return "the template writes other text than the model did"


def _same_text(rollout: str, template: str) -> bool:
    """The texts agree over the part both have (the rollout may stop before the template's closing
    markup, or run on past it); a character decoding could not represent is never the same."""
    shared = min(len(rollout), len(template))
    return "\ufffd" not in rollout[:shared] and rollout[:shared] == template[:shared]


def render(request: dict[str, Any]) -> list[int]:
    """The token ids ``apply_chat_template(messages, tools=..., tokenize=True, **kwargs)`` gives for
    the request: its template rendered with the tokenizer's special tokens and the kwargs (with
    transformers' own renderer, which imports neither torch nor a model), then encoded without
    special tokens by the loop's tokenizer as transformers runs it (``request["tokenizer"]``: its
    backend tokenizer saved as JSON, ``tokenizer_file``)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(
        conversations=[request["messages"]],
        tools=request["tools"] or None,
        chat_template=request["template"],
        **{**request["special_tokens"], **(request["kwargs"] or {})},
    )
    return _encoder(request["tokenizer"]).encode(rendered[0], add_special_tokens=False).ids


def _decoder(request: dict[str, Any]) -> Callable[[list[int]], str]:
    """The request's tokenizer's decoding, special tokens kept (``first_difference``'s ``decode``)."""
    encoder = _encoder(request["tokenizer"])
    return lambda ids: encoder.decode(ids, skip_special_tokens=False)


@functools.lru_cache(maxsize=8)
def _encoder(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


def tokenizer_file(backend: Any) -> str:
    """A fast tokenizer's backend (``tokenizers.Tokenizer``, the pre-tokenizer transformers gives
    it included) as a JSON file the check loads: one per content, written once, in the temporary
    directory."""
    text = backend.to_str()
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    path = Path(tempfile.gettempdir()) / "rollscope-tokenizers" / f"{digest}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}")
        temp.write_text(text)
        temp.replace(path)  # (whole or absent, whoever reads it)
    return str(path)


def check_request(request: Any) -> dict[str, Any] | None:
    """The drift of a ``RETOKENIZATION_REQUEST`` (``first_difference``), or None when it cannot be rendered here
    (a template error, a tokenizer that cannot be loaded): the same as the loop's own check."""
    try:
        return first_difference(list(request["sequence"]), render(request), decode=_decoder(request))
    except Exception as exc:  # a template that cannot render this conversation: nothing to compare
        log.debug("retokenization check skipped (%s: %s)", type(exc).__name__, exc)
        return None
