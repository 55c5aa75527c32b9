"""After a writer of the shared-filesystem layout died: the segments it renamed into place but had
not recorded (``reconcile``), and what its node-local database still held, published by another
process on its node (``recover``, ``rollscope traces recover``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sqlite3
from pathlib import Path

from rollscope.store.publish import TRAINING_SEAL, Publisher
from rollscope.store.schema import SHARD_SUFFIX
from rollscope.store.segments import SEGMENTS, open_immutable, parse


def reconcile(db: sqlite3.Connection, shared: Path, writer: str) -> None:
    """After a crash: the segments this writer renamed into place but did not record as sealed."""
    db.execute("CREATE TABLE IF NOT EXISTS sealed (id TEXT PRIMARY KEY, seq INTEGER NOT NULL)")
    known = db.execute("SELECT MAX(seq) FROM sealed").fetchone()[0] or 0
    for s in map(parse, sorted((shared / SEGMENTS).glob(f"{writer}~*{SHARD_SUFFIX}"))):
        if s is not None and s.writer == writer and s.seq > known:
            seg = open_immutable(s.path)
            ids = [r[0] for r in seg.execute("SELECT id FROM trajectories")]
            trained = seg.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'training'").fetchone()[0]
            seg.close()
            # (a segment of training records only holds no trajectory: its number is kept all the same)
            ids = ids or ([TRAINING_SEAL.format(s.seq)] if trained else [])
            db.execute("INSERT OR IGNORE INTO sealed SELECT value, ? FROM json_each(?)", (s.seq, json.dumps(ids)))


def recover(local_dir: Path, shared: Path, *, alive: set[int] | None = None) -> list[tuple[Path, int]]:
    """Publish what writers that died left in ``local_dir`` (their live databases), then remove
    those databases. A database whose writer still runs on this host is left alone. Returns
    (database, trajectories published) per database recovered."""
    host = socket.gethostname()
    done = []
    for path in sorted(Path(local_dir).glob(f"*{SHARD_SUFFIX}")):
        writer = path.name[: -len(SHARD_SUFFIX)]
        pid = _pid_of(writer, host)
        if pid is not None and ((alive is not None and pid in alive) or (alive is None and _running(pid))):
            continue
        lock = open(f"{path}.lock", "w")  # noqa: SIM115  (held across the recovery)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process on this node is recovering it
            lock.close()
            continue
        try:
            db = sqlite3.connect(path, isolation_level=None)
            try:
                reconcile(db, shared, writer)
                publisher = Publisher(db, path, shared, writer)
                sealed = publisher.publish(final=True)
                unsealed = "SELECT COUNT(*) FROM trajectories WHERE id NOT IN (SELECT id FROM sealed)"
                left = db.execute(unsealed).fetchone()[0] + publisher.training_pending()
            finally:
                db.close()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}.lock")
            lock.close()
        if left == 0:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{path}{suffix}").unlink()
        done.append((path, sealed))
    return done


def _pid_of(writer: str, host: str) -> int | None:
    """The pid in a writer name made on this host (``<host>-<pid>-<random>``), else None."""
    prefix = "".join(c if c.isalnum() or c in "-_" else "_" for c in host)[:40] + "-"
    if not writer.startswith(prefix):
        return None
    pid = writer[len(prefix) :].split("-", 1)[0]
    return int(pid) if pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
