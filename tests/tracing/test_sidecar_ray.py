"""The trace sidecar under Ray, as verl runs it: Ray may end a worker with the worker's process
group (``ray.kill``; a job's actors at its end) before the worker closes tracing. The sidecar is
nobody's child and in a session of its own: it goes on, delivers what it was sent, and lets go of
the launcher's lock (``ROLLSCOPE_SIDECAR_LOCK``) when it is done."""

import os
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollscope.store import TraceStore
from rollscope.tracing._sidecar import lease

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TRAJECTORIES = 200

# A Ray driver: one actor traces into the local store and the ledger (tests.tracing.spool_backends,
# a remote destination held by the test's gate), waits until the local store holds every
# trajectory (its sidecar has been sent everything) and returns; the driver kills the actor.
DRIVER = textwrap.dedent("""
    import os, sys, time
    import ray

    trace_dir, ledger, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

    @ray.remote
    class Rollouts:
        def run(self):
            import tests.tracing.spool_backends  # noqa: F401  (registers the sidecar's ledger)
            from rollscope import tracing
            from rollscope.store import TraceStore

            tracing.init_tracing(backend="local,sidecar-ledger", trace_dir=trace_dir, ledger_path=ledger)
            for i in range(n):
                with tracing.rollout_trace_attr(step=1, sample_index=i, rollout_n=0):
                    with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_ids": [1, 2, 3]}) as s:
                        s.outputs = {"token_ids": [4, 5]}
                    tracing.set_reward(1.0)
            deadline = time.monotonic() + 120
            while TraceStore(trace_dir).count(status="ok") < n and time.monotonic() < deadline:
                time.sleep(0.05)
            return os.getpid()

    actor = Rollouts.remote()
    print(ray.get(actor.run.remote()), flush=True)
    ray.kill(actor)
    ray.shutdown()
""")


def test_a_worker_ended_by_ray_leaves_its_sidecar_to_deliver_what_it_was_sent(tmp_path):
    trace_dir, ledger, gate, lock = (str(tmp_path / n) for n in ("traces", "ledger", "gate", "sidecars.lock"))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        lease.ENV: lock,
        "ROLLSCOPE_TEST_LEDGER_GATE": gate,
        "RAY_ADDRESS": "",
        "WANDB_ERROR_REPORTING": "false",
    }
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, trace_dir, ledger, str(TRAJECTORIES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ended(int(proc.stdout.split()[-1]), 120)  # Ray ended the worker (and the worker's group)
    with TraceStore(trace_dir) as store:
        assert store.count(status="ok") == TRAJECTORIES
    # The worker is gone; its sidecar is not: the ledger's server has not answered yet.
    assert not lease.wait_released(lock, 0)
    assert not Path(ledger).exists()
    Path(gate).touch()
    assert lease.wait_released(lock, 120)
    delivered = Path(ledger).read_text().split()
    assert len(delivered) == len(set(delivered)) == TRAJECTORIES


def ended(pid, timeout):
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)
