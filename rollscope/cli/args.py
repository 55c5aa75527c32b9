"""Arguments several commands share, defined once so they read the same everywhere."""

from __future__ import annotations

import argparse

DIR_HELP = "trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)"


def add_dir(p: argparse.ArgumentParser, help: str = DIR_HELP) -> None:
    """``--dir D``: the trace store a command reads."""
    p.add_argument("--dir", help=help)


FILTERS = ("project", "experiment", "step", "sample_index", "rollout_n", "validate", "agent", "status",
           "min_reward", "max_reward", "has_error", "tool_error")  # ``TraceStore.trajectories``' filters


def add_filters(p: argparse.ArgumentParser) -> None:
    """The filters of ``traces ls`` (``FILTERS``), for every command that selects trajectories."""
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


def filters_of(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in FILTERS}
