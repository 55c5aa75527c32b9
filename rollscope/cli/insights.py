"""``rollscope insights``: what went wrong across a run, per experiment and step (``analysis.insights``)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rollscope.analysis.hacking import HEALTH
from rollscope.analysis.hacking import SIGNALS as HACKING
from rollscope.analysis.insights import SIGNALS, ExperimentInsights, Signal, Thresholds, insights
from rollscope.analysis.metric_changes import JUMP, MetricChange, metric_changes
from rollscope.cli.args import add_dir, open_reader
from rollscope.cli.render import console, escape
from rollscope.cli.strict_json import print_json
from rollscope.sources.wandb_history import read_history


def add_args(p: argparse.ArgumentParser) -> None:
    add_dir(p)
    p.add_argument("--experiment")
    p.add_argument("--project")
    p.add_argument("--step", type=int, help="one step")
    p.add_argument("--steps", help="a range of steps, A:B (inclusive; either end may be left open)")
    p.add_argument("--validate", action="store_true", help="the validation rollouts instead of the training ones")
    p.add_argument("--json", action="store_true", help="one object per experiment (a list when several match)")
    p.add_argument("--all", action="store_true", help="every signal in full, the quiet ones too (folded otherwise)")
    p.add_argument(
        "--check",
        metavar="RESCORING",
        help="a rescoring (rollscope rescore --name) to compare the reward with: the reward_vs_check "
        "signal (reward hacking: the reward rising while an independent check does not)",
    )
    p.add_argument(
        "--wandb-run",
        metavar="RUN",
        help="the training run's W&B metrics beside the signals: an offline run's directory or "
        "entity/project/run_id (each metric's jumps, and the --metric ones at every flagged step)",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME",
        help="a W&B metric to show at every flagged step, jump or not (repeatable)",
    )
    p.add_argument(
        "--metric-jump",
        type=float,
        default=JUMP,
        metavar="N",
        help=f"a change over N times the metric's usual step-to-step change is a jump (default {JUMP})",
    )
    defaults = Thresholds()
    for f in dataclasses.fields(Thresholds):
        p.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(getattr(defaults, f.name)),
            dest=f.name,
            default=getattr(defaults, f.name),
            metavar="N",
            help=f"{f.metadata['help']} (default {getattr(defaults, f.name)})".replace("%", "%%"),
        )


def _steps(args: argparse.Namespace) -> tuple[int | None, int | None]:
    if args.step is not None:
        return args.step, args.step
    if not args.steps:
        return None, None
    first, sep, last = args.steps.partition(":")
    try:
        if not sep:
            raise ValueError
        return (int(first) if first else None), (int(last) if last else None)
    except ValueError:
        raise ValueError(f"--steps {args.steps}: expected A:B, e.g. 100:200 or 100:") from None


def insights_command(args: argparse.Namespace) -> int:
    thresholds = Thresholds(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Thresholds)})
    first, last = _steps(args)
    with open_reader(
        args, experiment=args.experiment, validate=args.validate, first_step=first, last_step=last
    ) as store:
        found = insights(
            store,
            experiment=args.experiment,
            project=args.project,
            steps=(first, last),
            validate=args.validate,
            thresholds=thresholds,
            check=args.check,
        )
    if not found:
        raise KeyError(f"no trajectories match in {store.where}")
    if args.metric and not args.wandb_run:
        raise ValueError("--metric names a W&B run's metric: give the run too (--wandb-run)")
    history = read_history(args.wandb_run) if args.wandb_run else None
    if history is not None:
        series = history.all_series()
        unknown = sorted(set(args.metric) - set(series))
        if unknown:
            raise KeyError(
                f"--metric {unknown[0]}: the W&B run {history.run} logged no such metric "
                f"(it logged {', '.join(list(series)[:12]) or 'none'})"
            )
        for run in found:
            run.metrics = metric_changes(series, run, jump=args.metric_jump, chosen=tuple(args.metric))
    if args.json:
        data = [f.to_dict() for f in found]
        print_json(data[0] if len(data) == 1 else data)
        return 0
    out = console()
    for run in found:
        show(out, run, everything=args.all)
        if history is not None:
            show_metrics(out, run, history.run)
    return 0


def show_metrics(out: Any, run: ExperimentInsights, where: str) -> None:
    """The training run's metrics at the run's steps: each jump, and each chosen metric at each
    flagged step, one line a step."""
    out.print(f"[bold]W&B run {escape(where)}[/bold] — what its metrics did at these steps")
    if not run.metrics:
        out.print("  [dim]no metric jumped at these steps[/dim]\n")
        return
    by_step: dict[int, list[MetricChange]] = {}
    for m in run.metrics:
        by_step.setdefault(m.step, []).append(m)
    for step, changes in sorted(by_step.items()):
        signals = changes[0].signals
        flag = f" [bold red]({', '.join(signals)} flagged)[/bold red]" if signals else ""
        out.print(f"  step {step}{flag}: " + " · ".join(_change(m) for m in changes))
    out.print()


def _change(m: MetricChange) -> str:
    text = f"{escape(m.metric)} {m.value:.4g}"
    if m.change is not None:
        text += f" ({m.change:+.3g}" + (f", {m.ratio:.1f}x its usual change" if m.ratio is not None else "") + ")"
    return text + (" [bold]JUMP[/bold]" if m.jump else "")


# Signals whose examples are those of their flagged steps (a drift or a hacking signal counts every step).
_BY_FLAGGED = ("length_drift", "logprob_drift", *HACKING, *HEALTH)


def _figure(s: Signal) -> str:
    if s.name == "answer_length_with_reward":
        return _drift(s, "mean_answer_chars", "{:.1f} chars", "{:+.0%}", "relative_change")
    if s.name == "repetition":
        return _drift(s, "mean", "{:.3f}", "{:+.3f}")
    if s.name == "entropy_collapse":
        return _drift(s, "mean", "{:.3f}", "{:+.0%}", "relative_change")
    if s.name == "reward_component":
        return f"{escape(s.detail['component'])} {s.share:.0%} (baseline {s.detail['baseline']:.0%})"
    if s.name == "answer_collapse":
        return f"{s.count}/{s.total} ({s.share:.0%}) over {s.detail['prompts']} prompts"
    if s.name == "length_drift":
        return _drift(s, "mean_tokens", "{:.1f} tok", "{:+.0%}")
    if s.name == "logprob_drift":
        return _drift(s, "mean_logprob", "{:.3f}", "{:+.3f}")
    share = "" if s.share is None else f" ({s.share:.0%})"
    if s.name == "logprob_mismatch" and s.detail.get("max_delta") is not None:
        share += f" max |Δ| {s.detail['max_delta']:.2g}"
    if s.name == "off_policy_lag" and s.detail.get("max_lag") is not None:
        share += f" max lag {s.detail['max_lag']}"
    return f"{s.count}/{s.total}{share}"


def _drift(s: Signal, key: str, value: str, change: str, change_key: str = "change") -> str:
    mean, delta = s.detail.get(key), s.detail.get(change_key)
    if mean is None:
        return "-"
    return value.format(mean) + ("" if delta is None else " " + change.format(delta))


def show(out: Any, run: ExperimentInsights, everything: bool = False) -> None:
    """What fired first (the hacking onsets, then each flagged signal in full); the quiet signals
    folded into one line unless ``everything``."""
    steps = f"{run.steps[0]} to {run.steps[-1]}" if len(run.steps) > 1 else str(run.steps[0])
    out.print(
        f"[bold]insights: {escape(run.project or '-')} / {escape(run.experiment or '-')}[/bold] — "
        f"{run.trajectories} trajectories, steps {escape(steps)}"
    )
    onsets = run.onsets()
    if onsets:
        out.print(
            "[bold red]reward hacking[/bold red]: "
            + " · ".join(f"{s.name} from step {s.step} ({_figure(s)})" for s in onsets)
        )
    quiet = []
    for name, (counts, meaning) in SIGNALS.items():
        series = run.of(name)
        if not series:  # the trainer's signals, for a run no trainer recorded
            continue
        flagged = [str(s.step) for s in series if s.flagged]
        if not flagged and not everything:
            quiet.append(name)
            continue
        mark = f" [bold red]FLAGGED at step {', '.join(flagged)}[/bold red]" if flagged else ""
        out.print(f"\n[bold]{name}[/bold] — {escape(counts)}{mark}")
        out.print(f"  [dim]{escape(meaning)}[/dim]")
        out.print("  " + " · ".join(f"step {escape(str(s.step))}: {_figure(s)}" for s in series))
        if name == "tool_errors":
            kinds: dict[str, int] = {}
            for s in series:
                for label, v in s.detail["by_tool_and_kind"].items():
                    kinds[label] = kinds.get(label, 0) + v["count"]
            if kinds:
                out.print("  by tool and kind: " + ", ".join(f"{escape(k)} {n}" for k, n in sorted(kinds.items())))
        examples = [i for s in series if s.flagged for i in s.examples][:5] or [
            i for s in series if s.count and s.name not in _BY_FLAGGED for i in s.examples
        ][:5]
        if examples:
            out.print(f"  examples: {' '.join(examples)}   [dim](rollscope traces show {examples[0]})[/dim]")
    if quiet:
        out.print(f"\n[dim]quiet at every step ({len(quiet)}, --all shows them): {', '.join(quiet)}[/dim]")
    out.print()


COMMAND = (add_args, insights_command, "what went wrong across a run: signals per experiment and step, with examples")
