"""The local store's on-disk layout: one SQLite file per writer process in a directory.

A file per writer means Ray workers and processes never contend for a write lock (the failure
mode of MLflow's shared sqlite file); the reader opens every shard and merges. Spans are stored
clustered by trajectory (one B-tree, no second index): reading a trajectory is one range scan. Filter columns are
real indexed columns; span payloads (inputs, outputs, attributes) are JSON, zstd-compressed when
larger than a few hundred bytes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
import zstandard

from rollscope.semconv import UNREADABLE
from rollscope.trajectory.records import TRAJECTORY_COLUMNS, SpanRecord

SCHEMA_VERSION = 6  # 3: num_tokens, num_tool_errors; 4: the insight columns (num_truncated ... turn_limit), replay_of;
# 5: the training table; 6: its entropy_mean
SHARD_SUFFIX = ".rstrace"
DEFAULT_DIR = "rollscope_traces"
ENV_DIR = "ROLLSCOPE_TRACE_DIR"


SPAN_COLUMNS = (
    "id",
    "trajectory_id",
    "parent_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "status",
    "error_type",
    "error_message",
    "payload",
)

# What training did with a trajectory (``rollscope.trainer.training_record``), written by the
# trainer's process into its own shard: the columns filters and charts need, the whole record
# (per-token log-probs and mask among it) in the payload.
TRAINING_COLUMNS = (
    "trajectory_id",
    "project",
    "experiment",
    "step",
    "uid",
    "advantage",
    "group_size",
    "group_mean",
    "group_std",
    "policy_version",
    "lag",
    "logprob_delta_max",
    "entropy_mean",
    "payload",
)

# The one place the columns' order is written: rows are built by name from here.
_SPAN_FIELDS = attrgetter(*SPAN_COLUMNS[:-1])  # every span column but the payload is the span's attribute


def trajectory_row(values: dict[str, Any]) -> tuple:
    """A trajectories row, in ``TRAJECTORY_COLUMNS``' order, from its values by column name."""
    return tuple([values[c] for c in TRAJECTORY_COLUMNS])


def training_row(trajectory_id: str, record: dict[str, Any], project: str | None, experiment: str | None) -> tuple:
    """A training row from a trajectory's training record (``TRAINING_COLUMNS``' order)."""
    values = {
        **record,
        "trajectory_id": trajectory_id,
        "project": project,
        "experiment": experiment,
        "payload": encode_payload(record),
    }
    return tuple([values.get(c) for c in TRAINING_COLUMNS])


def span_row(span: Any, payload: bytes) -> tuple:
    """A spans row from a span (live or stored: the columns are its attributes) and its payload."""
    return (*_SPAN_FIELDS(span), payload)


# Columns added to trajectories after schema version 2, and what older shards read for them.
ADDED_COLUMNS = {
    "num_tokens": "0",
    "num_tool_errors": "0",
    "num_truncated": "0",
    "num_repeated_calls": "0",
    "logprob_sum": "0",
    "logprob_count": "0",
    "answer_chars": "0",
    "turn_limit": "0",
    "replay_of": "NULL",
}

# Columns added to the training table since schema version 5, and what older shards read for them.
TRAINING_ADDED_COLUMNS = {"entropy_mean": "NULL"}

DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('schema_version', '{SCHEMA_VERSION}');
CREATE TABLE IF NOT EXISTS trajectories (
    id TEXT PRIMARY KEY,
    project TEXT,
    experiment TEXT,
    step INTEGER,
    sample_index,
    rollout_n INTEGER,
    validate INTEGER NOT NULL DEFAULT 0,
    agent_name TEXT,
    status TEXT NOT NULL,
    reward REAL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER,
    num_spans INTEGER NOT NULL DEFAULT 0,
    num_llm_calls INTEGER NOT NULL DEFAULT 0,
    num_tool_calls INTEGER NOT NULL DEFAULT 0,
    num_errors INTEGER NOT NULL DEFAULT 0,
    num_tokens INTEGER NOT NULL DEFAULT 0,
    num_tool_errors INTEGER NOT NULL DEFAULT 0,
    error_type TEXT,
    error_message TEXT,
    attributes TEXT,
    num_truncated INTEGER NOT NULL DEFAULT 0,
    num_repeated_calls INTEGER NOT NULL DEFAULT 0,
    logprob_sum REAL NOT NULL DEFAULT 0,
    logprob_count INTEGER NOT NULL DEFAULT 0,
    answer_chars INTEGER NOT NULL DEFAULT 0,
    turn_limit INTEGER NOT NULL DEFAULT 0,
    replay_of TEXT
);
CREATE INDEX IF NOT EXISTS traj_step ON trajectories (step, sample_index, rollout_n);
CREATE INDEX IF NOT EXISTS traj_replay ON trajectories (replay_of) WHERE replay_of IS NOT NULL;
-- a run's steps and GRPO groups: covering for insights' group query
CREATE INDEX IF NOT EXISTS traj_run ON trajectories (project, experiment, step, sample_index, validate, reward, id);
CREATE INDEX IF NOT EXISTS traj_agent ON trajectories (agent_name);
CREATE INDEX IF NOT EXISTS traj_status ON trajectories (status);
CREATE INDEX IF NOT EXISTS traj_reward ON trajectories (reward);
CREATE INDEX IF NOT EXISTS traj_start ON trajectories (start_ns);
CREATE TABLE IF NOT EXISTS spans (
    id TEXT NOT NULL,
    trajectory_id TEXT NOT NULL,
    parent_id TEXT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER,
    status TEXT NOT NULL,
    error_type TEXT,
    error_message TEXT,
    payload BLOB,
    PRIMARY KEY (trajectory_id, id)
) WITHOUT ROWID;
"""


# Created in a shard when its first training record is written (the trainer's process): the
# rollout workers' shards never hold one.
TRAINING_DDL = """
CREATE TABLE IF NOT EXISTS training (
    trajectory_id TEXT PRIMARY KEY,
    project TEXT,
    experiment TEXT,
    step INTEGER,
    uid TEXT,
    advantage REAL,
    group_size INTEGER,
    group_mean REAL,
    group_std REAL,
    policy_version INTEGER,
    lag INTEGER,
    logprob_delta_max REAL,
    entropy_mean REAL,
    payload BLOB
);
CREATE INDEX IF NOT EXISTS training_step ON training (project, experiment, step, advantage);
CREATE INDEX IF NOT EXISTS training_delta ON training (logprob_delta_max);
"""


def resolve_dir(path: str | os.PathLike | None = None) -> Path:
    """The store directory: the argument, else $ROLLSCOPE_TRACE_DIR, else ./rollscope_traces."""
    return Path(path if path is not None else os.environ.get(ENV_DIR) or DEFAULT_DIR)


# Payloads under this size are stored as plain JSON: compressing them costs more than it saves.
COMPRESS_MIN_BYTES = 256
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_local = threading.local()


def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    """Per-thread (de)compression contexts: reusing one is what makes small payloads cheap."""
    ctx = getattr(_local, "zstd", None)
    if ctx is None:
        ctx = _local.zstd = (zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor())
    return ctx


def encode_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=str)
    except (TypeError, orjson.JSONEncodeError):  # e.g. an int beyond 64 bits: slow but never fails
        return json.dumps(value, ensure_ascii=False, default=str).encode()


def encode_payload(value: dict[str, Any]) -> bytes:
    raw = encode_json(value)
    return _zstd()[0].compress(raw) if len(raw) >= COMPRESS_MIN_BYTES else raw


# What one stored payload may decode to: a shard is other people's writing (a shared filesystem),
# and a zstd frame of a few KB can say it holds gigabytes. Far above what tracing stores (values
# are cut at ``max_payload_chars``); ROLLSCOPE_MAX_PAYLOAD_BYTES sets another bound.
MAX_PAYLOAD_BYTES = int(os.environ.get("ROLLSCOPE_MAX_PAYLOAD_BYTES") or 64 << 20)


class PayloadError(ValueError):
    """A stored payload that cannot be read back: not JSON, not an object, or past the bound."""


def decode_payload(blob: bytes | None) -> dict[str, Any]:
    """Plain JSON, or a zstd frame (told apart by zstd's magic number), decoded within
    ``MAX_PAYLOAD_BYTES``; anything else raises ``PayloadError``."""
    if not blob:
        return {}
    if not isinstance(blob, bytes | bytearray | memoryview):
        raise PayloadError(f"a payload stored as {type(blob).__name__}, not bytes")
    if bytes(blob[:4]) == _ZSTD_MAGIC:
        blob = _decompressed(bytes(blob))
    try:
        value = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"a payload that is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise PayloadError(f"a payload that is a JSON {type(value).__name__}, not an object")
    return value


def check_shard(db: sqlite3.Connection) -> None:
    """Refuse (``sqlite3.DatabaseError``) a file that holds more than rollscope writes: a view,
    a trigger or a virtual table is code SQLite would run for a reader's query (a view over a
    recursive query hangs every reader), and a table of rollscope's without its columns is not one
    of its shards. A shard is other people's writing on a shared filesystem."""
    for kind, name, sql in db.execute("SELECT type, name, sql FROM main.sqlite_master"):
        if kind in ("view", "trigger") or (kind == "table" and str(sql or "").upper().startswith("CREATE VIRTUAL")):
            raise sqlite3.DatabaseError(
                f"not a rollscope shard: it holds a {kind} ({name!r}) that rollscope never writes"
            )
    columns = {row[1] for row in db.execute("PRAGMA main.table_info(trajectories)")}
    missing = [c for c in ("id", "status", "start_ns", "attributes") if columns and c not in columns]
    if missing:
        raise sqlite3.DatabaseError(f"not a rollscope shard: its trajectories table has no {', '.join(missing)}")


def span_record(columns: Sequence[Any], payload: Any) -> tuple[SpanRecord, str | None]:
    """A stored span (its columns, then its payload), and what was wrong with the payload if it
    could not be read: then the span is kept, its payload replaced by that marker."""
    try:
        values = decode_payload(payload)
    except PayloadError as exc:
        return SpanRecord(*columns, attributes={UNREADABLE: str(exc)}), str(exc)
    attributes = values.get("attributes")
    return SpanRecord(
        *columns,
        inputs=values.get("inputs"),
        outputs=values.get("outputs"),
        attributes=attributes if isinstance(attributes, dict) else {},
    ), None


def _decompressed(frame: bytes) -> bytes:
    try:
        declared = zstandard.frame_content_size(frame)  # (-1: not said)
    except zstandard.ZstdError:
        declared = -1
    if declared > MAX_PAYLOAD_BYTES:
        raise PayloadError(
            f"a compressed payload that says it holds {declared:,} bytes (more than {MAX_PAYLOAD_BYTES:,})"
        )
    if declared >= 0:  # (what rollscope writes: one call, into a buffer of the size said, never more)
        try:
            return _zstd()[1].decompress(frame, max_output_size=declared)
        except zstandard.ZstdError as exc:
            raise PayloadError(f"a compressed payload that does not decompress ({exc})") from None
    out = bytearray()
    try:
        with _zstd()[1].stream_reader(frame) as reader:
            while chunk := reader.read(1 << 20):
                out += chunk
                if len(out) > MAX_PAYLOAD_BYTES:
                    raise PayloadError(f"a compressed payload of more than {MAX_PAYLOAD_BYTES:,} bytes")
    except zstandard.ZstdError as exc:
        raise PayloadError(f"a compressed payload that does not decompress ({exc})") from None
    return bytes(out)
