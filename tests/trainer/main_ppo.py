"""One run of verl's own ``main_ppo`` on CPU for the trainer tests: the training demo's task and
model, 2 GRPO steps of 4 prompts x 2 rollouts, and what verl itself dumped of every step's batch
(``trainer.rollout_data_dir``) to compare the traces with."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rollscope.cpu import demo, demo_task
from rollscope.cpu.launch import run_main_ppo

STEPS, PROMPTS, ROLLOUTS = 2, 4, 2


@dataclass
class TrainerRun:
    root: Path
    trace_dir: Path
    dump: list[dict]  # verl's rows: input, output, score, step (+ reward components under v0)
    log: str


def train(root: Path, model: Path, *overrides: str, backend: str = "local", env: dict | None = None) -> TrainerRun:
    train_file, val_file = demo_task.write_dataset(root / "data", demo_task.problems())
    trace_dir, dump_dir = root / "traces", root / "dump"
    base = demo.overrides(model, train_file, val_file, trace_dir, STEPS, backend)
    log = run_main_ppo(
        [
            *base,
            f"data.train_batch_size={PROMPTS}",
            f"actor_rollout_ref.rollout.n={ROLLOUTS}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
            f"trainer.rollout_data_dir={dump_dir}",
            *overrides,
        ],
        log_path=root / "main_ppo.log",
        env=env,
        cwd=root,
        timeout=900,
        silence_s=300,
    )
    rows = [json.loads(line) for f in sorted(dump_dir.glob("*.jsonl")) for line in f.read_text().splitlines()]
    return TrainerRun(root, trace_dir, rows, log.read_text(errors="replace"))


def question(text: str) -> str:
    """The problem a prompt or a dumped input holds ("What is 12 * 34?")."""
    start = text.index("What is ")
    return text[start : text.index("?", start) + 1]
