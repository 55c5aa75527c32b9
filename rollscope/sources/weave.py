"""``--source weave:ENTITY/PROJECT``: trajectories read from a Weave project, where ``trace.backend=weave``
put them (``rollscope.tracing.backends.weave``).

Each trajectory's root call carries the row the local store keeps of it (its summary's
``rollscope.row``: reward, status, counts, truncation, tokens, log-prob sums, drift, tool errors by
kind), so listing a step or computing insights reads root calls only. The server does the
filtering: the filters a command was given (experiment, step or a step range, sample, rollout,
validate, agent) go into the calls query with ``trace_roots_only``, and only those roots come back,
a page at a time, each page's training feedback with it (one feedback query). They are kept in a
throw-away store of the local store's shape (``store.schema``), so every command answers from
them exactly as it answers from the local store. Spans are fetched per trajectory when one is
read whole (``show``, ``diff``, replay, export, rescore); rescorings are stored in Weave as
objects (``rollscope-rescoring.NAME``) beside the run.

Credentials are the weave client's: ``WANDB_API_KEY`` or ``wandb login``'s netrc entry, and the
trace server of ``WANDB_BASE_URL`` / ``WF_TRACE_SERVER_URL``.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import netrc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rollscope._extras import require
from rollscope.semconv import REPLAY, UNREADABLE
from rollscope.sources import SourceError
from rollscope.store import rescorings
from rollscope.store.reader import TraceStore
from rollscope.store.schema import TRAJECTORY_COLUMNS, encode_json, encode_payload, span_row, training_row
from rollscope.store.writer import ShardWriter
from rollscope.tracing import wandb_run
from rollscope.tracing.backends.records import TRAINING_SCALARS
from rollscope.tracing.backends.weave import ROLLSCOPE, TRAINING_FEEDBACK, call_id, unpack, wb_run_id
from rollscope.trajectory.records import SpanRecord
from rollscope.trajectory.turns import compact_prompts

log = logging.getLogger("rollscope.sources")
PAGE = 2000  # root calls a request
TRACES_A_REQUEST = 200  # trajectories whose spans one request fetches
RESCORING = "rollscope-rescoring."  # a rescoring's Weave object: this prefix and its name
# filter name -> the root call's attribute the server filters on (``trajectory_view``)
_PUSHED = {
    "experiment": "experiment_name",
    "step": "step",
    "sample_index": "sample_index",
    "rollout_n": "rollout_n",
    "validate": "validate",
    "agent": "agent_name",
}
_ROOT_COLUMNS = ["id", "inputs", "output", "summary", "attributes", "started_at", "ended_at", "exception"]


class WeaveSource(TraceStore):
    """The trajectories of one Weave project (``ENTITY/PROJECT``) matching ``filters`` (``traces ls``'
    names, ``first_step``/``last_step``, or ``ids``), read as a ``TraceStore`` reads its directory."""

    def __init__(
        self,
        project_id: str,
        *,
        server: Any = None,
        progress: bool | None = None,
        first_step: int | None = None,
        last_step: int | None = None,
        **filters: Any,
    ) -> None:
        entity, _, name = project_id.partition("/")
        if not entity or not name or "/" in name:
            raise ValueError(f"--source weave:{project_id}: name the project as weave:ENTITY/PROJECT")
        if filters.get("wandb_run") not in (None, ""):
            wandb_run.parse(filters["wandb_run"])  # (a RunPathError names it, before any request)
        self.project_id = project_id
        self.server = server if server is not None else _server(project_id)
        self._progress = sys.stderr.isatty() if progress is None else progress
        self._cache = Path(tempfile.mkdtemp(prefix="rollscope-weave-"))
        self._writer = ShardWriter(self._cache)
        self._fetched: set[str] = set()  # trajectories whose spans are in the cache
        self.skipped: dict[str, int] = {}  # what the server gave that could not be read, by kind
        ids = filters.pop("ids", None)
        roots = {"trace_roots_only": True, **({"call_ids": [call_id(i) for i in ids]} if ids else {})}
        run = wb_run_id(project_id, filters.get("wandb_run"))
        if run is not None:  # the calls Weave links to that run, as the backend links them
            roots["wb_run_ids"] = [run]
        try:
            self._read_roots(roots, _query(filters, first_step, last_step))
        except BaseException:
            self._discard()
            raise
        super().__init__(self._cache)

    @property
    def where(self) -> str:
        return f"weave:{self.project_id}"

    # ---- roots ----
    def _read_roots(self, roots: dict[str, Any], query: dict[str, Any] | None) -> None:
        base = {"project_id": self.project_id, "filter": roots}
        if query is not None:
            base["query"] = query
        total = getattr(self._call("calls_query_stats", base), "count", None)
        if type(total) is not int or total < 0:  # (said; the pages are read until one comes back empty)
            self._bad("a call count that is not a count", 1)
            total = None
        if total == 0 and query is None and "call_ids" not in roots:
            raise SourceError(
                f"{self.where}: no trajectories there (no such project at {_url(self.server)}, "
                "or nothing traced into it yet)"
            )
        read = 0
        started = time.monotonic()
        before: set[str] = set()  # the previous page's ids: a server that ignores the offset repeats them
        while total is None or read < total:
            calls = list(
                self._stream(
                    {
                        **base,
                        "columns": _ROOT_COLUMNS,
                        "sort_by": [{"field": "started_at", "direction": "asc"}, {"field": "id", "direction": "asc"}],
                        "limit": PAGE,
                        "offset": read,
                    }
                )
            )
            if not calls:
                break
            page = {str(getattr(call, "id", "")) for call in calls}
            if page <= before:
                self._bad(
                    f"a page of calls that repeats the one before it (offset {read:,} ignored): reading stopped", 1
                )
                break
            before = page
            records = self._training([call.id for call in calls])
            rows, training = [], []
            for call in calls:
                row = root_row(call)
                rows.append(row)
                training += [training_row(row[0], record, row[1], row[2]) for record in records.get(call.id, [])]
            self._writer.write(trajectories=rows, training=training)
            read += len(calls)
            self._say(
                f"{self.where}: {read:,} of {'?' if total is None else f'{total:,}'} trajectories read",
                started,
                done=total is not None and read >= total,
            )

    def _training(self, root_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """Root call id -> the training records on it (its ``rollscope.training`` feedback), oldest
        first: one feedback query for a page of roots."""
        refs = [{"$literal": f"weave:///{self.project_id}/call/{i}"} for i in root_ids]
        query = {
            "$expr": {
                "$and": [
                    {"$eq": [{"$getField": "feedback_type"}, {"$literal": TRAINING_FEEDBACK}]},
                    {"$in": [{"$getField": "weave_ref"}, refs]},
                ]
            }
        }
        found = self._call(
            "feedback_query",
            {"project_id": self.project_id, "query": query, "sort_by": [{"field": "created_at", "direction": "asc"}]},
        ).result
        out: dict[str, list[dict[str, Any]]] = {}
        bad = 0
        for f in found if isinstance(found, list) else ():
            ref = f.get("weave_ref") if isinstance(f, dict) else None
            payload = f.get("payload") if isinstance(f, dict) else None
            if not isinstance(ref, str) or "/" not in ref or not isinstance(payload, dict):
                bad += 1  # (a record with no ref to a call, or a payload that is not a mapping: itself only)
                continue
            record = {k: v for k, v in payload.items() if k in TRAINING_SCALARS}
            out.setdefault(ref.rsplit("/", 1)[1], []).append(record)
        if bad:
            self._bad("training feedback records without a call or a payload (skipped)", bad)
        return out

    def _bad(self, what: str, n: int) -> None:
        """A bad record costs itself: counted (``skipped``) and said once per kind."""
        self.skipped[what] = self.skipped.get(what, 0) + n
        log.warning("%s: %d %s", self.where, n, what)

    def _say(self, text: str, started: float, done: bool) -> None:
        """Progress on stderr: a line rewritten on a terminal, the last one only elsewhere."""
        if self._progress:
            print(f"\r{text}", end="\n" if done else "", file=sys.stderr, flush=True)
        elif done and time.monotonic() - started > 5:
            print(text, file=sys.stderr)

    # ---- spans, fetched when a trajectory is read whole ----
    def load_spans(self, trajectory_ids: list[str]) -> None:
        """Fetch these trajectories' spans from Weave into the cache (those not fetched yet), a few
        hundred trajectories a request."""
        wanted = [t for t in dict.fromkeys(trajectory_ids) if t not in self._fetched]
        for i in range(0, len(wanted), TRACES_A_REQUEST):
            chunk = wanted[i : i + TRACES_A_REQUEST]
            by_trace = {call_id(t): t for t in chunk}
            by_trajectory: dict[str, list[SpanRecord]] = {}
            for call in self._stream({"project_id": self.project_id, "filter": {"trace_ids": list(by_trace)}}):
                if call.parent_id is not None:
                    by_trajectory.setdefault(by_trace[call.trace_id], []).append(
                        span_record(call, by_trace[call.trace_id])
                    )
            rows = []
            for spans in by_trajectory.values():
                compact_prompts(spans)  # (Weave holds each call whole: kept as the local store keeps turns)
                for span in spans:
                    payload = {"inputs": span.inputs, "outputs": span.outputs, "attributes": span.attributes}
                    rows.append(span_row(span, encode_payload(payload)))
            self._writer.write(spans=rows)
            self._fetched.update(chunk)

    def spans(self, trajectory_id: str, shard: Path | None = None) -> list[SpanRecord]:
        self.load_spans([trajectory_id])
        return super().spans(trajectory_id, shard)

    # ---- rescorings: Weave objects beside the run ----
    def rescoring_names(self) -> list[str]:
        found = self._call(
            "objs_query", {"project_id": self.project_id, "filter": {"latest_only": True, "is_op": False}}
        )
        return sorted(o.object_id[len(RESCORING) :] for o in found.objs if o.object_id.startswith(RESCORING))

    def rescoring(self, name: str, ids: Iterable[str] | None = None) -> rescorings.Rescoring:
        object_id = RESCORING + rescorings.check_name(name)
        try:
            value = self._call(
                "obj_read", {"project_id": self.project_id, "object_id": object_id, "digest": "latest"}
            ).obj.val
        except SourceError as exc:
            if "404" not in str(exc) and "not found" not in str(exc).lower():
                raise
            there = ", ".join(self.rescoring_names()) or "none"
            raise FileNotFoundError(
                f"no rescoring {name!r} in {self.where} (stored: {there}; make one with rescore)"
            ) from None
        wanted = None if ids is None else set(ids)
        rewards = {
            r[0]: rescorings.RescoredReward(*r[:5], r[5] or {})
            for r in value["rewards"]
            if wanted is None or r[0] in wanted
        }
        return rescorings.Rescoring(name, value["meta"], rewards)

    def save_rescoring(self, name: str, meta: dict[str, Any], rewards: list[rescorings.RescoredReward]) -> str:
        """As a Weave object (a new version of ``rollscope-rescoring.NAME``): JSON, written whole."""
        value = {
            "meta": {**meta, "name": name, "created_ns": time.time_ns()},
            "rewards": [[r.trajectory_id, r.step, r.sample_index, r.original, r.reward, r.details] for r in rewards],
        }
        value = json.loads(encode_json(value))  # (plain JSON: what the server stores is what comes back)
        object_id = RESCORING + rescorings.check_name(name)
        self._call("obj_create", {"obj": {"project_id": self.project_id, "object_id": object_id, "val": value}})
        return f"{self.where} object {object_id}"

    # ---- the server ----
    def _call(self, method: str, request: dict[str, Any]) -> Any:
        """One request, any failure one line naming the source and the server (``SourceError``)."""
        try:
            return getattr(self.server, method)(request)
        except Exception as exc:
            raise SourceError(_failure(self.where, self.server, exc)) from exc

    def _stream(self, request: dict[str, Any]) -> Iterator[Any]:
        try:
            yield from self.server.calls_query_stream(request)
        except Exception as exc:
            raise SourceError(_failure(self.where, self.server, exc)) from exc

    def close(self) -> None:
        super().close()
        self._discard()

    def _discard(self) -> None:
        self._writer.close()
        shutil.rmtree(self._cache, ignore_errors=True)


def _query(filters: dict[str, Any], first_step: int | None, last_step: int | None) -> dict[str, Any] | None:
    """The filters the server applies, as the Weave UI's Traces table writes them."""
    terms: list[dict[str, Any]] = []
    for name, attribute in _PUSHED.items():
        value = filters.get(name)
        if value is not None:
            terms.append({"$eq": [{"$getField": f"attributes.{attribute}"}, {"$literal": value}]})
    for bound, op in ((first_step, "$gte"), (last_step, "$lte")):
        if bound is not None:
            field = {"$convert": {"input": {"$getField": "attributes.step"}, "to": "double"}}
            terms.append(
                {op: [field, {"$literal": float(bound)}]}
                if op == "$gte"
                else {"$not": [{"$gt": [field, {"$literal": float(bound)}]}]}
            )
    if not terms:
        return None
    return {"$expr": terms[0] if len(terms) == 1 else {"$and": terms}}


def root_row(call: Any) -> tuple:
    """A trajectories row from a root call: the row its summary carries; a root without one (not
    written by rollscope) gives what its attributes and output hold, its counts zero. A project is
    others' writing: a field of the wrong type is left empty on its own row and named there
    (``rollscope.unreadable``); a call that cannot be read at all is a row saying so."""
    try:
        return _root_row(call)
    except Exception as exc:  # (a shape no check foresaw: that row only)
        found = {
            "id": str(getattr(call, "id", "?")),
            "status": "error",
            "start_ns": 0,
            "attributes": encode_json(
                {UNREADABLE: f"the root call could not be read: {type(exc).__name__}: {str(exc)[:200]}"}
            ).decode(),
        }
        return tuple(found.get(c, _empty(c)) for c in TRAJECTORY_COLUMNS)


def _root_row(call: Any) -> tuple:
    inputs, output, attributes = _mapping(call.inputs), _mapping(call.output), _mapping(call.attributes)
    problems: list[str] = []
    row = dict(_mapping(_mapping(_mapping(call.summary).get(ROLLSCOPE)).get("row")))
    if not row:
        row = {
            "experiment": attributes.get("experiment_name"),
            "step": attributes.get("step"),
            "sample_index": attributes.get("sample_index"),
            "rollout_n": attributes.get("rollout_n"),
            "validate": attributes.get("validate"),
            "agent_name": attributes.get("agent_name"),
            "status": output.get("status") or ("error" if call.exception else "ok"),
            "reward": output.get("reward"),
            "start_ns": _ns(call.started_at, problems, "started_at"),
            "end_ns": _ns(call.ended_at, problems, "ended_at"),
        }
    given = inputs.get("trajectory_id")
    row["id"] = given if isinstance(given, str) and given else str(call.id)
    row["validate"] = int(bool(row.get("validate")))
    extra = row.get("attributes")
    if extra is not None and not isinstance(extra, dict):
        problems.append(f"attributes: a {type(extra).__name__}, not an object")
        extra = None
    for column in TRAJECTORY_COLUMNS:
        value = row.get(column)
        if value is not None and column in _COLUMN_TYPES and not _of_type(value, _COLUMN_TYPES[column]):
            problems.append(f"{column}: {str(value)[:60]!r} is not {_COLUMN_TYPES[column][1]}")
            row[column] = None
    if problems:
        extra = {**(extra or {}), UNREADABLE: "; ".join(problems)}
    row["attributes"] = encode_json(extra).decode() if extra else None
    defaults = {"status": "error" if problems else "ok", "start_ns": 0}
    return tuple(row[c] if row.get(c) is not None else defaults.get(c, _empty(c)) for c in TRAJECTORY_COLUMNS)


def _empty(column: str) -> Any:
    """What a trajectories column holds when the call says nothing (the store's NOT NULL columns: 0)."""
    return 0 if column.startswith(("num_", "logprob_")) or column in ("answer_chars", "turn_limit") else None


# What a trajectories column holds (``store.schema``): (the types it takes, how a message names them)
_INT, _TEXT = ((int,), "an integer"), ((str,), "text")
_COLUMN_TYPES = {
    **dict.fromkeys(
        (
            "step",
            "rollout_n",
            "start_ns",
            "end_ns",
            "num_spans",
            "num_llm_calls",
            "num_tool_calls",
            "num_errors",
            "num_tokens",
            "num_tool_errors",
            "num_truncated",
            "num_repeated_calls",
            "logprob_count",
            "answer_chars",
            "turn_limit",
        ),
        _INT,
    ),
    **dict.fromkeys(
        ("project", "experiment", "agent_name", "status", "error_type", "error_message", "replay_of", "id"), _TEXT
    ),
    "reward": ((int, float), "a finite number"),
    "logprob_sum": ((int, float), "a finite number"),
    "sample_index": ((int, float, str), "a number or text"),
}


def _of_type(value: Any, spec: tuple[tuple[type, ...], str]) -> bool:
    if type(value) is bool or not isinstance(value, spec[0]):
        return False
    return not (isinstance(value, float) and not math.isfinite(value) and spec[1] != "a number or text")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def span_record(call: Any, trajectory_id: str) -> SpanRecord:
    """A span from its call, as the local store keeps it: what the call's shape does not hold
    (its own id and parent, exact times, attributes kept off the filter columns, packed number
    lists) comes from the call's ``rollscope`` summary."""
    try:
        return _span_record(call, trajectory_id)
    except Exception as exc:  # a call others wrote, of a shape no check foresaw: that span only, marked
        return SpanRecord(
            id=str(getattr(call, "id", "?")),
            trajectory_id=trajectory_id,
            parent_id=str(getattr(call, "parent_id", None) or "") or None,
            name=str(getattr(call, "op_name", "?"))[:200],
            kind="",
            start_ns=0,
            end_ns=None,
            status="error",
            error_type=None,
            error_message=None,
            attributes={UNREADABLE: f"the call could not be read: {type(exc).__name__}: {str(exc)[:200]}"},
        )


def _span_record(call: Any, trajectory_id: str) -> SpanRecord:
    summary = _mapping(call.summary)
    own = _mapping(summary.get(ROLLSCOPE))
    packed = _mapping(own.get("packed"))
    inputs, output = _without_chat(call.inputs, call.output, own.get("chat"))
    inputs = unpack(inputs, packed.get("inputs") or [])
    if own.get("wrapped"):
        inputs = _mapping(inputs).get("inputs")
    attributes = {k: _mapping(call.attributes).get(k) for k in own.get("own", [])}
    attributes.update(_mapping(own.get("hidden")))
    if REPLAY in summary:
        attributes[REPLAY] = summary[REPLAY]
    try:
        error = _mapping(json.loads(call.exception)) if call.exception else {}
    except (ValueError, TypeError):
        error = {"message": str(call.exception)[:2000]}  # (not rollscope's JSON: its text)
    return SpanRecord(
        id=own.get("span", call.id),
        trajectory_id=trajectory_id,
        parent_id=own.get("parent"),
        name=call.display_name or call.op_name,
        kind=own.get("kind") or (call.attributes or {}).get("kind", ""),
        start_ns=own.get("start_ns", _ns(call.started_at)),
        end_ns=own.get("end_ns", _ns(call.ended_at)),
        status=own.get("status") or ("error" if call.exception else "ok"),
        error_type=own.get("error_type", error.get("type")),
        error_message=own.get("error_message", error.get("message")),
        inputs=inputs,
        outputs=unpack(output, packed.get("output") or []),
        attributes=attributes,
    )


def _without_chat(inputs: Any, output: Any, added: Any) -> tuple[Any, Any]:
    """A call's inputs and output without what ``as_chat`` added for Weave's UI (the span held
    neither): the inputs' ``messages``, the output's ``choices`` and ``usage``, or the whole output
    of a failed turn."""
    if not isinstance(added, dict):
        return inputs, output
    if isinstance(inputs, dict):
        inputs = {k: v for k, v in inputs.items() if k not in (added.get("inputs") or ())}
    if added.get("output") is None:
        return inputs, None
    if isinstance(output, dict):
        output = {k: v for k, v in output.items() if k not in added["output"]}
    return inputs, output


def _ns(value: Any, problems: list[str] | None = None, field: str = "time") -> int | None:
    """A call's time in nanoseconds; None (named in ``problems``) for one that is not a time."""
    if value is None:
        return None
    try:
        if isinstance(value, str):
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return int(value.timestamp() * 1_000_000) * 1000
    except (ValueError, TypeError, AttributeError, OverflowError, OSError):
        if problems is not None:
            problems.append(f"{field}: {str(value)[:60]!r} is not a time")
        return None


def _server(project: str) -> Any:
    """The weave client's HTTP trace server for ``project``'s host, with the user's W&B key."""
    require("weave", "weave", feature="--source weave:")
    from weave.trace.env import wandb_base_url, weave_trace_server_url
    from weave.trace_server_bindings.remote_http_trace_server import RemoteHTTPTraceServer

    key = os.environ.get("WANDB_API_KEY") or _netrc_key(wandb_base_url())
    if not key:
        raise SourceError(
            f"weave:{project}: no W&B credentials (set WANDB_API_KEY, or run `wandb login`) for {wandb_base_url()}"
        )
    server = RemoteHTTPTraceServer(weave_trace_server_url())
    server.set_auth(("api", key))
    return server


def _netrc_key(base_url: str) -> str | None:
    try:
        found = netrc.netrc(os.environ.get("NETRC")).authenticators(urlsplit(base_url).hostname or "")
    except (OSError, netrc.NetrcParseError):
        return None
    return found[2] if found else None


def _url(server: Any) -> str:
    return getattr(server, "trace_server_url", type(server).__name__)


def _failure(where: str, server: Any, exc: Exception) -> str:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    reason = f"HTTP {status}" if status else type(exc).__name__
    if status in (401, 403):
        reason += " (the W&B key is refused: check WANDB_API_KEY or `wandb login`)"
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    detail = f": {detail}" if detail else ""
    return f"{where}: reading from {_url(server)} failed: {reason}{detail}; nothing was written"
