"""Retokenization drift: do the tokens the model was trained on equal what the chat template makes
of the same conversation?

A multi-turn loop builds its token sequence turn by turn (the prompt, the sampled tokens of each
reply, each tool response rendered on its own); the trainer trains on that sequence. Whoever later
renders the conversation's messages with the chat template — an SFT export, a reward model, the
next turn of a loop that re-renders — gets different tokens wherever the template does not
reproduce what the model sampled (whitespace a template strips, reasoning it drops, a tool call it
re-serialises). The check renders the whole conversation once and reports the first position
where the two sequences differ, with both sides around it. Only positions both sequences have are
compared: the template's closing markup after the last reply is not a drift.

Where the tokenizer can decode both sequences, the check also says why they differ (``cause``):
``"text"`` when the rendered text itself differs (what a template fixes: whitespace, a dropped
tool call), ``"split"`` when the text is the same and only its tokens differ — the model sampled a
split of that text its tokenizer never produces ("7" "4" where it encodes "74"). No template can
prevent a split; any re-tokenized export still differs there, so it is kept and shown, apart
from the drift a template causes (``SPLIT_ONLY``).

Rendering costs a few hundred microseconds, more than the rest of tracing a trajectory, so it is
not done on the rollout's thread where it can be avoided: the loop puts a ``REQUEST`` (the
messages, the template, the tokens) on its run span, and the check runs where spans are shaped —
the trace sidecar, or the exporter's thread (``check_request``) — as transformers'
``apply_chat_template`` would render and encode it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rollscope.store.summary import RETOKENIZATION, SPLIT_ONLY

__all__ = ["REQUEST", "RETOKENIZATION", "SPLIT_ONLY", "check_request", "first_difference", "render", "tokenizer_file"]
log = logging.getLogger("rollscope.tracing")
REQUEST = "rollscope.retokenization.request"  # a run span's attribute until the check has run
WINDOW = 8  # tokens shown on each side of the first difference


def first_difference(rollout_ids: list[int], template_ids: list[int], window: int = WINDOW,
                     decode: Callable[[list[int]], str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The comparison of the loop's token sequence with the template's rendering of its messages;
    ``decode`` (the tokenizer's, special tokens kept) tells a split from a text that differs."""
    shared = min(len(rollout_ids), len(template_ids))
    at = next((i for i in range(shared) if rollout_ids[i] != template_ids[i]), None)
    result: dict[str, Any] = {"match": at is None, "rollout_length": len(rollout_ids),
                              "template_length": len(template_ids)}  # fmt: skip
    if at is not None:
        low = max(0, at - window)
        result.update({"position": at, "window_start": low, "rollout": rollout_ids[low: at + window],
                       "template": template_ids[low: at + window]})  # fmt: skip
        if decode is not None:
            result["cause"] = SPLIT_ONLY if _same_text(decode(rollout_ids), decode(template_ids)) else "text"
    return result


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

    rendered, _ = render_jinja_template(conversations=[request["messages"]], tools=request["tools"] or None,
                                        chat_template=request["template"],
                                        **{**request["special_tokens"], **(request["kwargs"] or {})})  # fmt: skip
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
    """The drift of a ``REQUEST`` (``first_difference``), or None when it cannot be rendered here
    (a template error, a tokenizer that cannot be loaded): the same as the loop's own check."""
    try:
        return first_difference(list(request["sequence"]), render(request), decode=_decoder(request))
    except Exception as exc:  # a template that cannot render this conversation: nothing to compare
        log.debug("retokenization check skipped (%s: %s)", type(exc).__name__, exc)
        return None
