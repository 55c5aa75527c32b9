"""What a trajectory's spans add up to, kept as plain columns so that a whole run can be listed,
filtered and summarised (``rollscope insights``) without reading a single span: counts and tokens,
replies cut at their token limit, tool calls repeated with the same arguments, the sum of the
sampled log-probabilities, the size of the final answer and its text (normalised: the same answer
across prompts is a collapse), how much a reply repeats itself, whether the loop ran out of turns,
tool errors by tool and kind, the task, the first error and where the chat template re-renders the
conversation to other tokens (``RETOKENIZATION``; apart from it, where only the model's split of
the same text differs: ``SPLIT_ONLY``).

The local backend keeps one ``TrajectorySummary`` per open trajectory and adds each span as it
ends (in the trace sidecar, off the rollout); a shard continued after its writer died rebuilds them
from the stored spans. Spans are read by duck typing: a live ``Span`` and a stored ``SpanRecord``
alike.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

import orjson

from rollscope.semconv import (
    ERROR_KIND,
    OUTPUT_TOKENS,
    RETOKENIZATION,
    SPLIT_ONLY,
    STOP,
    TOOL_ERROR_PREFIX,
    TOOL_NAME,
    TURN_LIMIT,
)
from rollscope.trajectory.records import ERROR_CHARS, TASK_CHARS, last_user_message

_TAG = re.compile(r"<[^<>]{0,64}>")  # template and format tags: <answer>, </tool_call>, <|im_end|>
_WORD = re.compile(r"\w")
_WORDS = re.compile(r"\w+")
ANSWER_KEY_CHARS = 80  # of the normalised final answer kept (``answer``): enough to tell answers apart
REPETITION_MIN_WORDS = 12  # a reply shorter than this has no ``repetition``
REPETITION_MAX_WORDS = 4000  # of a reply counted: a bound on the work, whatever its length

#: The summary's columns in the trajectories table, in this order (``TrajectorySummary.columns``).
COLUMNS = (
    "num_spans",
    "num_llm_calls",
    "num_tool_calls",
    "num_errors",
    "num_tokens",
    "num_tool_errors",
    "num_truncated",
    "num_repeated_calls",
    "logprob_sum",
    "logprob_count",
    "answer_chars",
    "turn_limit",
)


def answer_chars(text: Any) -> int:
    """Word characters in a reply once its tags are removed: 0 for an empty or format-only answer."""
    return len(_WORD.findall(_TAG.sub("", text))) if isinstance(text, str) else 0


_BOXED = "\\boxed{"
_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S | re.I)
_ANSWER_SAID = re.compile(r"(?:answer\s*(?:is|:)|####)\s*([^\n]*)", re.I)
_NUMBER = re.compile(r"(?<!\w)-?\d[\d,]*(?:\.\d+)?(?!\w)")  # a number of its own, not "a5"
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def final_answer(text: str) -> str:
    """The answer a reply gives, as a grader would extract it: the last ``\\boxed{...}``, else the
    last ``<answer>`` tag's content, else what follows the last "answer is" / "answer:" / "####" to
    the end of its sentence, else the last number, else the reply's last line. Comparing these
    (not whole replies) is what tells one answer given to many prompts however it is worded."""
    at = text.rfind(_BOXED)
    if at >= 0:
        depth, start = 1, at + len(_BOXED)
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if not depth:
                return text[start:i]
        return text[start:]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1]
    said = _ANSWER_SAID.findall(text)
    if said:
        end = _SENTENCE_END.search(said[-1])
        return said[-1][: end.start()] if end else said[-1]
    numbers = _NUMBER.findall(text)
    if numbers:
        return numbers[-1]
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def answer_key(text: Any) -> str:
    """The final answer (``final_answer``) as compared across prompts: tags removed, words
    lower-cased and joined by one space; a longer one as its start and a hash of the whole, in
    ``ANSWER_KEY_CHARS`` characters (two answers differing only in their tail stay apart); "" for
    an empty answer."""
    if not isinstance(text, str):
        return ""
    key = " ".join(_WORDS.findall(_TAG.sub("", final_answer(text)).lower()))
    if len(key) <= ANSWER_KEY_CHARS:
        return key
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return f"{key[: ANSWER_KEY_CHARS - 18]}… {digest}"


def repetition(text: Any) -> float | None:
    """The share of a reply's word 3-grams that repeat an earlier one (0: none; near 1: one phrase
    over and over), over its first ``REPETITION_MAX_WORDS`` words; None under ``REPETITION_MIN_WORDS``."""
    if not isinstance(text, str):
        return None
    words = _WORDS.findall(_TAG.sub(" ", text[: REPETITION_MAX_WORDS * 16]).lower())[:REPETITION_MAX_WORDS]
    if len(words) < REPETITION_MIN_WORDS:
        return None
    grams = list(zip(words, words[1:], words[2:], strict=False))
    return round(1 - len(set(grams)) / len(grams), 4)


def _canonical(value: Any) -> str:
    """One text per value, keys sorted: tool calls with the same arguments get the same."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits
        return json.dumps(value, sort_keys=True, default=str)


def error_kind(span: Any) -> str:
    attributes = span.attributes or {}
    kind = attributes.get(ERROR_KIND)
    if isinstance(kind, str):
        return kind
    return "timeout" if span.error_type in ("TimeoutError", "CancelledError") else "exception"


def _field(value: Any, name: str) -> Any:
    return value.get(name) if isinstance(value, dict) else None


class TrajectorySummary:
    __slots__ = (
        "answer",
        "answer_text",
        "calls",
        "drift",
        "errors",
        "first_error",
        "llm",
        "logprob_count",
        "logprob_sum",
        "repeated",
        "repetition",
        "spans",
        "split",
        "task",
        "tokens",
        "tool_error_kinds",
        "tool_errors",
        "tools",
        "truncated",
        "turn_limit",
    )

    def __init__(self) -> None:
        self.spans = self.llm = self.tools = self.errors = self.tokens = self.tool_errors = 0
        self.truncated = self.repeated = self.logprob_count = self.answer = self.turn_limit = 0
        self.logprob_sum = 0.0
        self.calls: set[str] = set()
        self.tool_error_kinds: dict[str, int] = {}
        self.task: str | None = None
        self.first_error: str | None = None
        self.drift: int | None = None
        self.split: int | None = None
        self.answer_text: Any = None  # the last reply's text; its key is made once, in ``attributes``
        self.repetition: float | None = None

    def add(self, span: Any) -> None:
        """One ended span (its payloads shaped: plain JSON values)."""
        kind, error = span.kind, span.status == "error"
        self.spans += 1
        if error:
            self.errors += 1
            if self.first_error is None:
                self.first_error = f"{span.name}: {span.error_message or span.error_type}"[:ERROR_CHARS]
        if kind == "llm":
            self._llm(span)
        elif kind == "tool":
            self._tool(span, error)
        elif kind == "agent":
            inputs, outputs = span.inputs, span.outputs
            if self.task is None:
                task = last_user_message(_field(inputs, "raw_prompt"))
                self.task = task[:TASK_CHARS] if task else None
            attributes = span.attributes or {}
            if attributes.get(STOP) == TURN_LIMIT or _field(_field(outputs, "extra_fields"), "stop") == TURN_LIMIT:
                self.turn_limit = 1
            check = attributes.get(RETOKENIZATION)
            if isinstance(check, dict) and check.get("match") is False:
                if check.get("cause") == SPLIT_ONLY:
                    self.split = check.get("position")
                else:
                    self.drift = check.get("position")

    def _llm(self, span: Any) -> None:
        self.llm += 1
        outputs = span.outputs
        tokens = (span.attributes or {}).get(OUTPUT_TOKENS, 0)
        self.tokens += tokens if type(tokens) is int else 0
        if _field(outputs, "stop_reason") == "length":
            self.truncated += 1
        log_probs = _field(outputs, "log_probs")
        if isinstance(log_probs, list):
            finite = [x for x in log_probs if type(x) in (float, int) and math.isfinite(x)]
            self.logprob_sum += math.fsum(finite)
            self.logprob_count += len(finite)
        text = _field(outputs, "response_text")
        self.answer, self.answer_text = answer_chars(text), text  # the last reply is the answer
        repeats = repetition(text)
        if repeats is not None:
            self.repetition = max(self.repetition or 0.0, repeats)  # the most repetitive reply

    def _tool(self, span: Any, error: bool) -> None:
        self.tools += 1
        attributes = span.attributes or {}
        name = attributes.get(TOOL_NAME) or span.name.removeprefix(TOOL_ERROR_PREFIX)
        inputs = span.inputs if isinstance(span.inputs, dict) else {}
        arguments = inputs.get("parameters", inputs.get("arguments"))
        key = f"{name}\0{_canonical(arguments)}"
        if key in self.calls:
            self.repeated += 1
        else:
            self.calls.add(key)
        if error:
            self.tool_errors += 1
            label = f"{name}|{error_kind(span)}"
            self.tool_error_kinds[label] = self.tool_error_kinds.get(label, 0) + 1

    def columns(self) -> tuple:
        """Values for ``COLUMNS``."""
        return (
            self.spans,
            self.llm,
            self.tools,
            self.errors,
            self.tokens,
            self.tool_errors,
            self.truncated,
            self.repeated,
            self.logprob_sum,
            self.logprob_count,
            self.answer,
            self.turn_limit,
        )

    def attributes(self) -> dict[str, Any]:
        """What joins the trajectory's attributes: its task, first error and tool errors by kind."""
        out: dict[str, Any] = {}
        if self.task:
            out["task"] = self.task
        if self.first_error:
            out["first_error"] = self.first_error
        if self.tool_error_kinds:
            out["tool_errors"] = dict(self.tool_error_kinds)
        if self.drift is not None:
            out["retokenization_drift"] = self.drift  # the first position the chat template renders differently
        if self.split is not None:
            out["retokenization_split"] = self.split  # the first position of a split the tokenizer never makes
        key = answer_key(self.answer_text)
        if key:
            out["answer"] = key
        if self.repetition is not None:
            out["repetition"] = self.repetition
        return out
