"""``rollscope traces tail``: a run as it happens. Each trajectory is printed when it ends (one
line: when, ids, reward, turns, tool calls and errors); a running trajectory with no event for
more than ``--stall`` seconds is flagged once, with what it did last, until it moves again.

The store records a span when it ends, so "no event" means: nothing ended in that trajectory
since its last span (named) or its start. Polls the store (the default layout or a shared
directory's published segments and live views) every ``--interval`` seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from rollscope.analysis.live import running
from rollscope.cli.args import add_dir
from rollscope.store import TraceStore
from rollscope.trajectory.records import TrajectoryRecord


def add_tail(p: argparse.ArgumentParser) -> None:
    add_dir(p, source=False)
    p.add_argument("--experiment")
    p.add_argument(
        "--stall",
        type=float,
        default=120.0,
        metavar="S",
        help="flag a running trajectory with no event for more than S seconds (default 120)",
    )
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between looks (default 1)")
    p.add_argument(
        "--since",
        type=float,
        default=0.0,
        metavar="S",
        help="also print what ended in the S seconds before starting (default 0: what ends next)",
    )
    p.add_argument("--once", action="store_true", help="look once (what ended in --since, running, stalled) and exit")


class Tail:
    """The state between looks: what was printed, what is flagged as stalled."""

    def __init__(
        self, store: TraceStore, experiment: str | None, stall_s: float, since_s: float, out: TextIO = sys.stdout
    ) -> None:
        self.store, self.experiment, self.stall_s = store, experiment, stall_s
        self.out = out
        self.cursor = time.time_ns() - int(since_s * 1e9)  # ended after this: not printed yet
        self.printed: set[str] = set()
        self.stalled: dict[str, int] = {}  # id -> the last activity it was flagged at

    def look(self) -> None:
        ended = self.store.trajectories(experiment=self.experiment, ended_after=self.cursor, order_by="end")
        for record in ended:
            if record.id not in self.printed:
                self.printed.add(record.id)
                self.stalled.pop(record.id, None)
                self.out.write(ended_line(record) + "\n")
        if ended:
            # (a trajectory ending in the same nanosecond as the last printed one is still caught: the id set)
            self.cursor = max(self.cursor, max(r.end_ns or 0 for r in ended) - 1)
            if len(self.printed) > 100_000:
                self.printed = {r.id for r in ended}
        for r in running(self.store, self.experiment, self.stall_s):
            if r.stalled and self.stalled.get(r.record.id) != r.last_ns:  # once per stall
                self.stalled[r.record.id] = r.last_ns
                self.out.write(stalled_line(r.record, r.idle_s, r.running_s, r.last) + "\n")
        self.out.flush()

    def running_summary(self) -> str:
        now_running = self.store.count(experiment=self.experiment, status="running")
        return f"{now_running} running, {len(self.stalled)} stalled (no event for more than {self.stall_s:g} s)"


def _ids(record: TrajectoryRecord) -> str:
    experiment = f" {record.experiment}" if record.experiment else ""
    return (
        f"{record.id[:12]}{experiment} step {_v(record.step)} sample {_v(record.sample_index)} "
        f"rollout {_v(record.rollout_n)}"
    )


def ended_line(record: TrajectoryRecord) -> str:
    when = time.strftime("%H:%M:%S", time.localtime((record.end_ns or 0) / 1e9))
    reward = "-" if record.reward is None else f"{record.reward:g}"
    errors = f"  errors {record.num_errors}" if record.num_errors else ""
    tool_errors = f" ({record.num_tool_errors} failed)" if record.num_tool_errors else ""
    return (
        f"{when}  {record.status:<5} {_ids(record)}  reward {reward}  turns {record.num_llm_calls}  "
        f"tools {record.num_tool_calls}{tool_errors}{errors}  {record.duration_s or 0:.1f}s"
    )


def stalled_line(record: TrajectoryRecord, idle_s: float, running_s: float, what: str) -> str:
    when = time.strftime("%H:%M:%S")
    return f"{when}  STALLED {_ids(record)}  no event for {idle_s:.0f}s (running {running_s:.0f}s); {what}"


def _v(value: Any) -> str:
    return "-" if value is None else str(value)


def traces_tail(args: argparse.Namespace) -> int:
    with TraceStore(args.dir) as store:
        tail = Tail(store, args.experiment, args.stall, args.since)
        if args.once:
            tail.look()
            print(tail.running_summary())
            return 0
        print(f"following {store.path} (ctrl-c to stop) ...", flush=True)
        try:
            while True:
                tail.look()
                time.sleep(args.interval)
        except KeyboardInterrupt:
            print(tail.running_summary())
    return 0
