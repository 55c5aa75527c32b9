"""``rollscope export OUT --format F [filters]``: a stored run as a dataset (``rollscope.datasets``)."""

from __future__ import annotations

import argparse
import sys

from rollscope.cli.args import add_dir, add_filters, filters_of, open_reader
from rollscope.datasets import FORMATS, export

_HELP = {
    "parquet": "one row per trajectory, one Parquet file",
    "hf": "the same rows as a directory `datasets.load_dataset` reads",
    "jsonl": "the same rows, one JSON object per line",
    "sft": "each GRPO group's best rollout as chat messages (JSONL)",
    "dpo": "each group's best and worst rollouts as a preference pair, where their rewards differ (JSONL)",
}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", help="the file (or, for hf, the directory) to write")
    p.add_argument("--format", required=True, choices=FORMATS, help="; ".join(f"{k}: {v}" for k, v in _HELP.items()))
    p.add_argument(
        "--sft-min-reward",
        type=float,
        dest="sft_min_reward",
        help="sft: keep a group's best rollout only at or above this reward (default: better than the group's worst)",
    )
    add_dir(p)
    add_filters(p)


def export_command(args: argparse.Namespace) -> int:
    def progress(n: int) -> None:
        if sys.stderr.isatty():
            print(f"\rexport: {n:,} trajectories read", end="", file=sys.stderr, flush=True)

    with open_reader(args, **filters_of(args)) as store:
        done = export(
            store, args.out, args.format, sft_min_reward=args.sft_min_reward, progress=progress, **filters_of(args)
        )
    if sys.stderr.isatty():
        print(file=sys.stderr)
    unit = "pairs" if args.format == "dpo" else "examples" if args.format == "sft" else "rows"
    print(f"{done.rows:,} {unit} from {done.trajectories:,} trajectories in {done.groups:,} groups -> {done.path}")
    return 0


COMMAND = (add_args, export_command, "a stored run as a dataset: Parquet, datasets, JSONL, SFT or DPO")
