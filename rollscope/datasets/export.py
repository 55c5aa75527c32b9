"""``rollscope export``'s formats: every trajectory as a row (Parquet, a ``datasets`` directory,
JSONL), or the chat data a run yields (SFT: the best rollout of each group; DPO: best against
worst of each group whose rewards differ).

Streams one step's groups at a time (``store.groups.step_groups``): memory stays flat however big the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollscope._extras import require
from rollscope.datasets.rows import COLUMNS, TOKEN_COLUMNS, trajectory_row
from rollscope.store import TraceStore
from rollscope.store.groups import step_groups
from rollscope.trajectory.records import TrajectoryRecord

FORMATS = ("parquet", "hf", "jsonl", "sft", "dpo")
_BATCH = 1024  # rows per Parquet row group written


@dataclass
class Exported:
    rows: int  # rows written (pairs for dpo)
    groups: int  # GRPO groups read
    trajectories: int  # trajectories read
    path: Path


def export(
    store: TraceStore,
    out: str | Path,
    fmt: str,
    *,
    sft_min_reward: float | None = None,
    progress: Callable[[int], None] | None = None,
    **filters: Any,
) -> Exported:
    """Write the trajectories matching ``filters`` (``traces ls``'s) to ``out`` as ``fmt``.
    ``sft_min_reward``: sft keeps a group's best rollout only at or above it (default: one better
    than the group's worst, or a group of one rewarded above 0)."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = Path(out)
    counts = {"groups": 0, "trajectories": 0}

    def each_group() -> Iterator[list[TrajectoryRecord]]:
        for group in step_groups(store, **filters):
            counts["groups"] += 1
            counts["trajectories"] += len(group)
            if progress is not None:
                progress(counts["trajectories"])
            yield group

    if fmt in ("parquet", "hf"):
        require("data", "pyarrow", feature=f"rollscope export --format {fmt}")
        target = out / "data" / "train-00000-of-00001.parquet" if fmt == "hf" else out
        written = _parquet(target, (trajectory_row(r, g) for g in each_group() for r in g))
        if fmt == "hf":
            (out / "README.md").write_text(_CARD.format(rows=written))
    elif fmt == "jsonl":
        written = _jsonl(out, (trajectory_row(r, g) for g in each_group() for r in g))
    elif fmt == "sft":
        written = _jsonl(out, (row for g in each_group() if (row := sft_example(g, sft_min_reward)) is not None))
    else:
        written = _jsonl(out, (row for g in each_group() if (row := dpo_pair(g)) is not None))
    return Exported(written, counts["groups"], counts["trajectories"], out)


def sft_example(group: list[TrajectoryRecord], min_reward: float | None = None) -> dict[str, Any] | None:
    """The group's best rollout as chat messages (TRL's conversational format), or None when it
    does not qualify: below ``min_reward``, or (without it) no better than the group's worst."""
    rewarded = [r for r in group if r.reward is not None]
    if not rewarded:
        return None
    best = max(rewarded, key=lambda r: (r.reward, r.id))
    if min_reward is not None and best.reward < min_reward:
        return None
    if min_reward is None and (
        best.reward <= min(r.reward for r in rewarded) if len(rewarded) > 1 else best.reward <= 0
    ):
        return None
    row = trajectory_row(best, group)
    return {"messages": row["messages"], "id": row["id"], "group_id": row["group_id"], "reward": row["reward"]}


def dpo_pair(group: list[TrajectoryRecord]) -> dict[str, Any] | None:
    """(chosen, rejected) = the group's best and worst rollouts, when their rewards differ:
    TRL's conversational preference format, the shared prompt apart."""
    rewarded = [r for r in group if r.reward is not None]
    if len(rewarded) < 2:
        return None
    best = max(rewarded, key=lambda r: (r.reward, r.id))
    worst = min(rewarded, key=lambda r: (r.reward, r.id))
    if best.reward == worst.reward:
        return None
    chosen, rejected = trajectory_row(best, group), trajectory_row(worst, group)
    n = len(chosen["prompt"])
    return {
        "prompt": chosen["prompt"],
        "chosen": chosen["messages"][n:],
        "rejected": rejected["messages"][n:],
        "chosen_id": chosen["id"],
        "rejected_id": rejected["id"],
        "group_id": chosen["group_id"],
        "chosen_reward": chosen["reward"],
        "rejected_reward": rejected["reward"],
    }


def _jsonl(path: Path, rows: Iterator[dict[str, Any]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def _parquet(path: Path, rows: Iterator[dict[str, Any]]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    integers = (
        "step",
        "rollout_n",
        "group_size",
        "policy_version",
        "turns",
        "tool_calls",
        "tool_errors",
        "errors",
        "truncated",
        "start_ns",
    )
    floats = ("reward", "group_mean", "group_std", "group_advantage", "advantage", "duration_s")
    per_token = dict.fromkeys(TOKEN_COLUMNS, pa.list_(pa.float32()))  # (verl computes them in float32)
    types = {
        "validate": pa.bool_(),
        "prompt": message,
        "messages": message,
        **per_token,
        "response_mask": pa.list_(pa.int8()),
        **dict.fromkeys(integers, pa.int64()),
        **dict.fromkeys(floats, pa.float64()),
    }
    schema = pa.schema([(c, types.get(c, pa.string())) for c in COLUMNS])
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == _BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n, batch = n + len(batch), []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


_CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
---
# Trajectories exported by rollscope

{rows} rows, one per trajectory (`rollscope export --format hf`): ids, step, sample index, rollout,
GRPO group, the conversation as chat messages, reward, advantage where the trainer recorded it
(and per token: loss mask, trainer/rollout/reference log-probs, entropy, advantages), counts and
timings. Load with `datasets.load_dataset(THIS_DIRECTORY)`.
"""
