"""``rollscope rescore --reward MODULE:FN [filters]``: a stored run's rewards under another reward
function, what GRPO would have done differently, stored beside the run (``rollscope.datasets.rescore``)."""

from __future__ import annotations

import argparse
import sys

from rollscope.cli.args import add_dir, add_filters, filters_of, open_reader
from rollscope.cli.strict_json import print_json
from rollscope.datasets.rescore import RescoreReport, rescore


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--reward",
        required=True,
        metavar="MODULE:FN",
        help="verl's compute_score(data_source, solution_str, ground_truth, extra_info), or a "
        "function of one stored trajectory; module:function or path/to/file.py:function",
    )
    p.add_argument("--name", help="the rescoring's name (default: the function's); the same name replaces it")
    p.add_argument("--workers", type=int, help="processes computing rewards (default: the CPUs; 1: this one)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    add_dir(p)
    add_filters(p)


def rescore_command(args: argparse.Namespace) -> int:
    def progress(n: int) -> None:
        if sys.stderr.isatty():
            print(f"\rrescore: {n:,} trajectories", end="", file=sys.stderr, flush=True)

    with open_reader(args, **filters_of(args)) as store:
        report = rescore(
            store, args.reward, name=args.name, workers=args.workers, progress=progress, **filters_of(args)
        )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        print_json(report.to_dict())
    else:
        show(report)
    return 0


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def show(report: RescoreReport) -> None:
    """The report as a table per step, then each changed group's rollouts."""
    t = report.totals()
    print(
        f"rescoring {report.name!r} ({report.reward}): {report.trajectories:,} trajectories in {t['groups']:,} "
        f"groups, {report.workers} worker(s), {report.seconds:.1f} s"
    )
    print(f"{'step':>5} {'groups':>7} {'moved':>6} {'flipped':>8} {'+zero-var':>10} {'-zero-var':>10}  mean reward")
    for s in report.steps:
        print(
            f"{s.step if s.step is not None else '-':>5} {s.groups:>7} {s.moved:>6} {s.flipped:>8} "
            f"{s.became_zero_variance:>10} {s.stopped_zero_variance:>10}  "
            f"{_num(s.mean_before)} -> {_num(s.mean_after)}"
        )
    print(
        f"{'all':>5} {t['groups']:>7} {t['moved']:>6} {t['flipped']:>8} {t['became_zero_variance']:>10} "
        f"{t['stopped_zero_variance']:>10}"
    )
    for g in report.changed:
        before, after = g.zero_variance_before, g.zero_variance_after
        what = ", ".join(
            w
            for w, on in (
                ("advantage sign flipped", g.flipped),
                ("became zero-variance", after and not before),
                ("no longer zero-variance", before and not after),
            )
            if on
        )
        print(f"step {g.step} sample {g.sample_index}: {what}")
        for m in g.members:
            print(
                f"  rollout {m['rollout_n']}  reward {_num(m['original'])} -> {_num(m['reward'])}  "
                f"advantage {_num(m['advantage_before'])} -> {_num(m['advantage_after'])}  {m['id']}"
            )
    if report.failed:
        print(f"{report.failed} trajectories' rewards failed (first: {report.first_error}); stored without a reward")
    print(
        f"stored beside the run (the original unchanged): {report.path}; "
        f"see it with `rollscope traces ls --rescoring {report.name}` or the viewer's /rescoring?name={report.name}"
    )
    return None


COMMAND = (
    add_args,
    rescore_command,
    "a stored run's rewards under another reward function, and what GRPO would "
    "have done differently (stored beside the run)",
)
