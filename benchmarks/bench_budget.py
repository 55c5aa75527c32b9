"""The performance budget: the hot path, the store's ingest and redaction, this tree beside a
pinned baseline commit, in one run, alternating round by round, each measurement in an
interpreter of its own; says which figure moved and which goal is met.

  hot path   tracing's cost on the rollout's thread per 3-turn trajectory, through the trace
             sidecar into the local store (``bench_trace_breakdown.py``'s ``full``)   goal <= 300 us
  ingest     spans a second, one traced process to disk (``bench_store.py``'s ingest)  goal >= 40,000
             once tracing has started up (a warm-up flushed first, as for MLflow), with its one
             trace sidecar (the default), and with two (``ROLLSCOPE_TRACE_SIDECAR=2``: the
             baseline, which has no such setting, runs one)
  vs MLflow  that ingest over MLflow tracing's on sqlite, same trajectories (measured once a
             round: it does not depend on rollscope's code)                            goal >= 150x
  redaction  the redactor's time per 3-turn trajectory (``bench_redaction.py``)       no slower

The baseline is a git worktree of ``BASELINE`` (or ``--baseline REV``); both sides run this tree's
benchmark scripts, with ``PYTHONPATH`` set to the side's own ``rollscope``. A figure "moved" when
the two sides' medians differ by more than ``--noise`` (default 10 %, this shared machine's spread
between neighbouring runs).

usage: python benchmarks/bench_budget.py [--baseline REV] [--rounds 3] [--pairs 300]
                                         [--trajectories 20000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = "aca5be2"  # the last main before this round's work landed (its figures: benchmarks/RESULTS.md)
GOALS = {
    "hot_path_us": ("<=", 300.0),
    "ingest_spans_per_s": (">=", 40_000.0),
    "ingest_2_sidecars_spans_per_s": (">=", 40_000.0),
    "vs_mlflow": (">=", 150.0),
    "redaction_us": ("<=", None),
}
LOWER_IS_BETTER = {"hot_path_us", "redaction_us"}


def measured(script: str, args: list[str], tree: Path, sidecars: int = 1) -> dict:
    """``script`` (this tree's) run with ``tree``'s rollscope first on the path; its last JSON line."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "WANDB_ERROR_REPORTING": "false",
        "ROLLSCOPE_TRACE_SIDECAR": str(sidecars),
    }
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args], capture_output=True, text=True, env=env, cwd=tree, timeout=3600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} on {tree} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one_round(tree: Path, args: argparse.Namespace, tmp: Path, model_dir: str) -> dict:
    hot = measured(
        "bench_trace_breakdown.py", ["--mode", "full", "--pairs", str(args.pairs), "--model-dir", model_dir], tree
    )
    ingest = {
        sidecars: measured(
            "bench_store.py",
            ["--child", "ingest", "--trajectories", str(args.trajectories), "--dir", tempfile.mkdtemp(dir=tmp)],
            tree,
            sidecars,
        )
        for sidecars in (1, 2)
    }
    redaction = measured("bench_redaction.py", ["--only-redactor", "--rounds", "3"], tree)
    return {
        "hot_path_us": hot["added_us"],
        "ingest_spans_per_s": ingest[1]["spans_per_s"],
        "ingest_2_sidecars_spans_per_s": ingest[2]["spans_per_s"],
        "redaction_us": redaction["us_per_trajectory"],
    }


def worktree(rev: str, tmp: Path) -> Path:
    path = tmp / f"baseline-{rev}"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), rev], check=True, capture_output=True
    )
    return path


def verdict(name: str, base: float, head: float, noise: float) -> tuple[str, str]:
    change = (head - base) / base if base else 0.0
    better = change < 0 if name in LOWER_IS_BETTER else change > 0
    moved = "unchanged" if abs(change) <= noise else ("better" if better else "WORSE")
    op, goal = GOALS[name]
    if goal is None:  # no slower than the baseline
        met = "met" if moved != "WORSE" else "NOT met"
    else:
        met = "met" if (head <= goal if op == "<=" else head >= goal) else "NOT met"
    return f"{change:+.1%} {moved}", met


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--trajectories", type=int, default=20000)
    ap.add_argument("--mlflow-traces", type=int, default=30)
    ap.add_argument("--noise", type=float, default=0.10)
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from rollscope.testing import make_model_dir

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        model_dir = str(make_model_dir(tmp / "model"))
        trees = {"baseline": worktree(args.baseline, tmp), "head": ROOT}
        rounds: dict[str, list[dict]] = {side: [] for side in trees}
        mlflow = []
        try:
            for i in range(args.rounds):
                for side, tree in trees.items():
                    rounds[side].append(one_round(tree, args, tmp, model_dir))
                    print(f"round {i + 1} {side}: {rounds[side][-1]}", flush=True)
                mlflow.append(
                    measured(
                        "bench_store.py",
                        [
                            "--child",
                            "mlflow",
                            "--trajectories",
                            str(args.mlflow_traces),
                            "--dir",
                            tempfile.mkdtemp(dir=tmp),
                        ],
                        ROOT,
                    )["spans_per_s"]
                )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["baseline"])], capture_output=True
            )
    mlflow_spans = statistics.median(mlflow)
    out: dict[str, dict] = {}
    for side, found in rounds.items():
        out[side] = {k: statistics.median(r[k] for r in found) for k in found[0]}
        out[side]["vs_mlflow"] = out[side]["ingest_spans_per_s"] / mlflow_spans
    print(
        f"\nbudget: this tree beside {args.baseline}, medians of {args.rounds} rounds (MLflow: "
        f"{mlflow_spans:,.1f} spans/s)"
    )
    print(f"{'figure':<30} {'baseline':>12} {'this tree':>12}  {'change':<18} goal")
    for name, (op, goal) in GOALS.items():
        base, head = out["baseline"][name], out["head"][name]
        change, met = verdict(name, base, head, args.noise)
        target = f"{op} {goal:,.0f}" if goal is not None else "no slower"
        print(f"{name:<30} {base:>12,.1f} {head:>12,.1f}  {change:<18} {target}: {met}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"baseline": args.baseline, "rounds": rounds, "mlflow": mlflow, "medians": out}, indent=2)
        )


if __name__ == "__main__":
    main()
