"""Dataset rows in verl's RLHFDataset shape, from JSONL or parquet, checked before anything runs.

A row needs ``prompt`` (a list of chat messages). ``extra_info.index`` (else the row number) is the
sample index; ``extra_info.tools_kwargs`` (or a top-level ``tools_kwargs``) reaches the tools;
``agent_name`` picks a loop per row; ``reward_model.ground_truth`` and ``data_source`` reach the reward.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollscope._files import lines


class DatasetError(ValueError):
    """A dataset that cannot be read; the message names the file and the row."""


def load_rows(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: dataset not found")
    if path.suffix == ".parquet":
        rows = _parquet(path)
    elif path.suffix in (".jsonl", ".json"):
        rows = _jsonl(path, limit)
    else:
        raise DatasetError(f"{path}: unknown dataset format {path.suffix!r} (use .jsonl or .parquet)")
    if not rows:
        raise DatasetError(f"{path}: no rows")
    rows = rows[:limit] if limit else rows
    for number, row in enumerate(rows, 1):
        _check(row, f"{path}: row {number}")
    return rows


def _jsonl(path: Path, limit: int | None) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file, read up to the ``limit``-th row only."""
    rows: list[dict[str, Any]] = []
    for number, line in lines(path, "dataset", DatasetError):
        if limit and len(rows) >= limit:
            break
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: line {number}: invalid JSON ({exc.msg})") from None
    return rows


def _parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise DatasetError(f"{path}: cannot read parquet: {exc}") from None


def _check(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise DatasetError(f"{where}: a row is an object, got {type(row).__name__}")
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise DatasetError(f"{where}: 'prompt' must be a non-empty list of chat messages")
    for message in prompt:
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise DatasetError(f"{where}: each prompt message needs 'role' and 'content'")


def loop_kwargs(row: dict[str, Any], position: int) -> dict[str, Any]:
    """The keyword arguments verl's worker passes to ``AgentLoopBase.run`` for this row."""
    extra = dict(row.get("extra_info") or {})
    extra.setdefault("index", position)
    kwargs = {k: v for k, v in row.items() if k not in ("prompt", "extra_info")}
    kwargs.update(
        raw_prompt=list(row["prompt"]),
        extra_info=extra,
        index=extra["index"],
        tools_kwargs=row.get("tools_kwargs") or extra.get("tools_kwargs") or {},
    )
    return kwargs
