"""A store crafted to make readers rebuild prompts: many turns continuing one long prompt, what a
shared store can hold (rows copied in SQLite: no loop writes this). Used by the tests of what a
read costs and by benchmarks/bench_reading.py."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def continue_last_turn(trace_dir: Path, continuations: int) -> None:
    """Make the store's last llm turn (a continuation of the turn before) ``continuations`` turns,
    each a copy of it under a new id; 0 removes it (the long turn read alone)."""
    [shard] = list(Path(trace_dir).rglob("*.rstrace"))
    with sqlite3.connect(shard) as db:
        [(second, start)] = db.execute(
            "SELECT id, start_ns FROM spans WHERE kind = 'llm' ORDER BY start_ns DESC LIMIT 1"
        ).fetchall()
        if continuations == 0:
            db.execute("DELETE FROM spans WHERE id = ?", (second,))
        for i in range(1, continuations):
            db.execute(
                "INSERT INTO spans SELECT ?, trajectory_id, parent_id, name, kind, ?, end_ns, status, error_type, "
                "error_message, payload FROM spans WHERE id = ?",
                (f"{second}-{i}", start + i, second),
            )
