"""Retention decided after the reward: which GRPO groups of a stored run to keep.

verl's ``max_samples_per_step_per_worker`` decides what to trace before a rollout runs, so it keeps
a random few and loses the rare groups a user wants to look at. A retention policy decides once
the rewards are known: every anomalous group is kept whole — zero-variance (no gradient),
truncated replies or turn limits, failed tool calls, error spans, rewards that are outliers for
their step, disagreements with a stored rescoring — and of the rest a seeded sample. The sample
is by group (a hash of the group's name and the seed), so it is the same whichever process or
publish decides it, and a group is never split.

The trade-off: a group dropped is gone (its spans and rows); steps' means and counts afterwards
describe what was kept. Keep ``sample`` above 0 to compare typical groups later.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sqlite3
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollscope.store import rescorings
from rollscope.store.compaction import compact
from rollscope.store.groups import groups_by_step
from rollscope.store.reader import TraceStore
from rollscope.store.schema import SHARD_SUFFIX
from rollscope.store.segments import is_segmented
from rollscope.trajectory.records import TrajectoryRecord

ANOMALIES = ("zero_variance", "truncated", "tool_error", "error", "outlier", "rescored")
_DEFAULT_KINDS = frozenset(a for a in ANOMALIES if a != "rescored")  # rescored: only with a rescoring named


@dataclass(frozen=True)
class RetentionPolicy:
    keep: frozenset[str] = _DEFAULT_KINDS  # anomalies that keep a group whole
    sample: float = 0.1  # share of the other groups kept
    seed: int = 0
    outlier_z: float = 3.0  # a reward this many of its step's standard deviations from the step's mean
    rescoring: str | None = None  # disagreement with this stored rescoring is an anomaly

    def describe(self) -> str:
        kinds = "+".join(k for k in ANOMALIES if k in self.keep)
        return f"keep {kinds}, sample={self.sample:g}, seed={self.seed}, outlier={self.outlier_z:g}" + (
            f", rescoring={self.rescoring}" if self.rescoring else ""
        )


def parse_policy(text: str) -> RetentionPolicy:
    """``anomalous`` (every kind; ``rescored`` with ``rescoring=NAME``) or kinds joined by ``+``,
    then ``,sample=F`` ``,seed=N`` ``,outlier=Z`` ``,rescoring=NAME``; e.g.
    ``anomalous,sample=0.05,seed=1`` or ``zero_variance+tool_error,sample=0``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError("--retain: empty policy (e.g. anomalous,sample=0.1,seed=0)")
    options: dict[str, Any] = {}
    kinds: set[str] | None = None
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq:
            names = ANOMALIES if key == "anomalous" else key.split("+")
            unknown = [n for n in names if n not in ANOMALIES]
            if unknown:
                raise ValueError(
                    f"--retain {text!r}: unknown kind {unknown[0]!r} (kinds: anomalous, {', '.join(ANOMALIES)})"
                )
            kinds = (kinds or set()) | set(names)
            continue
        try:
            if key == "sample":
                options[key] = float(value)
                if not 0.0 <= options[key] <= 1.0:
                    raise ValueError
            elif key == "seed":
                options[key] = int(value)
            elif key == "outlier":
                options["outlier_z"] = float(value)
            elif key == "rescoring":
                options[key] = value
            else:
                raise KeyError(key)
        except KeyError:
            raise ValueError(f"--retain {text!r}: unknown option {key!r} (sample, seed, outlier, rescoring)") from None
        except ValueError:
            raise ValueError(f"--retain {text!r}: {key}={value!r} is not a valid value") from None
    if kinds is None:
        kinds = set(_DEFAULT_KINDS)
    if not options.get("rescoring"):
        if any("rescored" in p.split("+") for p in parts if "=" not in p):
            raise ValueError(f"--retain {text!r}: 'rescored' needs rescoring=NAME")
        kinds.discard("rescored")  # (in 'anomalous' it means: when a rescoring is named)
    return RetentionPolicy(keep=frozenset(kinds), **options)


@dataclass
class GroupVerdict:
    key: str  # project/experiment/step/sample
    ids: list[str]
    reasons: list[str]  # the anomalies found (kept whole for these)
    sampled: bool = False
    undecided: bool = False  # a rollout still running or unrewarded and not ended: kept, decided later

    @property
    def kept(self) -> bool:
        return bool(self.reasons) or self.sampled or self.undecided


@dataclass
class Decision:
    verdicts: list[GroupVerdict] = field(default_factory=list)

    @property
    def dropped_ids(self) -> list[str]:
        return [i for v in self.verdicts if not v.kept for i in v.ids]

    def summary(self) -> dict[str, Any]:
        kept = [v for v in self.verdicts if v.kept]
        return {
            "groups": len(self.verdicts),
            "kept_groups": len(kept),
            "trajectories": sum(len(v.ids) for v in self.verdicts),
            "kept_trajectories": sum(len(v.ids) for v in kept),
            "anomalous_groups": sum(bool(v.reasons) for v in self.verdicts),
            "by_anomaly": dict(Counter(r for v in self.verdicts for r in v.reasons)),
            "sampled_groups": sum(v.sampled and not v.reasons for v in self.verdicts),
            "undecided_groups": sum(v.undecided and not v.reasons for v in self.verdicts),
        }


def group_key(record: TrajectoryRecord) -> str:
    return f"{record.project or ''}/{record.experiment or ''}/{record.step}/{record.sample_index}"


def sampled(key: str, seed: int, share: float) -> bool:
    """Whether the group named ``key`` is in the seeded sample: the same answer everywhere."""
    digest = hashlib.sha256(f"{seed}\0{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def judge_step(
    groups: list[list[TrajectoryRecord]], policy: RetentionPolicy, rescored: dict[str, float | None] | None = None
) -> list[GroupVerdict]:
    """The verdict on each group of one step (outliers are judged against the step's rewards)."""
    rewards = [r.reward for g in groups for r in g if r.reward is not None]
    mean = statistics.fmean(rewards) if rewards else 0.0
    std = statistics.pstdev(rewards) if len(rewards) > 1 else 0.0
    out = []
    for group in groups:
        key = group_key(group[0])
        reasons = [k for k in ANOMALIES if k in policy.keep and _is(k, group, policy, mean, std, rescored)]
        undecided = any(r.status == "running" for r in group)
        out.append(
            GroupVerdict(key, [r.id for r in group], reasons, sampled(key, policy.seed, policy.sample), undecided)
        )
    return out


def _is(
    kind: str,
    group: list[TrajectoryRecord],
    policy: RetentionPolicy,
    mean: float,
    std: float,
    rescored: dict[str, float | None] | None,
) -> bool:
    rewarded = [r.reward for r in group if r.reward is not None]
    if kind == "zero_variance":
        return len(rewarded) >= 2 and max(rewarded) - min(rewarded) <= 1e-9
    if kind == "truncated":
        return any(r.num_truncated or r.turn_limit for r in group)
    if kind == "tool_error":
        return any(r.num_tool_errors for r in group)
    if kind == "error":
        return any(r.num_errors or r.status == "error" for r in group)
    if kind == "outlier":
        return std > 0 and any(abs(v - mean) > policy.outlier_z * std for v in rewarded)
    if kind == "rescored" and rescored is not None:
        return any(r.id in rescored and not _same(rescored[r.id], r.reward) for r in group)
    return False


def _same(a: float | None, b: float | None) -> bool:
    return a is b is None or (a is not None and b is not None and abs(a - b) <= 1e-9)


@dataclass
class Retained:
    """What ``retain`` decided and did: the decision's summary, and the store's bytes before and after."""

    policy: str
    summary: dict[str, Any]
    bytes_before: int
    bytes_after: int
    dry_run: bool
    kept: list[GroupVerdict] = field(default_factory=list)  # the groups kept for an anomaly

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            **self.summary,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "dry_run": self.dry_run,
            "anomalous": [{"group": v.key, "reasons": v.reasons} for v in self.kept],
        }


def decide(store: TraceStore, policy: RetentionPolicy, **filters: Any) -> Decision:
    """The policy's verdict on every group of ``store`` matching ``filters``, a step at a time."""
    rescored = None
    if policy.rescoring:
        rescored = {i: r.reward for i, r in rescorings.load(store.path, policy.rescoring).rewards.items()}
    decision = Decision()
    for groups in groups_by_step(store, **filters):
        decision.verdicts += judge_step(groups, policy, rescored)
    return decision


def _step_of(record: Any) -> tuple:
    return record.project, record.experiment, record.step


def retain(directory: Path, policy: RetentionPolicy, *, dry_run: bool = False, **filters: Any) -> Retained:
    """Apply ``policy`` to the stored run in ``directory``: the groups it does not keep are removed
    (rows, spans, training records) from the writers' shards and, in the shared layout, from the
    sealed segments (rewritten as compacted ones; safe while writers publish). ``dry_run``: decide
    and report, change nothing."""
    directory = Path(directory)
    with TraceStore(directory) as store:
        decision = decide(store, policy, **filters)
    before = _bytes(directory)
    dropped = decision.dropped_ids
    if dropped and not dry_run:
        for shard in sorted(directory.glob(f"*{SHARD_SUFFIX}")):
            _delete_from_shard(shard, dropped)
        if is_segmented(directory):
            compact(directory, drop=dropped)
    kept = [v for v in decision.verdicts if v.reasons]
    return Retained(
        policy.describe(), decision.summary(), before, before if dry_run else _bytes(directory), dry_run, kept
    )


def _delete_from_shard(shard: Path, ids: list[str]) -> None:
    """Remove ``ids``' rows, spans and training records from a writer's database, and give the
    space back to the filesystem (VACUUM). A shard whose writer is mid-write waits for it."""
    db = sqlite3.connect(shard, isolation_level=None, timeout=30.0)
    try:
        wanted = json.dumps(ids)
        db.execute("BEGIN IMMEDIATE")
        db.execute("DELETE FROM spans WHERE trajectory_id IN (SELECT value FROM json_each(?))", (wanted,))
        db.execute("DELETE FROM trajectories WHERE id IN (SELECT value FROM json_each(?))", (wanted,))
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'training'").fetchone():
            db.execute("DELETE FROM training WHERE trajectory_id IN (SELECT value FROM json_each(?))", (wanted,))
        db.execute("COMMIT")
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error as exc:
        raise OSError(f"{shard}: cannot remove the dropped groups ({exc}); nothing else was changed in it") from None
    finally:
        db.close()


def _bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


@dataclass
class _Row:
    """A finished trajectory as the writer's database holds it: what a verdict reads."""

    id: str
    project: str | None
    experiment: str | None
    step: int | None
    sample_index: Any
    status: str
    reward: float | None
    num_truncated: int
    turn_limit: int
    num_tool_errors: int
    num_errors: int


def at_sealing(policy: RetentionPolicy) -> Any:
    """``policy`` as a writer applies it when it seals segments (``publish.Publisher``'s
    ``retain``): a group is judged once all its rollouts this writer holds are ready (others wait
    with it), against the other groups sealed with it for outliers; what it drops never reaches
    the shared directory (the writer's own database keeps it until it is removed)."""
    if policy.rescoring:
        raise ValueError("retain at sealing time: a rescoring comes after the run (use traces compact --retain)")
    columns = [f.name for f in dataclasses.fields(_Row)]

    def decide_ready(
        db: sqlite3.Connection, ready: list[str], waiting: set[str], final: bool
    ) -> tuple[list[str], set[str], list[str]]:
        rows = db.execute(
            f"SELECT {', '.join(columns)} FROM trajectories WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([*ready, *waiting]),),
        ).fetchall()
        groups: dict[tuple, list[Any]] = {}
        for values in rows:
            row = _Row(*values)
            groups.setdefault((*_step_of(row), repr(row.sample_index)), []).append(row)
        held: set[str] = set()
        steps: dict[tuple, list[list[Any]]] = {}
        for group in groups.values():
            if not final and any(r.id in waiting for r in group):  # judged when its last rollout is ready
                held |= {r.id for r in group if r.id not in waiting}
            else:
                steps.setdefault(_step_of(group[0]), []).append(group)
        dropped = [i for step in steps.values() for v in judge_step(step, policy) if not v.kept for i in v.ids]
        gone = set(dropped) | held
        return [i for i in ready if i not in gone], held, dropped

    return decide_ready
