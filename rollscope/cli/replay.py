"""``rollscope replay ID``: run a stored trajectory again from its record (``runner.replay``)."""

from __future__ import annotations

import argparse
import json

from rollscope.cli.args import add_dir


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", help="trajectory id (from `rollscope traces ls`)")
    add_dir(p)
    p.add_argument("--from-turn", type=int, metavar="K",
                   help="model turns before K come from the record, K and later from --llm")  # fmt: skip
    p.add_argument("--llm", help="the model from --from-turn on: embedded | http(s)://HOST:PORT | sglang:URL | "
                                 "scripted:FILE")  # fmt: skip
    p.add_argument("--model", help="tokenizer directory (default: the one recorded)")
    p.add_argument("--config", help="a tool config to use instead of the one the trajectory ran with")
    p.add_argument("--check", action="store_true",
                   help="every model turn from the record; exit 1 when a tool result, the final response or the "
                        "reward differs from the recorded one")  # fmt: skip
    p.add_argument("--json", action="store_true")


def replay_command(args: argparse.Namespace) -> int:
    from rollscope.cli.render import console, escape, show_diff
    from rollscope.runner.replay import replay

    outcome = replay(args.id, store=args.dir, from_turn=args.from_turn, llm=args.llm, model=args.model,
                     config=args.config, check=args.check)  # fmt: skip
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=1, default=str))
    else:
        out = console()
        turn = "every model turn from the record" if args.from_turn is None else \
            f"model turns before {args.from_turn} from the record, then {args.llm}"  # fmt: skip
        out.print(f"[bold]replay[/bold] {outcome.replay} of {outcome.original} ({escape(turn)})")
        if outcome.diff is not None:
            show_diff(out, outcome.diff)
        for note in outcome.notes:
            out.print(f"[dim]note: {escape(note)}[/dim]")
        if args.check or outcome.differences:
            for difference in outcome.differences:
                out.print(f"[red]differs:[/red] {escape(difference)}")
            out.print("[green]same tool results, final response and reward as recorded[/green]" if outcome.ok
                      else f"[red]{len(outcome.differences)} difference(s)[/red]")  # fmt: skip
    return 0 if outcome.ok or not args.check else 1


COMMAND = (add_args, replay_command,
           "re-run a stored trajectory from any model turn; --check makes it a regression test")  # fmt: skip
