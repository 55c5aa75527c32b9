"""What a person watching ``rollscope run`` sees: a live progress bar, then a summary table."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from rollscope.runner.runner import RunStats


def _figures(stats: RunStats) -> str:
    elapsed = max(stats.elapsed, 1e-9)
    reward = "-" if stats.mean_reward is None else f"{stats.mean_reward:.3f}"
    return (
        f"{stats.tokens / elapsed:6.1f} tok/s · {stats.tool_calls} tool calls · "
        f"{stats.span_errors} error spans · {stats.failed} failed · reward {reward}"
    )


class RunProgress:
    """A rich progress bar fed from ``RunStats``; on a non-terminal (CI logs) one line per 10%."""

    def __init__(
        self,
        stats: RunStats,
        title: str,
        console: Console | None = None,
        *,
        total: int | None = None,
        enabled: bool = True,
    ) -> None:
        self.stats = stats
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.live = enabled and self.console.is_terminal
        self._next_line = 0.1
        self.progress = Progress(
            TextColumn(f"[bold]{title}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[figures]}"),
            console=self.console,
            transient=False,
        )
        self.total = total
        self.task = self.progress.add_task(title, total=total, figures="")

    def __enter__(self) -> RunProgress:
        if self.live:
            self.progress.start()
        return self

    def update(self, *_: Any) -> None:
        if not self.enabled:
            return
        s = self.stats
        total = self.total or s.total
        if self.live:
            self.progress.update(self.task, completed=s.done, total=total or None, figures=_figures(s))
        elif total and s.done / total >= self._next_line:
            while s.done / total >= self._next_line:
                self._next_line += 0.1
            print(f"{s.done}/{total} trajectories · {_figures(s)}", file=sys.stderr, flush=True)

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.update()
            self.progress.stop()


def rollout_time(elapsed: float, done: int) -> str:
    """The run's time and rate, with the digits the clock can give: a run over in milliseconds (a
    scripted model) is not shown as "0.0 s" and thousands of trajectories a minute."""
    shown = f"{elapsed:.1f} s" if elapsed >= 1 else f"{elapsed * 1000:.0f} ms"
    if elapsed < 1:
        return f"{shown} (too short for a rate)"
    return f"{shown} ({60 * done / elapsed:.1f} trajectories/min)"


def _failed(stats: RunStats) -> str:
    """How many failed, and how: a loop that raised, or a reward that did (the loop finished)."""
    if not stats.failed:
        return ""
    loops, rewards = stats.failed - stats.reward_failed, stats.reward_failed
    parts = [f"{loops} in the loop"] * bool(loops) + [f"{rewards} in the reward"] * bool(rewards)
    return f", [red]{stats.failed} FAILED[/red] ({', '.join(parts)})"


def _tool_failures(found: dict[str, dict[str, int]]) -> str:
    """``search: 3 timeout, 1 exception · calculator: 2 bad_arguments``: each tool's failed calls
    by kind, the most failing tool first (their spans hold each one: ``rollscope insights``)."""
    tools = sorted(found.items(), key=lambda item: -sum(item[1].values()))
    return " · ".join(
        f"[yellow]{escape(tool)}[/yellow]: "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda k: -k[1]))
        for tool, kinds in tools
    )


def summary(stats: RunStats, *, name: str, trace_dir: str, experiment: str, backend: str, tools: bool = False) -> Table:
    """The run's figures as a table. ``tools``: the run offered tools (a run whose model never called
    one is said to be so: a model that cannot use them earns nothing from them)."""
    table = Table(title=f"rollscope run: {name}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    elapsed = stats.elapsed
    rows = [
        ("trajectories", f"{stats.done} of {stats.total}" + _failed(stats)),
        (
            "mean reward",
            ("-" if stats.mean_reward is None else f"{stats.mean_reward:.3f} over {stats.rewarded}")
            + (f" (not over the {stats.failed} failed)" if stats.failed and stats.rewarded else ""),
        ),
        (
            "tool calls",
            str(stats.tool_calls)
            + (
                " [yellow](the model never called a tool it was offered: see a turn with rollscope traces show ID)"
                "[/yellow]"
                if tools and stats.done and not stats.tool_calls
                else ""
            ),
        ),
        ("error spans", str(stats.span_errors)),
        ("model tokens", f"{stats.tokens} ({stats.tokens / max(elapsed, 1e-9):.1f}/s)"),
        ("rollout time", rollout_time(elapsed, stats.done)),
        (
            "traces",
            f"{trace_dir} (backend: {backend}, experiment: {experiment})"
            + (
                ""
                if stats.all_stored
                else "; NOT ALL STORED YET: tracing was still storing when the run "
                "ended (the trace sidecar goes on with what it holds; count them with the command below)"
            ),
        ),
        ("open them", f"rollscope traces ls --dir {trace_dir} --experiment {experiment}"),
    ]
    if stats.first_failure:
        rows.insert(1, ("first failure", f"[red]{escape(stats.first_failure)}[/red]"))
    if stats.tool_failures:
        rows.insert(3, ("tool calls failed", _tool_failures(stats.tool_failures)))
    for key, value in rows:
        table.add_row(key, value)
    return table
