"""A W&B run's metrics, step by step: what the trainer logged beside the trajectories it trained on
(verl's ``Tracking`` logs reward, KL, entropy, response length... at its global step, the step each
trajectory carries).

Two sources, one result: an offline run's own files (``WANDB_MODE=offline``, or any run's local
directory), read here in W&B's record format — a LevelDB-style log of 32 KB blocks, each record
checksummed (CRC-32 seeded with its type byte), holding one protobuf ``Record`` of wandb's own
schema, whose ``history`` records are the logged rows — or, with credentials, the run on W&B's
server through wandb's public API (``entity/project/run_id``). What is read back is untrusted: a
record that does not read costs itself, counted (``skipped``); a file is read within a size
bound; non-numeric values are left out (a chart draws numbers).
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 1 << 30  # an offline run's record file read at most this far
_BLOCK = 32768
_HEADER = struct.Struct("<4sHB")  # ":W&B", magic, version
_RECORD = struct.Struct("<IHB")  # checksum, length, type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_HIDDEN = ("_timestamp", "_runtime", "_step")  # wandb's own columns, not the trainer's metrics


class HistoryError(ValueError):
    """A run whose history cannot be read at all; the message names it and why."""


@dataclass
class RunHistory:
    run: str  # entity/project/run_id (an offline run's entity may be empty)
    steps: dict[int, dict[str, float]] = field(default_factory=dict)  # step -> metric -> value
    skipped: int = 0  # records or rows that could not be read

    def metrics(self) -> list[str]:
        """The metrics logged, in name order."""
        return sorted({name for row in self.steps.values() for name in row})

    def series(self, name: str) -> dict[int, float]:
        return {step: row[name] for step, row in sorted(self.steps.items()) if name in row}

    def all_series(self) -> dict[str, dict[int, float]]:
        """Every metric's series (``series``), in name order."""
        out: dict[str, dict[int, float]] = {}
        for step, row in sorted(self.steps.items()):
            for name, value in row.items():
                out.setdefault(name, {})[step] = value
        return dict(sorted(out.items()))


def read_history(source: str) -> RunHistory:
    """The history of ``source``: an offline run's directory (``offline-run-*``, ``run-*``), its
    ``.wandb`` file, a ``wandb`` directory holding runs (the newest is read), or a run's path on
    W&B's server (``entity/project/run_id``, read with wandb's public API)."""
    path = Path(source)
    if path.exists():
        found = _record_file(path)
        info = found.stat()
        return _offline(found.resolve(), info.st_mtime_ns, info.st_size)
    if source.count("/") == 2 and all(source.split("/")):
        return _online(source)
    raise HistoryError(f"{source}: neither a W&B run's local files nor a run path (entity/project/run_id)")


def _record_file(path: Path) -> Path:
    """The record file ``path`` is or holds (the newest run's): a regular file only, never a pipe
    or a device that a read would wait on for good."""
    if not path.is_dir():
        if not _regular(path):
            raise HistoryError(f"{path}: not a regular file (a W&B run's record file is one)")
        return path

    def runs(pattern: str) -> list[Path]:
        return sorted((p for p in path.glob(pattern) if _regular(p)), key=lambda p: p.stat().st_mtime)

    found = runs("run-*.wandb") or runs("*run-*/run-*.wandb") or runs("wandb/*run-*/run-*.wandb")
    if not found:
        raise HistoryError(f"{path}: no W&B run here (a run-*.wandb file, in a run's directory)")
    return found[-1]


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


@functools.lru_cache(maxsize=4)
def _offline(path: Path, mtime_ns: int, size: int) -> RunHistory:
    """A record file's history, read once for each version of it (``mtime_ns``, ``size``): a
    page asking again costs nothing until the run writes more. Opened without waiting (a file
    swapped for a pipe since it was looked at is refused, not waited on), read at most
    ``MAX_FILE_BYTES``."""
    from wandb.proto import wandb_internal_pb2

    history = RunHistory(run=path.stem.removeprefix("run-"))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise HistoryError(f"{path}: not a regular file (a W&B run's record file is one)")
        data = f.read(MAX_FILE_BYTES)
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != b":W&B":
        raise HistoryError(f"{path}: not a W&B record file")
    for payload in _payloads(data, history):
        try:
            record = wandb_internal_pb2.Record.FromString(payload)
        except Exception:  # a record of a schema this wandb does not know, or damaged
            history.skipped += 1
            continue
        kind = record.WhichOneof("record_type")
        if kind == "run" and record.run.run_id:
            history.run = f"{record.run.entity}/{record.run.project}/{record.run.run_id}"
        elif kind == "history":
            items = {"/".join(i.nested_key) if i.nested_key else i.key: i.value_json for i in record.history.item}
            step = record.history.step.num if record.history.HasField("step") else _int(items.get("_step"))
            _add(history, step, items)
    return history


def _payloads(data: bytes, history: RunHistory) -> Iterator[bytes]:
    """The records of a W&B log, each checked against its checksum: a damaged one is counted and
    left out (with a damaged header, the rest of its block: where the next record starts is not
    known)."""
    at, pending = _HEADER.size, None
    while at + _RECORD.size <= len(data):
        room = _BLOCK - at % _BLOCK
        if room < _RECORD.size:  # (a block's tail too short for a header: zeros)
            at += room
            continue
        checksum, length, kind = _RECORD.unpack_from(data, at)
        if checksum == length == kind == 0:  # the rest of the block is padding
            at += room
            continue
        body = data[at + _RECORD.size : at + _RECORD.size + length]
        if length > room - _RECORD.size or len(body) < length or kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            history.skipped += 1  # a header that does not read: where the next record starts is unknown
            pending = None
            at += room
            continue
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != checksum:
            history.skipped += 1  # its data damaged: that record (or the one it is part of) only
            pending = None
            at += _RECORD.size + length
            continue
        at += _RECORD.size + length
        if kind == _FULL:
            yield body
        elif kind == _FIRST:
            pending = [body]
        elif pending is not None:
            pending.append(body)
            if kind == _LAST:
                yield b"".join(pending)
                pending = None


def _online(path: str) -> RunHistory:
    try:
        import wandb

        run = wandb.Api(timeout=30).run(path)
        rows = run.scan_history(page_size=1000)
        history = RunHistory(run=path)
        for row in rows:
            _add(history, _int(row.get("_step")), {k: json.dumps(v) for k, v in row.items()})
    except Exception as exc:  # no credentials, no such run, the server away
        raise HistoryError(f"{path}: W&B's API could not read the run ({type(exc).__name__}: {exc})"[:500]) from None
    return history


def _add(history: RunHistory, step: int | None, items: dict[str, str]) -> None:
    if step is None or step < 0:
        history.skipped += 1
        return
    row = history.steps.setdefault(step, {})
    for name, text in items.items():
        if name in _HIDDEN:
            continue
        value = _number(text)
        if value is not None:
            row[name] = value


def _number(text: str) -> float | None:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _int(text: Any) -> int | None:
    value = _number(text) if isinstance(text, str) else text
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value != int(value):
        return None
    return int(value)
