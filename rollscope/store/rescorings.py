"""Rescorings: rewards recomputed for stored trajectories under another reward function, kept beside
the run (``rescorings/<name>.rescore`` in the store directory), never in place of what the run
recorded. Readers put them next to the original (``traces ls --rescoring``, the viewer).

A rescoring is one small SQLite file written once, atomically (temp name, rename): running the
same name again replaces that rescoring whole, and nothing else. Its name is also its file name.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER, SUFFIX = "rescorings", ".rescore"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_DDL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE rewards (trajectory_id TEXT PRIMARY KEY, step INTEGER, sample_index TEXT, original REAL, reward REAL,
                      details TEXT);
"""


@dataclass(frozen=True)
class RescoredReward:
    trajectory_id: str
    step: int | None
    sample_index: str | None
    original: float | None  # the reward the run recorded
    reward: float | None  # under the rescoring's function (None: it failed; ``details`` says why)
    details: dict[str, Any]


@dataclass
class Rescoring:
    name: str
    meta: dict[str, Any]  # reward (the function's spec), created_ns, the report's totals
    rewards: dict[str, RescoredReward]  # by trajectory id


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"rescoring name {name!r}: letters, digits, '_', '.', '-' only (it is a file name)")
    return name


def path_of(directory: Path, name: str) -> Path:
    return Path(directory) / FOLDER / f"{check_name(name)}{SUFFIX}"


def write(directory: Path, name: str, meta: dict[str, Any], rewards: Iterable[RescoredReward]) -> Path:
    """Store a rescoring (replacing one of the same name); returns its file."""
    target = path_of(directory, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    db = sqlite3.connect(temp, isolation_level=None)
    try:
        db.executescript(_DDL)
        db.execute("BEGIN")
        meta = {**meta, "name": name, "created_ns": time.time_ns()}
        db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        db.executemany(
            "INSERT OR REPLACE INTO rewards VALUES (?, ?, ?, ?, ?, ?)",
            [
                (
                    r.trajectory_id,
                    r.step,
                    r.sample_index,
                    r.original,
                    r.reward,
                    json.dumps(r.details, sort_keys=True, default=str),
                )
                for r in rewards
            ],
        )
        db.execute("COMMIT")
    finally:
        db.close()
    temp.replace(target)
    return target


def names(directory: Path) -> list[str]:
    """The rescorings stored beside the run in ``directory``, by name."""
    folder = Path(directory) / FOLDER
    return sorted(p.name[: -len(SUFFIX)] for p in folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []


def load(directory: Path, name: str, ids: Iterable[str] | None = None) -> Rescoring:
    """A stored rescoring (of the trajectories ``ids`` only, when given: a page showing one costs
    one row, not the run's); FileNotFoundError naming those there are when ``name`` is not one."""
    path = path_of(directory, name)
    if not path.is_file():
        there = ", ".join(names(directory)) or "none"
        raise FileNotFoundError(f"no rescoring {name!r} in {directory} (stored: {there}; make one with rescore)")
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
        select = "SELECT trajectory_id, step, sample_index, original, reward, details FROM rewards"
        if ids is None:
            rows = db.execute(select).fetchall()
        else:
            rows = [r for tid in dict.fromkeys(ids) for r in db.execute(f"{select} WHERE trajectory_id = ?", (tid,))]
        rewards = {r[0]: RescoredReward(r[0], r[1], r[2], r[3], r[4], json.loads(r[5] or "{}")) for r in rows}
    finally:
        db.close()
    return Rescoring(name, meta, rewards)
