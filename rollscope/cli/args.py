"""Arguments several commands share, defined once so they read the same everywhere."""

from __future__ import annotations

import argparse
from typing import Any

from rollscope.sources import TraceSource, open_source

DIR_HELP = "trace directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)"


SOURCE_HELP = (
    "where the trajectories are: weave:ENTITY/PROJECT (a Weave project, read with the weave client's "
    "credentials), or leave it out for the local store (--dir)"
)


def add_dir(p: argparse.ArgumentParser, help: str = DIR_HELP, source: bool = True) -> None:
    """``--dir D``: the trace store a command reads; ``--source weave:ENTITY/PROJECT``: a Weave project instead."""
    p.add_argument("--dir", metavar="DIR", help=help)
    if source:
        p.add_argument("--source", metavar="SOURCE", help=SOURCE_HELP)


def open_reader(args: argparse.Namespace, **filters: Any) -> TraceSource:
    """The source a command reads (``rollscope.sources``): ``--source``, else the store in ``--dir``.
    ``filters``: what the command selects, for a remote source to fetch only that."""
    return open_source(getattr(args, "source", None), args.dir, **filters)


FILTERS = (
    "project",
    "experiment",
    "step",
    "sample_index",
    "rollout_n",
    "validate",
    "agent",
    "status",
    "min_reward",
    "max_reward",
    "has_error",
    "tool_error",
    "wandb_run",
)  # ``TraceStore.trajectories``' filters


def add_filters(p: argparse.ArgumentParser) -> None:
    """The filters of ``traces ls`` (``FILTERS``), for every command that selects trajectories."""
    p.add_argument("--project", help="only this project's trajectories")
    p.add_argument("--experiment", help="only this experiment's (verl's trainer.experiment_name, run's config name)")
    p.add_argument("--step", type=int, metavar="N", help="only those of training step N")
    p.add_argument("--sample", type=int, dest="sample_index", metavar="N", help="only the rollouts of dataset row N")
    p.add_argument("--rollout", type=int, dest="rollout_n", metavar="N", help="only rollout N of each group")
    p.add_argument(
        "--validate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only validation rollouts (--validate) or only training ones (--no-validate)",
    )
    p.add_argument("--agent", metavar="NAME", help="only those of this agent loop")
    p.add_argument("--status", choices=["ok", "error", "cancelled", "running"], help="only those ended so")
    p.add_argument("--min-reward", type=float, metavar="R", help="only those rewarded R or more")
    p.add_argument("--max-reward", type=float, metavar="R", help="only those rewarded R or less")
    p.add_argument(
        "--errors",
        action=argparse.BooleanOptionalAction,
        default=None,
        dest="has_error",
        help="only trajectories with (--errors) or without (--no-errors) an error span",
    )
    p.add_argument(
        "--tool-errors",
        action=argparse.BooleanOptionalAction,
        default=None,
        dest="tool_error",
        help="only trajectories with (--tool-errors) or without a failed tool call",
    )
    p.add_argument(
        "--wandb-run",
        metavar="RUN",
        help="only the trajectories of this W&B run (entity/project/run_id, or the run id alone)",
    )


def filters_of(args: argparse.Namespace) -> dict:
    return {k: getattr(args, k) for k in FILTERS}
