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
    p.add_argument("--tool-errors", action=argparse.BooleanOptionalAction, default=None, dest="tool_error",
                   help="only trajectories with (--tool-errors) or without a failed tool call")  # fmt: skip
    p.add_argument("--sort", default="step", choices=["step", "start", "reward", "duration"])
    p.add_argument("--desc", action="store_true")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true", help="print a JSON array")


_FILTERS = ("project", "experiment", "step", "sample_index", "rollout_n", "validate", "agent", "status",
            "min_reward", "max_reward", "has_error", "tool_error")  # fmt: skip


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
    from rollscope.cli.render import terminal_safe

    for r in records:
        reward = "" if r.reward is None else f"{r.reward:.3g}"
        secs = "" if r.duration_s is None else f"{r.duration_s:.2f}"
        experiment = terminal_safe(r.experiment or "", one_line=True)
        print(f"{r.id:<26} {experiment[:14]:<14} {terminal_safe(_s(r.step), True):>5} "
              f"{terminal_safe(_s(r.sample_index), True):>6} "
              f"{_s(r.rollout_n):>4} {'y' if r.validate else '':>3} {r.status:<7} {reward:>7} "
              f"{r.num_llm_calls:>5} {r.num_tool_calls:>5} {r.num_errors:>3} {secs:>6}")  # fmt: skip
    print(f"{len(records)} of {total} trajectories in {store.path}")
    return 0


def _s(v: object) -> str:
    return "" if v is None else str(v)


def _add_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="trajectory id (from `rollscope traces ls`)")
    p.add_argument("--full", action="store_true", help="do not shorten long texts")
    _add_dir(p)


def traces_show(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, show_trajectory

    with TraceStore(args.dir) as store:
        record = store.get(args.id)
    if args.json:
        print(json.dumps({**record.to_dict(), "spans": [_span_dict(s) for s in record.spans]}, indent=1, default=str))
        return 0
    show_trajectory(console(), record, full=args.full)
    return 0


def _add_diff(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="trajectory id")
    p.add_argument("b", help="trajectory id")
    p.add_argument("--full", action="store_true", help="do not shorten long texts")
    _add_dir(p)


def traces_diff(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, show_diff
    from rollscope.store.diff import turn_text

    with TraceStore(args.dir) as store:
        diff = store.diff(args.a, args.b)
    if args.json:
        print(json.dumps({
            "a": diff.left.id, "b": diff.right.id, "fields": diff.fields, "first_divergence": diff.first_divergence,
            "turns": [{"index": t.index, "changed": t.changed,
                       "a": None if t.left is None else {"name": t.left.name, "text": turn_text(t.left)},
                       "b": None if t.right is None else {"name": t.right.name, "text": turn_text(t.right)}}
                      for t in diff.turns],
        }, indent=1, default=str))  # fmt: skip
        return 0
    show_diff(console(), diff, full=args.full)
    return 0


def _add_group(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", type=int)
    p.add_argument("sample", help="sample index")
    p.add_argument("--experiment")
    _add_dir(p)


def traces_group(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, show_group
    from rollscope.store.grpo import group_advantages

    sample = int(args.sample) if args.sample.lstrip("-").isdigit() else args.sample
    with TraceStore(args.dir) as store:
        records = store.group(args.step, sample, experiment=args.experiment)
    if not records:
        raise KeyError(f"no trajectories for step {args.step}, sample {args.sample} in {store.path}")
    mean, std, members = group_advantages(records)
    if args.json:
        rollouts = [{**m.record.to_dict(), "advantage": m.advantage, "normalized_advantage": m.normalized}
                    for m in members]  # fmt: skip
        print(json.dumps({"step": args.step, "sample_index": sample, "mean_reward": mean, "std_reward": std,
                          "rollouts": rollouts}, indent=1, default=str))  # fmt: skip
        return 0
    show_group(console(), args.step, sample, mean, std, members)
    return 0


_SPAN_FIELDS = ("id", "parent_id", "name", "kind", "start_ns", "end_ns", "status", "error_type", "error_message",
                "inputs", "outputs", "attributes")  # fmt: skip


def _span_dict(span: object) -> dict:
    return {k: getattr(span, k) for k in _SPAN_FIELDS}


COMMANDS = {
    "ls": (_add_filters, traces_ls, "list trajectories, filtered and sorted"),
    "show": (_add_show, traces_show, "one trajectory: turns, tool calls and results, timing, tokens, reward, errors"),
    "diff": (_add_diff, traces_diff, "two trajectories side by side, turn by turn"),
    "group": (_add_group, traces_group, "a GRPO group: every rollout of one sample at one step, with advantages"),
}
