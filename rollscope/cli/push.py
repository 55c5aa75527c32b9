"""``rollscope push --to weave [--dir DIR] [filters]``: replay stored trajectories into a backend."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from rollscope.cli.args import add_dir


def add_args(p: argparse.ArgumentParser) -> None:
    from rollscope.datasets.push import DESTINATIONS

    p.add_argument("--to", required=True, choices=sorted(DESTINATIONS), help="destination backend")
    add_dir(p, source=False)
    p.add_argument("--project", help="destination project (Weave: entity/project; MLflow: experiment)")
    p.add_argument("--endpoint", help="MLflow tracking URI, or OTLP traces endpoint (default: their env variables)")
    p.add_argument("--experiment")
    p.add_argument("--step", type=int)
    p.add_argument("--validate", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument(
        "--refused",
        action="store_true",
        help="send again the calls the destination refused (Weave's dead letters), nothing else",
    )


def push_command(args: argparse.Namespace) -> int:
    from rollscope.datasets.push import DESTINATIONS, Skipped, push, resend_refused

    if args.refused:
        sent, refused, path = resend_refused(args.to, args.project)
        again = f"; {refused} refused again, kept in {path}" if refused else ""
        print(f"sent {sent} refused calls to {args.to}{again}")
        return 1 if refused else 0

    destination = DESTINATIONS[args.to](project=args.project, endpoint=args.endpoint)
    filters = {"experiment": args.experiment, "step": args.step, "validate": args.validate}
    console = Console(stderr=True)
    pushed = total = 0
    skipped = Skipped()
    with Progress(
        TextColumn(f"push to {args.to}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("push", total=None)
        for pushed, total in push(
            args.to,
            args.dir,
            destination=destination,
            project=args.project,
            endpoint=args.endpoint,
            skipped=skipped,
            **filters,
        ):
            progress.update(task, completed=pushed, total=total)
    pushed -= len(skipped)
    print(f"pushed {pushed} trajectories to {args.to}" + ("" if total else " (nothing new: all were pushed before)"))
    if skipped:
        print(
            f"left out {len(skipped)} that could not be read (first: {skipped[0][0]}: {skipped[0][1]}); "
            "the next push tries them again"
        )
        return 1
    return 0


COMMAND = (add_args, push_command, "replay stored trajectories into a backend (idempotent, resumable)")
