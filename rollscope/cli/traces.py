"""``rollscope traces ...``: read the local trace store."""

from __future__ import annotations

import argparse
import json

from rollscope.store import TraceStore


def _add_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)")
    p.add_argument("--project")
    p.add_argument("--experiment")
    p.add_argument("--step", type=int)
    p.add_argument("--sample", type=int, dest="sample_index")
    p.add_argument("--rollout", type=int, dest="rollout_n")
    p.add_argument("--validate", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--agent")
    p.add_argument("--status", choices=["ok", "error", "running"])
    p.add_argument("--min-reward", type=float)
    p.add_argument("--max-reward", type=float)
    p.add_argument("--errors", action=argparse.BooleanOptionalAction, default=None, dest="has_error",
                   help="only trajectories with (--errors) or without (--no-errors) an error span")  # fmt: skip
    p.add_argument("--sort", default="step", choices=["step", "start", "reward", "duration"])
    p.add_argument("--desc", action="store_true")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print a JSON array")


_FILTERS = ("project", "experiment", "step", "sample_index", "rollout_n", "validate", "agent", "status",
            "min_reward", "max_reward", "has_error")  # fmt: skip


def traces_ls(args: argparse.Namespace) -> int:
    with TraceStore(args.dir) as store:
        filters = {k: getattr(args, k) for k in _FILTERS}
        records = store.trajectories(**filters, order_by=args.sort, descending=args.desc, limit=args.limit)
        total = store.count(**filters)
    if args.json:
        print(json.dumps([r.to_dict() for r in records], indent=1))
        return 0
    print(f"{'id':<26} {'experiment':<14} {'step':>5} {'sample':>6} {'roll':>4} {'val':>3} {'status':<7} "
          f"{'reward':>7} {'turns':>5} {'tools':>5} {'err':>3} {'secs':>6}")  # fmt: skip
    for r in records:
        reward = "" if r.reward is None else f"{r.reward:.3g}"
        secs = "" if r.duration_s is None else f"{r.duration_s:.2f}"
        print(f"{r.id:<26} {(r.experiment or '')[:14]:<14} {_s(r.step):>5} {_s(r.sample_index):>6} "
              f"{_s(r.rollout_n):>4} {'y' if r.validate else '':>3} {r.status:<7} {reward:>7} "
              f"{r.num_llm_calls:>5} {r.num_tool_calls:>5} {r.num_errors:>3} {secs:>6}")  # fmt: skip
    print(f"{len(records)} of {total} trajectories in {store.path}")
    return 0


def _s(v: object) -> str:
    return "" if v is None else str(v)


COMMANDS = {"ls": (_add_filters, traces_ls, "list trajectories, filtered and sorted")}
