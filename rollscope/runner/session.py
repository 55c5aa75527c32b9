"""A run's lifecycle in one place: build the runner, start tracing, run every job (in this process
or over Ray actors), stop tracing. ``rollscope run`` and tests call ``run``; the CLI only parses
and prints."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from rich.console import Console

from rollscope.runner.config import RunConfig
from rollscope.runner.progress import RunProgress
from rollscope.runner.runner import Outcome, Runner, RunStats


def run(
    config: RunConfig,
    *,
    console: Console,
    show_progress: bool = True,
    rows: list[dict[str, Any]] | None = None,
) -> RunStats:
    """Run ``config`` to the end and return its counters: over ``config.workers`` Ray actors when
    more than one, otherwise here. ``rows``: the dataset already read (by the pre-flight check)."""
    if config.workers > 1:
        from rollscope.runner.distributed import run_on_ray

        return run_on_ray(config, console=console, show_progress=show_progress)
    return asyncio.run(run_local(config, console=console, show_progress=show_progress, rows=rows))


async def run_local(
    config: RunConfig, *, console: Console, show_progress: bool = True, rows: list[dict[str, Any]] | None = None
) -> RunStats:
    """One runner in this process, set up behind a spinner (the trace sidecar starting meanwhile),
    run with a progress bar."""
    from rollscope.tracing import early_sidecar

    runner = Runner(config)
    runner.rows = rows
    with early_sidecar(config.backend, trace_dir=config.trace_dir):
        with _loading(console, f"loading {config.llm} and {config.agent}…"):
            runner.setup()
        with RunProgress(
            runner.stats, config.name, console, total=len(runner.jobs()), enabled=show_progress
        ) as progress:
            return await run_traced(runner, on_outcome=progress.update)


def _loading(console: Console, what: str) -> contextlib.AbstractContextManager:
    """A spinner while the run loads, on a terminal. Its thread redraws it between the imports'
    steps and takes the interpreter from them each time: 5 times a second is enough to look alive,
    and a console that is not a terminal (a log, a pipe) shows no spinner at all."""
    if not console.is_terminal:
        return contextlib.nullcontext()
    return console.status(what, spinner="dots", refresh_per_second=5)


SHUTDOWN_S = 60.0  # how long the end of a run waits for tracing to have stored everything


async def run_traced(runner: Runner, on_outcome: Callable[[Outcome], None] | None = None) -> RunStats:
    """Every job of ``runner`` (set up already), traced: tracing starts here, once the LLM has said
    it can answer (a run that never starts leaves no store), and is shut down, everything stored,
    on return, whatever happened on the way."""
    from rollscope.tracing import shutdown_tracing

    try:
        await runner.check_llm()
    except BaseException:
        await runner.close()
        raise
    runner.start_tracing()
    try:
        await runner.run(on_outcome=on_outcome)
    finally:
        await runner.close()
        runner.stats.all_stored = shutdown_tracing(SHUTDOWN_S)
    return runner.stats
