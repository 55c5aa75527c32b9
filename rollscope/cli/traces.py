"""``rollscope traces ...``: read the local trace store."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from rollscope.cli.args import add_dir, add_filters, filters_of, open_reader
from rollscope.cli.strict_json import print_json, print_json_streamed
from rollscope.cli.tail import add_tail, traces_tail
from rollscope.store import resolve_dir
from rollscope.store.reader import ORDERS
from rollscope.trajectory.text import with_text


def _add_filters(p: argparse.ArgumentParser) -> None:
    add_dir(p)
    add_filters(p)
    p.add_argument("--sort", default="step", choices=list(ORDERS))
    p.add_argument("--desc", action="store_true")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="list the first N (default 50; 0: all of them)")
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.add_argument(
        "--rescoring", metavar="NAME", help="show a stored rescoring's reward beside each reward (`rollscope rescore`)"
    )


def traces_ls(args: argparse.Namespace) -> int:
    filters = filters_of(args)
    rescored = None
    with open_reader(args, **filters) as store:
        limit = args.limit or None
        records = store.trajectories(**filters, order_by=args.sort, descending=args.desc, limit=limit)
        total = store.count(**filters)
        everything = store.total() if any(v is not None for v in filters.values()) else total
        if args.rescoring:
            found = store.rescoring(args.rescoring).rewards
            rescored = {r.id: found[r.id].reward if r.id in found else None for r in records}
    if args.json:
        rows = [r.to_dict() for r in records]
        if rescored is not None:
            rows = [{**row, "rescored_reward": rescored[row["id"]]} for row in rows]
        print_json(rows)
        return 0
    print_listing(records, rescored)
    more = "; --limit N lists more, --limit 0 all" if len(records) < total else ""
    if any(v is not None for v in filters.values()):
        everywhere = f"{everything} {_read(store)} in all"
        print(f"{len(records)} of {total} matching trajectories ({everywhere}) in {store.where}{more}")
    else:
        print(f"{len(records)} of {total} trajectories in {store.where}{more}")
    return 0


def _read(store: object) -> str:
    """What a filtered listing's total counts: a remote source fetched only what the filters select."""
    return "trajectories" if store.where == str(getattr(store, "path", "")) else "trajectories read"


def print_listing(records: list, rescored: dict[str, float | None] | None = None) -> None:
    """One line per trajectory, as wide as the terminal: the fixed columns, then the experiment,
    the task and the first error sharing what is left (the experiment first, up to its longest).
    ``rescored``: a rescoring's reward per trajectory, shown beside the reward."""
    from rollscope.cli.render import terminal_safe

    def safe(v: object) -> str:
        return terminal_safe("" if v is None else str(v), one_line=True)

    def count(v: object) -> str:  # (a stored count that is not a number reads back as None)
        return str(v) if type(v) is int else "?"

    beside = f" {'rescored':>8}" if rescored is not None else ""
    fixed = (
        f"{'id':<26} {'step':>5} {'sample':>6} {'roll':>4} {'val':>3} {'status':<7} {'reward':>7}{beside} "
        f"{'turns':>5} {'tools':>5} {'errspans':>8} {'secs':>6}"
    )
    experiments = [safe(r.experiment) for r in records]
    longest = max([len("experiment"), *map(len, experiments)])
    if sys.stdout.isatty():
        room = max(shutil.get_terminal_size().columns - len(fixed) - 3, 30)
        exp_w = min(longest, max(room // 3, 10))
        task_w = max((room - exp_w) * 3 // 5, 10)
        err_w = max(room - exp_w - task_w, 10)
    else:  # a pipe or a file: whole values (a task and an error are stored at most 200 characters long)
        exp_w, task_w, err_w = longest, 60, 200

    def cut(text: str, n: int) -> str:
        return text if len(text) <= n else text[: n - 1] + "…"

    print(f"{fixed} {'experiment':<{exp_w}} {'task':<{task_w}} {'first error':<{err_w}}".rstrip())
    for r, experiment in zip(records, experiments, strict=True):
        reward = "" if r.reward is None else f"{r.reward:.3g}"
        if rescored is not None:
            other = rescored.get(r.id)
            reward = f"{reward:>7} {'' if other is None else f'{other:.3g}':>8}"
        secs = "" if r.duration_s is None else f"{r.duration_s:.2f}"
        task = safe(r.attributes.get("task"))
        error = safe((r.error_message and f"{r.error_type}: {r.error_message}") or r.attributes.get("first_error"))
        print(
            f"{safe(r.id):<26} {safe(r.step):>5} {safe(r.sample_index):>6} {safe(r.rollout_n):>4} "
            f"{'y' if r.validate else '':>3} {safe(r.status):<7} {reward:>7} {count(r.num_llm_calls):>5} "
            f"{count(r.num_tool_calls):>5} {count(r.num_errors):>8} {secs:>6} {cut(experiment, exp_w):<{exp_w}} "
            f"{cut(task, task_w):<{task_w}} "
            f"{cut(error, err_w)}".rstrip()
        )


def _add_dir(p: argparse.ArgumentParser) -> None:
    add_dir(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_show(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="trajectory id (from `rollscope traces ls`)")
    p.add_argument("--full", action="store_true", help="do not shorten long texts")
    p.add_argument(
        "--tokens",
        action="store_true",
        help="each llm turn's tokens by sampled log-probability, the least likely listed",
    )
    _add_dir(p)


def traces_show(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, show_trajectory

    with open_reader(args, ids=[args.id]) as store:
        record = store.get(args.id)
        with_text(record)  # token ids as text with the run's tokenizer, whatever token2text was
    if args.json:
        training = None if record.training is None else record.training.to_dict()
        prompts = record.prompts  # (each turn's prompt made whole as it is written, then let go)
        spans = ({**_span_dict(s), "inputs": prompts.whole_inputs(s)} for s in record.spans)
        print_json_streamed({**record.to_dict(), "training": training}, "spans", spans)
        return 0
    show_trajectory(console(), record, full=args.full, tokens=args.tokens)
    return 0


def _add_diff(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="trajectory id")
    p.add_argument("b", help="trajectory id")
    p.add_argument("--full", action="store_true", help="do not shorten long texts")
    _add_dir(p)


def traces_diff(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, show_diff

    with open_reader(args, ids=[args.a, args.b]) as store:
        left, right = store.get(args.a), store.get(args.b)
        for record in (left, right):
            with_text(record)  # compared as text, whatever token2text was for either
        diff = store.diff(left, right)
    if args.json:
        print_json(
            {
                "a": diff.left.id,
                "b": diff.right.id,
                "fields": diff.fields,
                "first_divergence": diff.first_divergence,
                "turns": [
                    {
                        "index": t.index,
                        "changed": t.changed,
                        "a": _turn_json(t.left, t.left_tools),
                        "b": _turn_json(t.right, t.right_tools),
                    }
                    for t in diff.turns
                ],
            }
        )
        return 0
    show_diff(console(), diff, full=args.full)
    return 0


def _sample(text: str) -> int | str:
    """A sample index as typed: an integer when it reads as one, else the text."""
    return int(text) if text.lstrip("-").isdigit() else text


def _add_group(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", type=int)
    p.add_argument("sample", help="sample index")
    p.add_argument("--experiment")
    _add_dir(p)


def traces_group(args: argparse.Namespace) -> int:
    """One GRPO group per experiment that ran the sample at the step: advantages never mix runs."""
    from rollscope.analysis.grpo import group_advantages
    from rollscope.cli.render import console, show_group

    sample = _sample(args.sample)
    with open_reader(args, step=args.step, sample_index=sample, experiment=args.experiment) as store:
        groups = store.groups(args.step, sample, experiment=args.experiment)
    if not groups:
        raise KeyError(f"no trajectories for step {args.step}, sample {args.sample} in {store.where}")
    out = []
    for records in groups:
        mean, std, members = group_advantages(records)
        if args.json:
            rollouts = [
                {**m.record.to_dict(), "advantage": m.advantage, "normalized_advantage": m.normalized} for m in members
            ]
            out.append(
                {
                    "project": records[0].project,
                    "experiment": records[0].experiment,
                    "step": args.step,
                    "sample_index": sample,
                    "mean_reward": mean,
                    "std_reward": std,
                    "rollouts": rollouts,
                }
            )
        else:
            show_group(console(), args.step, sample, mean, std, members, experiment=records[0].experiment)
    if args.json:  # one group: the object; several experiments: one object each, in a list
        print_json(out[0] if len(out) == 1 else out)
    return 0


def _add_prompt(p: argparse.ArgumentParser) -> None:
    p.add_argument("sample", help="sample index")
    p.add_argument("--experiment")
    _add_dir(p)


def traces_prompt(args: argparse.Namespace) -> int:
    """One prompt across the steps it was drawn in: its group's reward, length, turns, advantages."""
    from rollscope.analysis.history import prompt_history
    from rollscope.cli.render import console, show_history

    sample = _sample(args.sample)
    with open_reader(args, sample_index=sample, experiment=args.experiment) as store:
        history = prompt_history(store, sample, experiment=args.experiment)
    if not history:
        raise KeyError(f"no trajectories for sample {args.sample} in {store.where}")
    if args.json:
        print_json([h.to_dict() for h in history])
    else:
        show_history(console(), sample, history)
    return 0


def _add_compact(p: argparse.ArgumentParser) -> None:
    add_dir(p, "the trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)", source=False)
    p.add_argument("--min-segments", type=int, default=2, help="merge only batches of at least N (default 2)")
    p.add_argument("--target-mb", type=float, default=64, help="size of a merged segment (default 64)")
    p.add_argument(
        "--retain",
        metavar="POLICY",
        help="keep only the groups POLICY keeps, decided on their rewards: 'anomalous' (zero-variance, "
        "truncated, tool_error, error, outlier; rescored with rescoring=NAME) or kinds joined by "
        "'+', then ',sample=F' (share of the rest kept, default 0.1) ',seed=N' ',outlier=Z' "
        "',rescoring=NAME'; any store layout",
    )
    p.add_argument("--dry-run", action="store_true", help="with --retain: decide and report, change nothing")
    p.add_argument("--json", action="store_true", help="with --retain: the report as JSON")
    add_filters(p)


def traces_compact(args: argparse.Namespace) -> int:
    """Merge a shared store's sealed segments into fewer, larger ones (safe while writers publish);
    with ``--retain``, drop the groups a retention policy does not keep."""
    from rollscope.store.compaction import compact
    from rollscope.store.segments import SEGMENTS, is_segmented

    directory = resolve_dir(args.dir)
    if args.retain:
        return _retain(directory, args)
    if not is_segmented(directory):
        raise FileNotFoundError(f"{directory}: no {SEGMENTS}/ here: only a store written with local_dir has segments")
    before = len(list((directory / SEGMENTS).glob("*.rstrace")))
    made = compact(directory, min_segments=args.min_segments, target_bytes=int(args.target_mb * 2**20))
    after = len(list((directory / SEGMENTS).glob("*.rstrace")))
    print(f"{before} segments -> {after} ({len(made)} merged) in {directory / SEGMENTS}")
    return 0


def _retain(directory: Path, args: argparse.Namespace) -> int:
    from rollscope.store.retention import parse_policy, retain

    done = retain(directory, parse_policy(args.retain), dry_run=args.dry_run, **filters_of(args))
    if args.json:
        print_json(done.to_dict())
        return 0
    s = done.summary
    anomalies = ", ".join(f"{k} {n}" for k, n in sorted(s["by_anomaly"].items())) or "none"
    print(
        f"retain ({done.policy}): {s['kept_groups']:,} of {s['groups']:,} groups kept — {s['anomalous_groups']:,} "
        f"anomalous ({anomalies}), {s['sampled_groups']:,} sampled, {s['undecided_groups']:,} still running — "
        f"{s['kept_trajectories']:,} of {s['trajectories']:,} trajectories"
    )
    mb = 2**20
    if done.dry_run:
        print(f"dry run: nothing changed ({done.bytes_before / mb:.2f} MB in {directory})")
    else:
        print(f"{directory}: {done.bytes_before / mb:.2f} MB -> {done.bytes_after / mb:.2f} MB")
    return 0


def _add_recover(p: argparse.ArgumentParser) -> None:
    p.add_argument("local_dir", help="the node-local directory the writers kept their live databases in")
    add_dir(p, "the shared trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)", source=False)


def traces_recover(args: argparse.Namespace) -> int:
    """Publish what writers that died on this host left in their local databases."""
    from rollscope.store.recovery import recover

    local = Path(args.local_dir)
    if not local.is_dir():
        raise FileNotFoundError(f"{local}: no such directory")
    done = recover(local, resolve_dir(args.dir))
    for path, sealed in done:
        print(f"{path}: {sealed} trajectories published")
    print(f"{len(done)} databases recovered" if done else f"nothing to recover in {local}")
    return 0


_SPAN_FIELDS = (
    "id",
    "parent_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "status",
    "error_type",
    "error_message",
    "inputs",
    "outputs",
    "attributes",
)


def _span_dict(span: object) -> dict:
    return {k: getattr(span, k) for k in _SPAN_FIELDS}


COMMANDS = {
    "ls": (_add_filters, traces_ls, "list trajectories, filtered and sorted"),
    "show": (_add_show, traces_show, "one trajectory: turns, tool calls and results, timing, tokens, reward, errors"),
    "diff": (_add_diff, traces_diff, "two trajectories side by side, turn by turn"),
    "group": (_add_group, traces_group, "a GRPO group: every rollout of one sample at one step, with advantages"),
    "prompt": (_add_prompt, traces_prompt, "one prompt across steps: its group's reward, spread, length, advantages"),
    "compact": (
        _add_compact,
        traces_compact,
        "merge a shared store's small segments (safe while writers publish); "
        "--retain: keep the groups a policy keeps, decided on their rewards",
    ),
    "recover": (_add_recover, traces_recover, "publish what dead writers left in a node-local directory"),
    "tail": (add_tail, traces_tail, "a run as it happens: each trajectory as it ends, stalled ones flagged"),
}


def _turn_json(llm: Any, tools: list[Any]) -> dict[str, Any]:
    """One side of a diff's turn: its LLM call's name and text, and its tool calls'."""
    from rollscope.trajectory.diff import turn_text

    return {
        "name": None if llm is None else llm.name,
        "text": None if llm is None else turn_text(llm),
        "tool_calls": [{"name": t.name, "text": turn_text(t)} for t in tools],
    }
