"""verl's ``main_ppo`` on SGLang when SGLang refuses a weight sync (``sglang_sync_refused``, a test
double: the second sync sends a weight of the wrong shape, which SGLang's loader refuses): the run
stops by itself, ``run_main_ppo`` raises with SGLang's error named in its first line, and the
trajectories of the step before are in the store, complete."""

import os
from pathlib import Path

import pytest

from rollscope.cpu.launch import TrainerFailed
from rollscope.store import TraceStore
from tests.trainer.main_ppo import PROMPTS, ROLLOUTS, train

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def refused(tmp_path_factory, engine_model):
    root = tmp_path_factory.mktemp("main_ppo_sglang_refused")
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": "tests.trainer.sglang_sync_refused",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with pytest.raises(TrainerFailed) as caught:
        train(root, engine_model, "actor_rollout_ref.rollout.name=sglang", env=env)
    return root, str(caught.value)


def test_the_run_stops_naming_sglangs_refusal_in_its_first_line(refused):
    _, message = refused
    first = message.splitlines()[0]
    assert first.startswith(
        "verl's main_ppo exited with 1; the first error logged: AssertionError: Attempted to load "
        "weight (torch.Size([63])) into parameter (torch.Size([64]))"
    ), message[-3000:]


def test_the_step_before_the_refused_sync_is_stored_complete(refused):
    root, _ = refused
    with TraceStore(root / "traces") as store:
        stored = store.trajectories(limit=None)
    assert [t.step for t in stored].count(1) == PROMPTS * ROLLOUTS
    assert all(t.status == "ok" for t in stored if t.step == 1)
