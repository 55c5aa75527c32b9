"""``--workers W``: the same run spread over W Ray actors (verl's engine), locally or on a cluster.

Each actor builds its own Runner (its own LLM client: the embedded model is loaded per actor, a
server URL is shared) and writes its own trace shard, so nothing is funnelled through the driver
but counters. Jobs are dealt round-robin. With ``RAY_ADDRESS`` set, ``ray.init`` joins that cluster;
otherwise a local Ray starts for the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.console import Console

from rollscope.llm.base import LLMServerError
from rollscope.runner.config import RunConfig
from rollscope.runner.progress import RunProgress
from rollscope.runner.runner import Job, RunFailed, Runner, RunStats
from rollscope.store.schema import resolve_dir


class RunnerActor:
    """One worker: a Runner with tracing into its own shard."""

    def __init__(self, fields: dict[str, Any], base: str) -> None:
        config = RunConfig(**fields)
        config._base = base
        self.runner = Runner(config)
        self.error: Exception | None = None
        try:
            self.runner.setup()
        except (LLMServerError, ValueError, FileNotFoundError) as exc:  # handed to the driver by ready()
            self.error = exc
            return
        self.runner.start_tracing()

    async def ready(self) -> Exception | None:
        return self.error

    async def run(self, jobs: list[tuple[int, int]]) -> RunStats:
        from rollscope.tracing import flush_tracing

        rows = self.runner.rows
        try:
            await self.runner.run([Job(rows[position], position, k) for position, k in jobs])
        finally:
            flush_tracing()
        return self.runner.stats

    async def stats(self) -> RunStats:
        return self.runner.stats

    async def close(self) -> None:
        from rollscope.tracing import shutdown_tracing

        if self.error is None:
            await self.runner.close()
        shutdown_tracing()


def run_on_ray(config: RunConfig, *, console: Console, show_progress: bool = True) -> RunStats:
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False)  # errors come back as values
    workers = config.workers
    cpus = ray.cluster_resources().get("CPU", 1.0)
    actor_cls = ray.remote(num_cpus=min(1.0, cpus / workers), max_concurrency=2)(RunnerActor)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields.update(trace_dir=str(resolve_dir(config.trace_dir).resolve()), workers=1)
    from rollscope.runner.dataset import load_rows

    rows = load_rows(config.resolve(config.dataset), config.limit) if config.dataset else []
    jobs = [(i, k) for i in range(len(rows)) for k in range(config.n)]
    with console.status(f"starting {workers} Ray workers ({config.llm}, {config.agent})…", spinner="dots"):
        actors = [actor_cls.remote(fields, getattr(config, "_base", ".")) for _ in range(workers)]
        for error in ray.get([a.ready.remote() for a in actors]):
            if error is not None:
                for actor in actors:
                    ray.kill(actor)
                raise error
    stats = RunStats(total=len(jobs))
    pending = [a.run.remote(jobs[i::workers]) for i, a in enumerate(actors)]
    refs = list(pending)
    try:
        with RunProgress(stats, config.name, console, total=len(jobs), enabled=show_progress) as progress:
            while pending:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
                progress.stats = stats = _merged(ray.get([a.stats.remote() for a in actors]), stats)
                progress.update()
            try:
                stats = _merged(ray.get(refs), stats)
            except ray.exceptions.RayTaskError as exc:
                raise _unwrap(exc) from None
    finally:
        ray.get([a.close.remote() for a in actors])
        for actor in actors:
            ray.kill(actor)
    return stats


def _merged(parts: list[RunStats], previous: RunStats) -> RunStats:
    """The workers' counters summed; rates count from the driver's start."""
    merged = RunStats(total=previous.total, started=previous.started)
    for part in parts:
        merged.merge(dataclasses.replace(part, total=0))
    return merged


def _unwrap(exc: Exception) -> Exception:
    """The user's error (bad config, LLM down) out of Ray's wrapping, so the CLI prints one line."""
    cause = getattr(exc, "cause", None) or exc
    if isinstance(cause, (LLMServerError, RunFailed, ValueError, FileNotFoundError)):
        return cause
    return LLMServerError(str(cause).splitlines()[0] if str(cause) else repr(cause))
