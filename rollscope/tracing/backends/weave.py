"""``weave``: trajectories as Weave calls, in the shape verl's own Weave tracing produces.

One root call per trajectory and one child call per span, nested as the spans were, each carrying
verl's attributes (step, sample_index, rollout_n, validate, experiment_name); the reward is in the
root call's output, token usage in the LLM calls' summaries (rolled up on the root). Calls are
written when the trajectory ends, with the spans' own start and end times and ids derived from
rollscope's, so the same trajectory replayed later (``rollscope push``) lands with its real timing
and creates no duplicate. What training did with the trajectory (its advantage, group, policy
version, log-prob agreement) arrives after the call ended: it goes as feedback on the root call.

Runs in the trace sidecar with a weave client of its own: ``weave.init(project)``, the call verl
makes, so the same entity and project (``WANDB_*`` environment, ``trainer.project_name``). Calls go
to the client's trace server as complete call records, one ``calls/complete`` batch a flush
(``send_calls``: a call the server refuses costs that call only, kept as a dead letter); the weave
client's per-value serializer never walks a payload (the shaped payload is plain JSON already),
and token-id and log-prob lists travel packed as one string each, beside their decoded text
(``compact``).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import orjson

from rollscope.semconv import INPUT_TOKENS, OUTPUT_TOKENS, REPLAY, REPLAY_OF, REQUEST_MODEL, REWARD_DETAILS
from rollscope.tracing import wandb_run
from rollscope.tracing._spool import destination_dir, spool_root
from rollscope.tracing.backends.base import Delivery
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.records import SpanLike, in_start_order, kind_of, reward_details, training_summary
from rollscope.tracing.spans import CODE_ATTRIBUTES, CODE_FILE, CODE_FUNCTION, CODE_LINE, Span, Trajectory
from rollscope.trajectory import tokens
from rollscope.trajectory.chat import openai_messages, openai_reply
from rollscope.trajectory.records import TRAJECTORY_COLUMNS, TrajectoryRecord
from rollscope.trajectory.summary import COLUMNS as SUMMARY_COLUMNS
from rollscope.trajectory.summary import TrajectorySummary
from rollscope.trajectory.text import recorded_decoder

log = logging.getLogger("rollscope.tracing")
TRAINING_FEEDBACK = "rollscope.training"  # the feedback type of a trajectory's training record
# A call's summary key holding what rollscope reads back (``rollscope.sources.weave``): on a root the
# trajectory's row, on a span's call the span's own fields that the call's shape does not keep.
ROLLSCOPE = "rollscope"
_NAMESPACE = uuid.UUID("6f1d3c2e-5b7a-4e2f-9c1d-7a2b3c4d5e6f")
# Lists shorter than this stay lists: only token ids and log-probs are long enough to matter.
_PACK_FROM = 16


def call_id(trajectory_id: str, span_id: str | None = None) -> str:
    """The Weave call id of a trajectory (or one of its spans): the same on every replay."""
    return str(uuid.uuid5(_NAMESPACE, f"{trajectory_id}/{span_id or ''}"))


def _time(ns: int | None) -> datetime.datetime | None:
    return None if ns is None else datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)


def compact(value: Any, packed: list[list] | None = None, path: tuple = ()) -> Any:
    """A shaped payload with each long list of numbers packed into one space-separated string
    (token ids, log-probs): one string for Weave to store and show instead of hundreds of values.
    ``packed`` collects where (keys and indices from ``value``), so a reader unpacks exactly those."""
    t = type(value)
    if t is dict:
        return {k: compact(v, packed, (*path, k)) if type(v) in _CONTAINERS else v for k, v in value.items()}
    if t is list:
        if len(value) >= _PACK_FROM and set(map(type, value)) <= _NUMBERS:  # (checked in C)
            if packed is not None:
                packed.append(list(path))
            return " ".join(map(str, value))
        return [compact(v, packed, (*path, i)) if type(v) in _CONTAINERS else v for i, v in enumerate(value)]
    return value


def unpack(value: Any, packed: list[list]) -> Any:
    """``compact`` undone at the places it packed: each string back to its list of ints and floats
    (``str`` of an int has no '.', 'e', 'n' or 'i'; of a float it does: types come back as they were)."""
    for path in sorted(packed, key=len, reverse=True):
        if not path:
            return _numbers(value)
        holder = _holder(value, path)
        holder[path[-1]] = _numbers(holder[path[-1]])
    return value


def _holder(value: Any, path: list) -> Any:
    """What holds the value at ``path`` (not empty) in ``value``."""
    for key in path[:-1]:
        value = value[key]
    return value


def _numbers(text: str) -> list[int | float]:
    return [int(x) if x.lstrip("-").isdigit() else float(x) for x in text.split(" ")]


_CONTAINERS = (dict, list)
_NUMBERS = {int, float}


class WeaveBackend(TrajectoryBackend):
    name = "weave"
    requires = ("weave", "wandb")
    extra = "weave"
    options = frozenset({"weave_project", "weave_client"})
    # off the traced process, unless given a client object (tests): the pipeline keeps it here then
    delivery = Delivery(whole_trajectories=True, out_of_process=True)

    def __init__(
        self,
        *,
        project: str | None = None,
        experiment: str | None = None,
        weave_project: str | None = None,
        weave_client: Any = None,
    ) -> None:
        super().__init__(project=project, experiment=experiment)
        self._client = weave_client
        self._weave_project = weave_project or project or "rollscope"
        self._ops: dict[str, str] = {}
        self._pending: list[dict[str, Any]] = []  # complete calls, sent at the next flush
        self.rejected = 0  # calls the server refused (each alone: ``send_calls``), kept as dead letters
        self._said_rejected = False

    @property
    def client(self) -> Any:
        if self._client is None:
            import weave

            self._client = weave.init(self._weave_project)
        return self._client

    def write(self, trajectory: Trajectory, spans: list[Span]) -> None:
        self._pending += complete_calls(
            self.client, trajectory_view(trajectory, self.experiment, spans), spans, self._ops
        )

    def on_training(self, trajectory_id: str, record: dict[str, Any]) -> None:
        write_training(self.client, trajectory_id, record)

    def flush(self) -> None:
        """Send the calls written since the last flush, in one batch: a call the server refuses
        costs that call only (``send_calls``). A failure that may pass (the server down, a 5xx)
        raises, and the spool hands the same events over again."""
        calls, self._pending = self._pending, []
        if calls:
            refused = send_calls(self.client.server, calls)
            if refused:
                self._reject(refused)
        if self._client is not None:
            self._client.flush()

    def _reject(self, refused: list[tuple[dict[str, Any], str]]) -> None:
        self.rejected += len(refused)
        keep_dead_letters(self.destination(), refused)
        if not self._said_rejected:
            self._said_rejected = True
            call, reason = refused[0]
            log.warning(
                "trace backend 'weave': the server refused call %r of trajectory %s (%s); the other calls "
                "of its batch were sent; refused calls are counted (stats: rejected) and kept in %s",
                call.get("display_name"),
                call.get("trace_id"),
                reason,
                dead_letters_path(self.destination()),
            )

    def counts(self) -> dict[str, int]:
        return {**super().counts(), "rejected": self.rejected}

    def resend_refused(self) -> tuple[int, int, Path]:
        """Send the calls this destination refused again (the server or the data mended since):
        those it takes leave the dead letters, those it refuses again stay, with the new reason.
        Returns (sent, still refused, the dead letters' path)."""
        path = dead_letters_path(self.destination())
        try:
            letters = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except FileNotFoundError:
            return 0, 0, path
        refused = send_calls(self.client.server, [letter["call"] for letter in letters])
        kept = path.with_suffix(".resending")
        kept.write_text("".join(_dead_letter(call, reason) for call, reason in refused))
        kept.replace(path)  # (one rename: a crash leaves the old letters or the new, never half)
        return len(letters) - len(refused), len(refused), path

    def destination(self) -> str:
        return f"weave {os.environ.get('WF_TRACE_SERVER_URL', '-')} {self._weave_project}"


def write_training(client: Any, trajectory_id: str, record: dict[str, Any]) -> None:
    """A training record, late, on the trajectory's root call: a Weave call is immutable once
    ended, so it goes as feedback on the call (Weave's own way to add to a call afterwards, shown
    beside it and filterable in the calls table), of type ``rollscope.training``, the scalars only."""
    project_id = client.project_id
    client.server.feedback_create(
        {
            "project_id": project_id,
            "weave_ref": f"weave:///{project_id}/call/{call_id(trajectory_id)}",
            "feedback_type": TRAINING_FEEDBACK,
            "payload": training_summary(record),
        }
    )


def trajectory_view(t: Any, experiment: str | None, spans: list[SpanLike] = ()) -> dict[str, Any]:
    """What a Weave root call needs of a trajectory (a live Trajectory and its spans, or a stored
    record), with the row the local store keeps of it (``row``: what a reader lists without spans)."""
    return {
        "id": t.id,
        "name": t.agent_name or "rollout_trace",
        "start_ns": t.start_ns,
        "end_ns": t.end_ns,
        "status": t.status,
        "reward": t.reward,
        "reward_details": reward_details(t),
        "error": getattr(t, "error_message", None),
        "row": stored_row(t, spans),
        "wandb_run": (getattr(t, "attributes", None) or {}).get(wandb_run.ATTRIBUTE),
        "attributes": {
            "step": t.step,
            "sample_index": t.sample_index,
            "rollout_n": t.rollout_n,
            "validate": bool(t.validate),
            "experiment_name": t.experiment or experiment,
            "agent_name": t.agent_name,
        },
    }


def stored_row(t: Any, spans: list[SpanLike]) -> dict[str, Any]:
    """The trajectory's row as the local store writes it (``TRAJECTORY_COLUMNS`` but its id): a
    stored record's own columns, or a live trajectory's with its spans summed as the local backend
    sums them (``TrajectorySummary``, in the order they ended)."""
    if isinstance(t, TrajectoryRecord):
        row = {c: getattr(t, c) for c in TRAJECTORY_COLUMNS[1:]}
        row["validate"] = bool(t.validate)
        return row
    summary = TrajectorySummary()
    for span in spans:
        summary.add(span)
    details = reward_details(t)
    attributes = {**(t.attributes or {}), **summary.attributes()}
    if t.reward is not None:  # (as the store's reward update writes them: always, empty when none came)
        attributes[REWARD_DETAILS] = details or {}
    return {
        "project": t.project,
        "experiment": t.experiment,
        "step": t.step,
        "sample_index": t.sample_index,
        "rollout_n": t.rollout_n,
        "validate": bool(t.validate),
        "agent_name": t.agent_name,
        "status": t.status,
        "reward": t.reward,
        "start_ns": t.start_ns,
        "end_ns": t.end_ns,
        "error_type": t.error_type,
        "error_message": t.error_message,
        "attributes": attributes,
        "replay_of": (t.attributes or {}).get(REPLAY_OF),
        **dict(zip(SUMMARY_COLUMNS, summary.columns(), strict=True)),
    }


def _op_name(client: Any, name: str, ops: dict[str, str], attributes: dict[str, Any] | None = None) -> str:
    """The op's ref, published once per name (Weave's op filter lists it, its page shows its code):
    the traced function's own source where the span says where it is defined, else a stub."""
    uri = ops.get(name)
    if uri is None:
        import weave

        try:
            uri = weave.publish(weave.op(_function_at(attributes or {}), name=name), name=name).uri()
        except Exception:  # a server without object storage still takes the call by name
            uri = name
        ops[name] = uri
    return uri


def _function_at(attributes: dict[str, Any]) -> Any:
    """A function whose source, as ``inspect`` reads it (and Weave with it), is the traced
    function's: a stub's code object pointed at the file and line the span names. Nothing of the
    user's code is imported or run here (the file is read where the op is published). Only where
    that line of a ``.py`` file defines that function: a span's attributes may come from a spool
    another process left, and a path and line must not make any other file's text the op's source."""

    def stub(*args: Any, **kwargs: Any) -> None:
        """Stands for an op recorded by rollscope (its calls are written, never made)."""

    path, line, qualname = (attributes.get(k) for k in (CODE_FILE, CODE_LINE, CODE_FUNCTION))
    if isinstance(path, str) and isinstance(line, int) and isinstance(qualname, str) and _defines(path, line, qualname):
        short = qualname.rsplit(".", 1)[-1]
        stub.__code__ = stub.__code__.replace(co_filename=path, co_firstlineno=line, co_name=short)
        stub.__name__, stub.__qualname__ = short, qualname
    return stub


def _defines(path: str, line: int, qualname: str) -> bool:
    """Whether line ``line`` of the Python file ``path`` defines the function ``qualname``."""
    if not path.endswith(".py") or not os.path.isfile(path) or line < 1:
        return False
    import linecache
    import re

    short = qualname.rsplit(".", 1)[-1]
    text = linecache.getline(path, line)
    return re.match(rf"\s*(?:@.*|(?:async\s+)?def\s+{re.escape(short)}\s*\()", text) is not None


def _usage(span: Any) -> dict[str, Any] | None:
    attrs = span.attributes or {}
    prompt, completion = attrs.get(INPUT_TOKENS), attrs.get(OUTPUT_TOKENS)
    if prompt is None and completion is None:
        return None
    prompt, completion = prompt or 0, completion or 0
    return {
        attrs.get(REQUEST_MODEL) or "model": {
            "requests": 1,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    }


def _add_usage(total: dict[str, Any], usage: dict[str, Any]) -> None:
    for model, counts in usage.items():
        into = total.setdefault(model, dict.fromkeys(counts, 0))
        for key, n in counts.items():
            into[key] = into.get(key, 0) + n


def _exception(kind: str | None, message: str | None) -> str:
    return json.dumps({"type": kind or "Error", "message": message or ""})


def complete_calls(
    client: Any,
    t: dict[str, Any],
    spans: list[SpanLike],
    ops: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The root call and one call per span (parents before children), each a complete call record
    (start and end together, Weave's ``calls/complete``) with the recorded times. ``spans`` may be
    live Spans or stored SpanRecords."""
    ops = {} if ops is None else ops
    project_id = client.project_id
    calls: list[dict[str, Any]] = []
    attributes = {k: v for k, v in t["attributes"].items() if v is not None}
    root_id = call_id(t["id"])
    ids = {t["id"]: root_id}
    total_usage: dict[str, Any] = {}
    root_start = _time(t["start_ns"])
    run = _run_link(project_id, t)
    root = {
        "project_id": project_id,
        "id": root_id,
        "trace_id": root_id,
        "parent_id": None,
        "op_name": _op_name(client, t["name"], ops),
        "display_name": t["name"],
        "started_at": root_start,
        "attributes": attributes,
        "inputs": {"trajectory_id": t["id"], **attributes},
        **run,
    }
    calls.append(root)

    def start(s: SpanLike) -> None:
        kind = kind_of(s)
        ids[s.id] = cid = call_id(t["id"], s.id)
        started = _time(s.start_ns)
        packed_in: list[list] = []
        packed_out: list[list] = []
        wrapped = not isinstance(s.inputs, dict)
        inputs = {"inputs": compact(s.inputs, packed_in)} if wrapped else compact(s.inputs, packed_in)
        shown = _plain_attributes(s.attributes)
        span_attributes = {**attributes, "kind": kind, **shown}
        summary: dict[str, Any] = {
            ROLLSCOPE: {
                "span": s.id,
                "parent": s.parent_id,
                "kind": kind,
                "status": s.status,
                "wrapped": wrapped,
                "start_ns": s.start_ns,
                "end_ns": s.end_ns,
                "error_type": s.error_type,
                "error_message": s.error_message,
                "own": list(shown),
                "hidden": {k: v for k, v in (s.attributes or {}).items() if k not in shown and k != REPLAY},
                "packed": {"inputs": packed_in, "output": packed_out},
            }
        }
        if REPLAY in (s.attributes or {}):  # what replay needs is data, not a column to filter by
            summary[REPLAY] = s.attributes[REPLAY]
        usage = _usage(s) if kind == "llm" else None
        if usage:
            summary["usage"] = usage
            _add_usage(total_usage, usage)
        error = s.status == "error"
        output = compact(s.outputs, packed_out)
        if kind == "llm":
            inputs, output, added = as_chat(s, inputs, output, decoder)
            if added is not None:
                summary[ROLLSCOPE]["chat"] = added
        cut = _within_limit(inputs, packed_in, output, packed_out, _size(span_attributes, summary))
        if cut:
            span_attributes[CUT] = summary[ROLLSCOPE]["cut"] = cut
        calls.append(
            {
                "project_id": project_id,
                "id": cid,
                "trace_id": root_id,
                "parent_id": ids.get(s.parent_id, root_id),
                "op_name": _op_name(client, s.name, ops, s.attributes if type(s) is Span else None),
                "display_name": s.name,
                "started_at": started,
                "attributes": span_attributes,
                "inputs": inputs,
                "ended_at": _time(s.end_ns or s.start_ns),
                "output": output,
                "summary": summary,
                "exception": _exception(s.error_type, s.error_message) if error else None,
                **run,
            }
        )

    decoder = _Decoder(spans)
    for s in in_start_order(spans):
        start(s)
    error = t["status"] == "error"
    output = {"status": t["status"], "reward": t["reward"]}
    if t.get("reward_details"):
        output["reward_details"] = t["reward_details"]
    root.update(
        {
            "ended_at": _time(t["end_ns"] or t["start_ns"]),
            "output": output,
            "summary": {ROLLSCOPE: {"row": t["row"]}, **({"usage": total_usage} if total_usage else {})},
            "exception": _exception("TrajectoryError", t["error"]) if error else None,
        }
    )
    return calls


def _run_link(project_id: str, t: dict[str, Any]) -> dict[str, Any]:
    """Weave's own fields that tie a call to its W&B run and step (the run's page links its traces,
    the Traces table filters by run): the trajectory's run (``tracing.wandb_run``), in the call's
    project, at the trajectory's step, verl's global step, the step the trainer logs its metrics at."""
    run = wb_run_id(project_id, t.get("wandb_run"))
    if run is None:
        return {}
    step = t["attributes"].get("step")
    return {"wb_run_id": run, "wb_run_step": step if type(step) is int and step >= 0 else None}


def wb_run_id(project_id: str, run: Any) -> str | None:
    """A W&B run (its path, or its id alone) as the calls of ``project_id`` carry it in ``wb_run_id``
    (and as the server's ``wb_run_ids`` filter takes it): ``entity/project/run_id``, the calls'
    project's for an id alone (``tracing.wandb_run.link``)."""
    return wandb_run.link(project_id, run)


class _Decoder:
    """Token ids as text with the tokenizer a trajectory's loop recorded (``store.text``), loaded
    at the first turn that has ids and no text (token2text off)."""

    def __init__(self, spans: list[SpanLike]) -> None:
        self.spans, self.loaded, self.tokenizer = spans, False, None

    def __call__(self, ids: Any) -> str | None:
        if not (type(ids) is list and ids and all(type(i) is int for i in ids)):
            return None
        if not self.loaded:
            self.loaded = True
            self.tokenizer = recorded_decoder(self.spans)
        if self.tokenizer is None:
            return None
        try:
            return tokens.decode(self.tokenizer, ids)
        except Exception:  # ids this tokenizer cannot decode: no conversation to show
            return None


def as_chat(s: SpanLike, inputs: Any, output: Any, decode: Any) -> tuple[Any, Any, dict[str, Any] | None]:
    """An llm call in the shape Weave's UI draws as a conversation (its Chat tab, chat bubbles in
    compare): OpenAI's ``messages`` in its inputs (``store.chat``), ``choices`` and ``usage`` in its
    output, beside what the span holds. Returns the call's inputs and output, and what was added
    (a reader takes it away again: ``sources.weave``); nothing where the turn has no text (no
    tokenizer here to decode its ids) or its inputs have messages of their own."""
    if not isinstance(inputs, dict) or "messages" in inputs:
        return inputs, output, None
    prompt = s.inputs.get("prompt_text") if isinstance(s.inputs, dict) else None
    if not isinstance(prompt, str):
        prompt = decode(s.inputs.get("prompt_ids") if isinstance(s.inputs, dict) else None)
    if prompt is None:
        return inputs, output, None
    outputs = s.outputs if isinstance(s.outputs, dict) else {}
    reply = outputs.get("response_text")
    if not isinstance(reply, str):
        reply = decode(outputs.get("token_ids")) or ""
    message = openai_reply(reply)
    stop = outputs.get("stop_reason")
    finish = (
        "error"
        if s.status == "error"
        else "tool_calls"
        if "tool_calls" in message
        else "length"
        if stop == "length"
        else "stop"
    )
    attrs = s.attributes or {}
    prompt_tokens, completion_tokens = (attrs.get(INPUT_TOKENS) or 0, attrs.get(OUTPUT_TOKENS) or 0)
    chat = {
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    inputs = {"messages": openai_messages(prompt) or [{"role": "user", "content": prompt}], **inputs}
    if output is None:  # (a failed turn: Weave draws a chat only with an output)
        return inputs, chat, {"inputs": ["messages"], "output": None}
    if isinstance(output, dict):
        added = {k: v for k, v in chat.items() if k not in output}
        return inputs, {**added, **output}, {"inputs": ["messages"], "output": list(added)}
    return inputs, output, {"inputs": ["messages"], "output": []}


# Weave's trace server refuses a call past ~3.5 MiB (and the batch it came in): a call's packed
# numbers past this share of it are cut, what was left out said on the call (``CUT``).
CALL_LIMIT_BYTES = 3 << 20
CUT = "rollscope.cut"


def _within_limit(
    inputs: Any, packed_in: list[list], output: Any, packed_out: list[list], rest: int = 0
) -> dict[str, str]:
    """Cut a call whose inputs and output (every field: the chat ``messages`` ``as_chat`` added
    too), with ``rest`` bytes of attributes and summary, pass ``CALL_LIMIT_BYTES``: its longest
    packed number strings first (a 128k-token prompt's ids), then its longest texts (the prompt's
    text, and its messages), each keeping its end (the end of a context is the turn's own) until
    the call fits. Returns what was cut, by field, in words."""
    excess = _size(inputs, output) + rest - CALL_LIMIT_BYTES
    if excess <= 0:
        return {}
    cut: dict[str, str] = {}
    numbers = [("inputs", inputs, p) for p in packed_in if p] + [("output", output, p) for p in packed_out if p]
    for side, value, path in sorted(numbers, key=lambda f: -len(_holder(f[1], f[2])[f[2][-1]])):
        if excess <= 0:
            break
        holder = _holder(value, path)
        text = holder[path[-1]]
        kept = text[len(text) - max(0, len(text) - excess) :].split(" ", 1)[-1] if len(text) > excess else ""
        cut[".".join([side, *map(str, path)])] = (
            f"{kept.count(' ') + 1 if kept else 0:,} of {text.count(' ') + 1:,} values kept, the last "
            "ones: the call is past what Weave's server takes"
        )
        holder[path[-1]] = kept
        excess -= len(text.encode()) - len(kept.encode())
    packed = {(side, tuple(path)) for side, _, path in numbers}
    texts = _long_texts(inputs, "inputs") + _long_texts(output, "output")
    for side, value, path in sorted(texts, key=lambda f: -len(_holder(f[1], f[2])[f[2][-1]])):
        if excess <= 0:
            break
        if (side, tuple(path)) in packed:
            continue
        holder = _holder(value, path)
        text = holder[path[-1]]
        size = len(text.encode())
        kept = text[len(text) - max(0, len(text) - excess) :] if size > excess else ""
        while kept and len(kept.encode()) > size - excess:  # (characters of several bytes)
            kept = kept[len(kept) // 64 + 1 :]
        cut[".".join([side, *map(str, path)])] = (
            f"{len(kept):,} of {len(text):,} characters kept, the last ones: the call is past what Weave's server takes"
        )
        holder[path[-1]] = kept
        excess -= size - len(kept.encode())
    return cut


_LONG_TEXT = 1024  # (shorter texts are never what makes a call too big)


def _long_texts(value: Any, side: str) -> list[tuple[str, Any, list]]:
    """(side, ``value``, path) of every string of ``_LONG_TEXT`` characters or more in ``value``."""
    root_found: list[tuple[str, Any, list]] = []
    stack: list[tuple[Any, list]] = [(value, [])]
    while stack:
        node, at = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, item in items:
            if isinstance(item, str) and len(item) >= _LONG_TEXT:
                root_found.append((side, value, [*at, key]))
            elif isinstance(item, dict | list):
                stack.append((item, [*at, key]))
    return root_found


def _size(*parts: Any) -> int:
    """What ``parts`` take as the JSON a call is sent as, in bytes."""
    try:
        return sum(len(orjson.dumps(p, default=str, option=orjson.OPT_NON_STR_KEYS)) for p in parts)
    except TypeError:  # (an int past 64 bits: the standard library writes it)
        return sum(len(json.dumps(p, default=str, ensure_ascii=False).encode()) for p in parts)


def send_calls(server: Any, calls: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """``calls`` in one ``calls/complete`` request; a batch the server refuses (a 4xx: one call in
    it it will not take refuses them all) is halved and each half sent, until each refused call
    is alone. Returns the refused calls with the server's reason; other errors raise."""
    if not calls:
        return []
    try:
        server.calls_complete({"batch": calls})
        return []
    except Exception as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None) or getattr(exc, "status_code", None)
        if not isinstance(status, int) or not 400 <= status < 500 or status in (408, 429):
            raise
        if len(calls) == 1:
            return [(calls[0], f"{status}: {str(exc)[:300]}")]
        half = len(calls) // 2
        return send_calls(server, calls[:half]) + send_calls(server, calls[half:])


def dead_letters_path(destination: str) -> Path:
    """Where the calls a destination refused are kept (JSON lines: the call and the reason), beside
    that destination's spool."""
    return destination_dir(spool_root(), destination) / "refused.jsonl"


def _dead_letter(call: dict[str, Any], reason: str) -> str:
    """One line of the dead letters: the refused call and the server's reason."""
    return json.dumps({"reason": reason, "call": call}, default=str) + "\n"


def keep_dead_letters(destination: str, refused: list[tuple[dict[str, Any], str]]) -> None:
    path = dead_letters_path(destination)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.writelines(_dead_letter(call, reason) for call, reason in refused)
    except OSError as exc:
        log.warning("trace backend 'weave': refused calls not kept (%s: %s)", type(exc).__name__, exc)


_NOT_COLUMNS = {"kind", REPLAY, *CODE_ATTRIBUTES}  # replay's data (the summary), the op's code (the op)


def _plain_attributes(attributes: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (attributes or {}).items() if v is not None and k not in _NOT_COLUMNS}
