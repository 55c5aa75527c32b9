"""``rollscope run NAME_OR_CONFIG [options] [key=value ...]``: run agent loops, traced, outside training."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from rollscope._extras import VERL, require
from rollscope.runner import preflight, session
from rollscope.runner.config import bundled, load_config
from rollscope.runner.progress import summary
from rollscope.runner.runner import RunFailed
from rollscope.store.schema import resolve_dir

EXIT_SOME_FAILED = 1  # some trajectories failed (their loop or their reward raised): a run a CI job must not pass
EXIT_FAILED = 3  # no trajectory succeeded (as the CLI's exit for an LLM that cannot answer)

# flag -> config key (flags are shortcuts for the most used overrides)
FLAGS = {
    "limit": "limit",
    "n": "n",
    "trace_dir": "trace_dir",
    "backend": "backend",
    "llm": "llm",
    "model": "model",
    "workers": "workers",
    "concurrency": "concurrency",
    "step": "step",
    "experiment": "experiment",
}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "config", metavar="NAME_OR_CONFIG", help=f"a bundled example ({', '.join(bundled())}) or a run config YAML"
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides, e.g. sampling.temperature=0.2")
    p.add_argument("--limit", type=int, help="first N dataset rows")
    p.add_argument("--n", type=int, help="rollouts per row (a GRPO group)")
    p.add_argument(
        "--dir",
        "--trace-dir",
        dest="trace_dir",
        metavar="DIR",
        help="local trace store directory (default: $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)",
    )
    p.add_argument("--backend", help="trace backends, comma-separated (default local)")
    p.add_argument("--llm", help="embedded | http(s)://HOST:PORT | sglang:URL | scripted:FILE")
    p.add_argument("--model", help="tokenizer directory for a server LLM")
    p.add_argument("--workers", type=int, help="spread the work over W Ray actors")
    p.add_argument("--concurrency", type=int, help="trajectories in flight per worker")
    p.add_argument("--step", type=int, help="the step number trajectories are recorded under")
    p.add_argument("--experiment", help="experiment name (default: the config's name)")
    p.add_argument("--validate", action="store_true", help="record as validation rollouts")
    p.add_argument("--quiet", action="store_true", help="no progress bar, only the summary")


def run_command(args: argparse.Namespace) -> int:
    require("verl", *VERL, feature="rollscope run (verl's agent loops)")
    flags = [f"{key}={getattr(args, flag)}" for flag, key in FLAGS.items() if getattr(args, flag) is not None]
    if args.validate:
        flags.append("validate=true")
    config = load_config(args.config, [*args.overrides, *flags])
    rows = preflight.check(config)  # before verl, torch and the model are imported: mistakes show at once
    try:
        stats = session.run(config, console=Console(stderr=True), show_progress=not args.quiet, rows=rows)
    except RunFailed as exc:
        print(f"rollscope: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    trace_dir = str(resolve_dir(config.trace_dir).resolve())
    Console().print(
        summary(
            stats,
            name=config.name,
            trace_dir=trace_dir,
            experiment=config.experiment or config.name,
            backend=config.backend,
            tools=bool(config.tools),
        )
    )
    if stats.failed:
        every = stats.failed == stats.done
        how = f"{stats.reward_failed} in the reward, " if stats.reward_failed else ""
        first = f" the first: {stats.first_failure};" if stats.first_failure else ""
        print(
            f"rollscope: error: {'every trajectory' if every else 'trajectories'} failed ({how}{stats.failed} of "
            f"{stats.done});{first} rollscope traces ls --dir {trace_dir} --status error",
            file=sys.stderr,
        )
        return EXIT_FAILED if every else EXIT_SOME_FAILED
    return 0


COMMAND = (add_args, run_command, "run agent loops on a dataset, traced (a bundled example or a config)")
