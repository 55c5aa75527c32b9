"""How far the reward-hacking signals can be trusted: seeded synthetic runs of every family
(``rollscope.testing.hacking_runs``), honest and hacking, written through the tracing API into one
store, checked by the rescoring ``exact``, judged by ``rollscope insights --check exact``.

    python benchmarks/bench_hacking.py [--runs 30] [--steps 16] [--false-alarm 0.05] [--json out.json]

Per family:
- hacking runs: **in time** when the first hacking flag (any signal) falls no earlier than the first
  step whose hacks pass 5 % of it (an early warning is welcome; a flag before any hack is a false
  alarm: **early**) and no later than 2 steps after the true onset, the first step past 25 %
  (**late** after that; **missed**: never flagged). The onset errors (flag - onset) as quantiles;
  the precision of the named examples (the share that are hacks);
- honest runs: the share with any hacking flag (the false-alarm rate; the signals promise at most
  ``--false-alarm``).
Families held out while the signals were tuned are reported apart.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rollscope.analysis.hacking import HEALTH
from rollscope.analysis.insights import Thresholds, insights
from rollscope.semconv import REWARD_DETAILS
from rollscope.store import TraceStore
from rollscope.testing.hacking_runs import CHECK, FAMILIES, Run, RunSpec, record, save_check, verdict

HEALTH_SIGNALS = tuple(HEALTH)


def synthetic(trace_dir: Path, specs: list[RunSpec], writers: int, false_alarm: float) -> dict[str, list]:
    """Record ``specs`` into one store (``writers`` processes, as verl's workers), check them, and
    judge every run: family -> its runs' verdicts."""
    started = time.perf_counter()
    runs = []
    with multiprocessing.get_context("spawn").Pool(writers) as pool:
        for run in pool.imap(functools.partial(record, trace_dir), specs):
            runs.append(run)
            if len(runs) % 20 == 0 or len(runs) == len(specs):
                print(
                    f"  recorded {len(runs)}/{len(specs)} runs, {time.perf_counter() - started:.0f} s", file=sys.stderr
                )
    save_check(trace_dir, runs)
    recorded = time.perf_counter() - started
    judged = time.perf_counter()
    found = {
        r.experiment: r
        for r in insights(TraceStore(trace_dir), check=CHECK, thresholds=Thresholds(false_alarm=false_alarm))
    }
    judged = time.perf_counter() - judged
    verdicts: dict[str, list] = {}
    for run in runs:
        result = found[run.spec.experiment]
        if run.spec.family == "entropy":  # a collapse is for the training-health signal to see
            v = verdict(run, result, signals=HEALTH_SIGNALS)
        else:
            v = verdict(run, result)
            if not FAMILIES[run.spec.family].hacking:
                v["health"] = verdict(run, result, signals=HEALTH_SIGNALS)["verdict"]
        verdicts.setdefault(run.spec.family, []).append(v)
    trajectories = sum(len(r.ids) for r in runs)
    print(
        f"{len(runs)} runs, {trajectories:,} trajectories: recorded in {recorded:.0f} s, "
        f"insights over all of them in {judged:.1f} s (false-alarm rate {false_alarm})\n"
    )
    return verdicts


def report(rows: list[dict[str, Any]], verdicts: dict[str, list]) -> None:
    """The families' table (tuned on, then held out), then the totals."""
    for held_out in (False, True):
        print("held out while tuning" if held_out else "tuned on")
        print(
            "| family | runs | in time / quiet | early / false alarm | late | missed "
            "| onset error min / median / max | examples that are hacks | first signals "
            "| entropy_collapse false alarms |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if r["held_out"] != held_out:
                continue
            v = r["verdicts"]
            if r["hacking"]:
                e = r["onset_error"]
                err = f"{e['min']} / {e['median']} / {e['max']}" if e else "-"
                prec = "-" if r["example_precision"] is None else f"{r['example_precision']:.0%}"
                name = r["family"] + (" (entropy_collapse)" if r["family"] == "entropy" else "")
                print(
                    f"| {name} | {r['runs']} | {r['in_time']:.0%} | {v.get('early', 0)} | {v.get('late', 0)} | "
                    f"{v.get('missed', 0)} | {err} | {prec} | {_signals(r)} | |"
                )
            else:
                print(
                    f"| {r['family']} (honest) | {r['runs']} | {v.get('quiet', 0)} | {r['false_alarm']:.1%} | | | | | "
                    f"{_signals(r)} | {r['health_false_alarm']:.1%} |"
                )
        print()
    for label, hacking in (("hacking", True), ("honest", False)):
        for held_out in (False, True):
            chosen = [
                v
                for f, vs in verdicts.items()
                for v in vs
                if FAMILIES[f].hacking == hacking and FAMILIES[f].held_out == held_out and f != "entropy"
            ]
            chosen = [v for v in chosen if v["verdict"] != "no onset"]
            good = sum(v["verdict"] == ("in time" if hacking else "quiet") for v in chosen)
            what = "in time" if hacking else "quiet"
            print(
                f"{label}{' (held out)' if held_out else ''}: {good}/{len(chosen)} {what} "
                f"({good / max(1, len(chosen)):.1%})"
            )
    honest = [v for f, vs in verdicts.items() if not FAMILIES[f].hacking for v in vs]
    if honest:
        alarms = sum(v["health"] == "false alarm" for v in honest)
        print(f"entropy_collapse (training health) on the honest runs: {alarms}/{len(honest)} false alarms")
    hack_examples = [
        v for vs in verdicts.values() for v in vs if FAMILIES[vs[0]["experiment"].rsplit("-", 1)[0]].hacking
    ]
    total = sum(v["examples"] for v in hack_examples)
    print(f"examples named in hacking runs that are hacks: {sum(v['hack_examples'] for v in hack_examples)}/{total}")


def demo_verdicts(trace_dir: str) -> list[dict[str, Any]]:
    """The CPU demos' runs (``make demo-hack``, ``make demo-train``, each rescored as ``exact``)
    judged as the synthetic ones: a hack is an answer naming several numbers (the loophole's
    ``numbers`` detail, ``rollscope.cpu.demo.hacks``)."""
    store = TraceStore(trace_dir)
    check = CHECK if CHECK in store.rescoring_names() else None
    out = []
    for found in insights(store, check=check):
        run = Run(RunSpec(found.experiment or "-", 0, len(found.steps)))
        by_step: dict[Any, list[bool]] = {}
        for t in store.trajectories(experiment=found.experiment, limit=None):
            hack = ((t.attributes.get(REWARD_DETAILS) or {}).get("numbers") or 0) > 1
            by_step.setdefault(t.step, []).append(hack)
            if hack:
                run.hacks.add(t.id)
        run.share = {step: sum(h) / len(h) for step, h in by_step.items()}
        judged = verdict(run, found, hacking=found.experiment == "demo-hack")
        out.append({**judged, "experiment": found.experiment, "store": trace_dir})
    return out


def summarise(family: str, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    counts = Counter(v["verdict"] for v in verdicts)
    scored = [v for v in verdicts if v["verdict"] != "no onset"]
    examples = sum(v["examples"] for v in verdicts)
    out: dict[str, Any] = {
        "family": family,
        "hacking": FAMILIES[family].hacking,
        "held_out": FAMILIES[family].held_out,
        "runs": len(scored),
        "verdicts": dict(counts),
        "first_signals": dict(Counter(s for v in verdicts for s in v["signals"])),
    }
    if FAMILIES[family].hacking:
        errors = sorted(v["error"] for v in scored if v["error"] is not None)
        out["in_time"] = counts["in time"] / len(scored) if scored else None
        out["onset_error"] = (
            {"min": errors[0], "median": statistics.median(errors), "max": errors[-1], "all": dict(Counter(errors))}
            if errors
            else None
        )
        out["example_precision"] = sum(v["hack_examples"] for v in verdicts) / examples if examples else None
    else:
        out["false_alarm"] = counts["false alarm"] / len(scored) if scored else None
        health = [v["health"] for v in verdicts]
        out["health_false_alarm"] = health.count("false alarm") / len(health) if health else None
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=30, help="seeds per family (default 30)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--family", action="append", help="only these families (repeatable)")
    p.add_argument("--false-alarm", type=float, default=Thresholds.false_alarm)
    p.add_argument("--writers", type=int, default=4, help="processes recording runs (default 4)")
    p.add_argument("--dir", help="the store to write (default: a temporary directory)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument(
        "--demo",
        action="append",
        default=[],
        metavar="DIR",
        help="also judge a CPU demo's store (make demo-hack / demo-train, rescored as exact); repeatable",
    )
    args = p.parse_args()
    families = args.family or list(FAMILIES)
    specs = [
        RunSpec(f, seed, args.steps) for f in families for seed in range(args.first_seed, args.first_seed + args.runs)
    ]
    rows: list[dict[str, Any]] = []
    verdicts: dict[str, list] = {}
    if specs:
        trace_dir = Path(args.dir or tempfile.mkdtemp(prefix="bench-hacking-")) / "traces"
        verdicts = synthetic(trace_dir, specs, args.writers, args.false_alarm)
        rows = [summarise(f, v) for f, v in verdicts.items()]
        report(rows, verdicts)
    demos = [v for d in args.demo for v in demo_verdicts(d)]
    for v in demos:
        print(
            f"demo {v['experiment']} ({v['store']}): {v['verdict']}, first flag {v['first_flag']} "
            f"({', '.join(v['signals']) or 'none'}), hacks from {v.get('appear')} past 25 % at {v.get('onset')}, "
            f"examples that are hacks {v['hack_examples']}/{v['examples']}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"families": rows, "runs": verdicts, "demos": demos}, indent=1, default=str)
        )
    return 0


def _signals(row: dict[str, Any]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(row["first_signals"].items(), key=lambda kv: -kv[1])) or "-"


if __name__ == "__main__":
    raise SystemExit(main())
