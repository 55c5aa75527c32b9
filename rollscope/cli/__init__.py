"""The ``rollscope`` command: subcommands are small functions registered in ``COMMANDS``.

Errors a user can fix (a bad config key, a missing dataset, a server that is down) end the command
with one line naming what and where, and a non-zero exit code; no traceback.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable

from rollscope._extras import MissingExtra
from rollscope.cli import export, insights, push, replay, rescore, run, traces, ui
from rollscope.llm.base import LLMServerError
from rollscope.sources import SourceError

Command = tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]

# group -> {subcommand -> command}; a group given as a single command has no subcommands.
COMMANDS: dict[str, dict[str, Command] | Command] = {
    "export": export.COMMAND,
    "insights": insights.COMMAND,
    "push": push.COMMAND,
    "replay": replay.COMMAND,
    "rescore": rescore.COMMAND,
    "run": run.COMMAND,
    "traces": traces.COMMANDS,
    "ui": ui.COMMAND,
}
EXIT_BAD_INPUT, EXIT_LLM = 2, 3


GROUPS = {  # what a group of subcommands is for, as ``rollscope --help`` lists it
    "traces": "the stored trajectories: list, show, diff, a GRPO group, a prompt's history, tail; compact, recover",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollscope", description="Traced agent loops for RL on verl.")
    parser.add_argument("--version", action="version", version=f"rollscope {_version()}")
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", title="commands")
    for group, commands in COMMANDS.items():
        if isinstance(commands, tuple):
            add_args, fn, help_text = commands
            p = groups.add_parser(group, help=help_text, description=help_text)
            add_args(p)
            p.set_defaults(func=fn)
            continue
        gp = groups.add_parser(group, help=GROUPS[group], description=GROUPS[group]).add_subparsers(
            dest="command", metavar="COMMAND", title="commands", required=True
        )
        for name, (add_args, fn, help_text) in commands.items():
            p = gp.add_parser(name, help=help_text, description=help_text)
            add_args(p)
            p.set_defaults(func=fn)
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line as the commands see it (exit 2 with argparse's message when it is wrong)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # key=value overrides may follow options (argparse only takes them before)
        if not hasattr(args, "overrides") or any("=" not in item or item.startswith("-") for item in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    return args


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rollscope")
    except PackageNotFoundError:  # (run from a checkout that was never installed)
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.group is None:  # a bare ``rollscope``: what it can do
        build_parser().print_help()
        return 0
    try:
        return args.func(args)
    except LLMServerError as exc:
        print(f"rollscope: error: {exc}", file=sys.stderr)
        return EXIT_LLM
    except (FileNotFoundError, ValueError, KeyError, MissingExtra, SourceError) as exc:
        print(f"rollscope: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into head and closed early
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("rollscope: interrupted (what was traced is in the store)", file=sys.stderr)
        return 130


def _user_code_loaded() -> bool:
    """Whether a module from outside the installed packages, the standard library and rollscope
    itself was imported: the user's code."""
    installed = tuple(
        {
            os.path.realpath(p) + os.sep
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(__file__)))
        }
    )
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and not os.path.realpath(path).startswith(installed):
            return True
    return False


def entry() -> None:
    """The console command: ``main``, then the process ends as the interpreter would end it, less
    its teardown. After verl, torch and transformers were imported, tearing their modules down took
    1.6 s of a 10 s ``rollscope run``; every exit handler has run by then (tracing's shutdown,
    Ray's, logging's), and what a file buffers is flushed. Where the user's own code ran (a tool, a
    reward or a loop from a module of theirs: it may hold a file it never closed) or a thread is
    still running (one not a daemon), the interpreter's usual exit ends it, teardown and all."""
    code = main()
    if _user_code_loaded() or any(
        t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()
    ):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # (a closed pipe: nothing more can reach it)
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
