"""A user's first hour, timed: how long ``rollscope run`` takes to say what is wrong with a
mistake, and quickstart 1 end to end, this tree beside a baseline commit (a worktree of it, each
side's own ``rollscope`` first on the path), alternating, medians of ``--rounds``.

  unknown key        a config key that does not exist (``model_name=x``)
  misspelled tool    a tool YAML naming ``CalculatorToll`` (the class is ``CalculatorTool``)
  wrong module       a tool YAML naming a module that is not there
  server down        ``--llm http://127.0.0.1:PORT`` with nothing listening
  quickstart 1       README's first command (the scripted model, 2 tasks x 2 rollouts)

and, in the same rounds, the floor quickstart 1 is held to: importing verl's agent-loop module
(``verl.experimental.agent_loop.agent_loop``, which a standalone run builds its loops from), timed
inside a process of its own right after quickstart 1, so neither interpreter start nor teardown
counts (goal: quickstart 1 within that import plus 1 s).

usage: python benchmarks/bench_startup.py [--baseline REV] [--rounds 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_budget import worktree  # noqa: E402


def cases(tmp: Path) -> dict[str, list[str]]:
    misspelled = tmp / "misspelled.yaml"
    misspelled.write_text("tools:\n  - class_name: rollscope.tools.builtin.calculator.CalculatorToll\n")
    wrong_module = tmp / "wrong_module.yaml"
    wrong_module.write_text("tools:\n  - class_name: my_tolls.WeatherTool\n")
    model = tmp / "model"
    if not model.exists():
        build = (
            "from pathlib import Path; from rollscope.testing import make_model_dir; "
            f"make_model_dir(Path({str(model)!r}))"
        )
        subprocess.run([sys.executable, "-c", build], check=True, cwd=ROOT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    replies = ["--llm", f"scripted:{ROOT / 'rollscope/bundled/scripted_replies.yaml'}"]  # (a baseline tree's too)
    run = ["run", "gsm8k-calculator", "--trace-dir", str(tmp / "traces")]
    return {
        "unknown key": [*run, *replies, "model_name=x"],
        "misspelled tool": [*run, *replies, f"tools={misspelled}"],
        "wrong module": [*run, *replies, f"tools={wrong_module}"],
        "server down": [*run, "--llm", f"http://127.0.0.1:{port}", "--model", str(model)],
        "quickstart 1": [*run, "--limit", "2", "--n", "2", *replies, "--quiet"],
    }


def timed(tree: Path, args: list[str]) -> tuple[float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_ERROR_REPORTING": "false"}
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=600
    )
    return time.perf_counter() - t0, done.returncode


def verl_import_s() -> float:
    """Seconds ``import verl.experimental.agent_loop.agent_loop`` takes, timed in a fresh process."""
    probe = (
        "import time; t = time.perf_counter(); import verl.experimental.agent_loop.agent_loop; "
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env={**os.environ, "WANDB_ERROR_REPORTING": "false"},
    )
    return float(done.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="c814196")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = worktree(args.baseline, Path(tmp))
        try:
            work = Path(tmp) / "work"
            work.mkdir()
            runs = cases(work)
            times: dict[str, dict[str, list[float]]] = {name: {"baseline": [], "this tree": []} for name in runs}
            codes: dict[str, dict[str, int]] = {name: {} for name in runs}
            floor: list[float] = []
            for _ in range(args.rounds):
                for name, command in runs.items():
                    for side, tree in (("baseline", base), ("this tree", ROOT)):
                        seconds, code = timed(tree, command)
                        times[name][side].append(seconds)
                        codes[name][side] = code
                floor.append(verl_import_s())  # (beside quickstart 1, the round's last case)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)], capture_output=True)
    print(f"seconds to the answer, medians of {args.rounds} (exit code): {args.baseline} / this tree")
    results = {}
    for name in runs:
        b, t = (statistics.median(times[name][side]) for side in ("baseline", "this tree"))
        results[name] = {"baseline_s": b, "this_tree_s": t, "codes": codes[name]}
        print(f"  {name:16} {b:6.2f} s ({codes[name]['baseline']}) / {t:6.2f} s ({codes[name]['this tree']})")
    verl_s = statistics.median(floor)
    quickstart = results["quickstart 1"]["this_tree_s"]
    print(
        f"  importing verl's agent-loop module alone: {verl_s:.2f} s; quickstart 1 is that "
        f"{quickstart - verl_s:+.2f} s (goal: +1.00 at most)"
    )
    results["verl agent-loop import"] = {"seconds": verl_s}
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
