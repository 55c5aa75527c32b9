"""``make demo-train``: verl's own GRPO trainer on CPU teaches a tiny policy to use the calculator.
``make demo-hack``: the same trainer, a reward with a loophole, and a policy that finds it.

    python -m rollscope.cpu.demo [--steps N] [--rollout hf_cpu|vllm|sglang] [--dir rollscope_traces] [--seed 0]
                                     [--work .rollscope-demo] [--task calculator|loophole]

``--task loophole`` pays any mention of the right number (``rewards.mentions_answer``): the policy,
warm-started to list candidates now and then (``demo_task.listing_conversations``), learns to list
them. Once trained, the demo rescores the run with the honest reward (``rewards.exact_number``, the
rescoring ``exact``) and prints, per step, the reward, the honest one and the share of answers
listing several numbers (the hacks), then what ``rollscope insights --check exact`` finds.

Builds the task and the warm-started model (``demo_task``, seconds, kept for the next run), runs
``python -m verl.trainer.main_ppo`` with rollscope's tool loop and calculator named through verl's
own keys and ``trace.backend=local`` (the rollout: rollscope's ``hf_cpu`` server, or verl's own vLLM
server on vLLM's CPU build with ``--rollout vllm``, or verl's own SGLang server with ``--rollout
sglang``), then prints the per-step mean reward and calculator use from
the trace store, and the commands that open the run.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from rollscope import bundled
from rollscope.bundled import rewards
from rollscope.cpu import ROLLOUT_NAME, UnsupportedOnCPU, demo_task
from rollscope.cpu.launch import ENGINES, ROLLOUT_KEY, TrainerFailed, check_overrides, run_main_ppo
from rollscope.semconv import REWARD_DETAILS
from rollscope.store import TraceStore, resolve_dir

EXPERIMENT = "demo-train"
PROJECT = "rollscope-demo"
# --task: (the experiment, the reward function of rollscope.bundled.rewards, GRPO steps by default)
TASKS = {"calculator": (EXPERIMENT, "calculator_drill", 12), "loophole": ("demo-hack", "mentions_answer", 20)}
CHECK = "exact"  # the loophole demo's rescoring with the honest reward
PROMPTS_PER_STEP, ROLLOUTS = 8, 8
SILENCE_S = 300  # verl printing nothing this long: a rollout engine died mid-sync (the run is stopped)
_STEP_LINE = re.compile(r"step:(\d+) - .*?critic/score/mean:([-\d.e]+)")


def overrides(
    model: Path,
    train: Path,
    val: Path,
    trace_dir: Path,
    steps: int,
    backend: str = "local",
    task: str = "calculator",
    seed: int = 0,
) -> list[str]:
    """verl's keys for the demo: the guide's trace keys, rollscope's loop and tool by path, GRPO.
    ``trace_dir`` is the store's directory, when ``backend`` has the store (``local``); several
    backends are named as one quoted value (``'local,mlflow'``: Hydra reads a bare a,b as a list)."""
    return [
        f"data.train_files={train}",
        f"data.val_files={val}",
        f"data.train_batch_size={PROMPTS_PER_STEP}",
        "data.max_prompt_length=64",
        "data.max_response_length=96",
        "data.shuffle=True",
        f"data.seed={seed}",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={model}",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.optim.lr=3e-4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        f"actor_rollout_ref.rollout.n={ROLLOUTS}",
        "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.prompt_length=64",
        "actor_rollout_ref.rollout.response_length=96",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={bundled.path('calculator_tool.yaml')}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={bundled.path('agent_loops.yaml')}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=rollscope_tool_agent",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        f"actor_rollout_ref.rollout.trace.backend='{backend}'",
        "actor_rollout_ref.rollout.trace.token2text=True",
        *([f"+rollscope.trace.trace_dir={trace_dir}"] if "local" in backend.split(",") else []),
        f"reward.custom_reward_function.path={rewards.__file__}",
        f"reward.custom_reward_function.name={TASKS[task][1]}",
        f"trainer.project_name={PROJECT}",
        f"trainer.experiment_name={TASKS[task][0]}",
        "trainer.logger=['console']",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=1000",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
    ]


def report(store: TraceStore, experiment: str = EXPERIMENT) -> list[tuple[int, float, float, int]]:
    """(step, mean reward, calculator calls per trajectory, trajectories) of the run, from the store."""
    rows = []
    for s in store.steps(experiment=experiment):
        if s.step is None or not s.trajectories:
            continue
        rows.append((s.step, s.mean_reward or 0.0, s.tool_calls / s.trajectories, s.trajectories))
    return rows


def hacks(store: TraceStore, experiment: str) -> dict[int, tuple[float, float, float, int]]:
    """step -> (mean reward, mean honest reward, share of answers naming several numbers: the
    hacks, trajectories), from the stored trajectories and the ``exact`` rescoring."""
    check = store.rescoring(CHECK).rewards
    by_step: dict[int, list] = {}
    for t in store.trajectories(experiment=experiment, limit=None):
        details = t.attributes.get(REWARD_DETAILS) or {}
        honest = check[t.id].reward if t.id in check else None
        by_step.setdefault(t.step, []).append((t.reward or 0.0, honest or 0.0, (details.get("numbers") or 0) > 1))
    return {
        step: (
            sum(r for r, _, _ in rows) / len(rows),
            sum(h for _, h, _ in rows) / len(rows),
            sum(h for _, _, h in rows) / len(rows),
            len(rows),
        )
        for step, rows in sorted(by_step.items())
    }


def show_hack(trace_dir: Path, experiment: str) -> None:
    """Rescore the loophole run with the honest reward (``rollscope rescore``, a process of its
    own), then print what each step did and what insights found."""
    from rollscope.analysis.insights import insights

    honest = "rollscope.bundled.rewards:exact_number"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rollscope.cli",
            "rescore",
            "--dir",
            str(trace_dir),
            "--experiment",
            experiment,
            "--reward",
            honest,
            "--name",
            CHECK,
            "--workers",
            "1",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    store = TraceStore(trace_dir)
    print(
        "\nthe loophole: the reward (rewards.mentions_answer) pays an answer that names the right number anywhere, "
        "so listing candidates pays as knowing does; the honest reward (exact_number) reads the final number only."
    )
    print(f"\n{'step':>4}  {'reward':>6}  {'honest reward':>13}  {'answers listing numbers':>23}")
    for step, (reward, honest, share, _) in hacks(store, experiment).items():
        print(f"{step:>4}  {reward:>6.3f}  {honest:>13.3f}  {share:>23.0%}")
    [run] = insights(store, experiment=experiment, check=CHECK)
    for s in run.onsets():
        print(f"insights: {s.name} from step {s.step}; examples {' '.join(s.examples[:3])}")
    if not run.onsets():
        print("insights: no reward-hacking signal flagged")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rollscope.cpu.demo", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--steps", type=int, help="GRPO steps (default 12; 20 for the loophole, which takes that long to grow)"
    )
    p.add_argument("--dir", default=None, help="trace store (default $ROLLSCOPE_TRACE_DIR or ./rollscope_traces)")
    p.add_argument(
        "--rollout",
        choices=[ROLLOUT_NAME, *ENGINES],
        default=ROLLOUT_NAME,
        help="the rollout server: rollscope's hf_cpu (default), or verl's own vLLM (vLLM's CPU build) or SGLang server",
    )
    p.add_argument("--work", default=".rollscope-demo", help="where the model, data and verl's log go")
    p.add_argument("--seed", type=int, default=0, help="the warm start's and the data order's seed (default 0)")
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        default="calculator",
        help="calculator (default): learn to use the calculator; loophole: a reward that pays any "
        "mention of the answer, which the policy learns to exploit (reward hacking)",
    )
    args = p.parse_args(argv)
    experiment, _, default_steps = TASKS[args.task]
    args.steps = args.steps or default_steps
    work, trace_dir = Path(args.work).resolve(), resolve_dir(args.dir).resolve()
    rollout = [f"{ROLLOUT_KEY}={args.rollout}"]
    try:
        check_overrides(rollout)  # (before the model is built: an engine not installed is one line)
    except UnsupportedOnCPU as exc:
        print(exc, file=sys.stderr)
        return 2
    started = time.monotonic()
    task = demo_task.problems()
    on_engine = args.rollout in ENGINES  # (vLLM's CPU attention takes heads 32 wide)
    loophole = args.task == "loophole"
    model_dir = work / (("model-engine" if on_engine else "model") + ("-loophole" if loophole else ""))
    print(f"building the task ({len(task)} problems) and warm-starting the model in {model_dir} ...", flush=True)
    model = demo_task.build_model(
        model_dir, task, seed=args.seed, sizes=demo_task.ENGINE_MODEL_SIZES if on_engine else None, loophole=loophole
    )
    train, val = demo_task.write_dataset(work / "data", task)
    print(
        f"verl main_ppo on CPU: GRPO, {args.steps} steps x {PROMPTS_PER_STEP} prompts x {ROLLOUTS} rollouts "
        f"(Ray starts first, about a minute); log: {work / 'main_ppo.log'}",
        flush=True,
    )

    def progress(line: str) -> None:
        m = _STEP_LINE.search(line)
        if m:
            print(f"  step {m.group(1)}/{args.steps}: mean reward {float(m.group(2)):.3f}", flush=True)

    try:
        run_main_ppo(
            [*overrides(model, train, val, trace_dir, args.steps, task=args.task, seed=args.seed), *rollout],
            log_path=work / "main_ppo.log",
            cwd=work,
            on_line=progress,
            silence_s=SILENCE_S,
        )
    except TrainerFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    if loophole:
        show_hack(trace_dir, experiment)
        print(
            f"done in {time.monotonic() - started:.0f} s. Open the run:\n"
            f"  rollscope insights --dir {trace_dir} --experiment {experiment} --check {CHECK}\n"
            f"  rollscope ui --dir {trace_dir}"
        )
        return 0
    rows = report(TraceStore(trace_dir))
    print(f"\n{'step':>4}  {'mean reward':>11}  {'calculator calls':>16}  trajectories")
    for step, reward, tools, n in rows:
        print(f"{step:>4}  {reward:>11.3f}  {tools:>16.2f}  {n:>12}")
    if len(rows) >= 10:
        first, last = (sum(r[1] for r in part) / len(part) for part in (rows[:5], rows[-5:]))
        print(f"\nmean reward, first 5 steps {first:.3f} -> last 5 steps {last:.3f} ({last - first:+.3f})")
    print(
        f"done in {time.monotonic() - started:.0f} s. Open the run:\n"
        f"  rollscope traces ls --dir {trace_dir} --experiment {EXPERIMENT}\n"
        f"  rollscope insights --dir {trace_dir}\n  rollscope ui --dir {trace_dir}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
