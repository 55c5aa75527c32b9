"""A writer process for multi-process tests: real interpreter, real tracer, real store.

usage: python _trace_worker.py MODE TRACE_DIR WORKER_ID [options]
  write   N M            N trajectories of M spans each, then flush and exit
  forever M PROGRESS     trajectories of M spans until killed; after each flush, append the
                         number of trajectories flushed so far to PROGRESS
  sample  K SEED STEPS   GRPO batches (8 samples x 4 rollouts) in a worker-specific order,
                         with max_samples_per_step_per_worker=K
"""

import os
import random
import sys

from rollscope import tracing


def trajectory(step, sample_index, rollout_n, m, worker):
    with tracing.rollout_trace_attr(step=step, sample_index=sample_index, rollout_n=rollout_n):
        for j in range(m):
            with tracing.trace_span(f"turn{j}", kind="llm", inputs={"worker": worker, "j": j}) as s:
                s.outputs = {"text": f"w{worker} s{sample_index} j{j}"}


def main():
    mode, trace_dir, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[4:]
    if mode == "write":
        n, m = int(args[0]), int(args[1])
        tracing.init_tracing(trace_dir=trace_dir, experiment=f"w{worker}")
        for i in range(n):
            trajectory(0, worker * 1_000_000 + i, 0, m, worker)
        assert tracing.flush_tracing(120)
    elif mode == "forever":
        m, progress = int(args[0]), args[1]
        tracing.init_tracing(trace_dir=trace_dir, experiment=f"w{worker}")
        done = 0
        while True:
            for _ in range(25):
                trajectory(1, done, 0, m, worker)
                done += 1
            assert tracing.flush_tracing(60)
            with open(progress, "a") as f:
                f.write(f"{done}\n")
                f.flush()
                os.fsync(f.fileno())
    elif mode == "sample":
        k, seed, steps = int(args[0]), int(args[1]), int(args[2])
        tracing.init_tracing(
            trace_dir=trace_dir, experiment=f"w{worker}", max_samples_per_step_per_worker=k, sample_seed=seed
        )
        rng = random.Random(worker * 7919)  # each worker sees the batch in its own order
        for step in range(steps):
            batch = [(s, r) for s in range(100 + step, 108 + step) for r in range(4)]
            rng.shuffle(batch)
            tracing.get_tracer().sampler.plan(step, [s for s, _ in batch])
            for s, r in batch:
                trajectory(step, s, r, 1, worker)
        assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()


if __name__ == "__main__":
    main()
