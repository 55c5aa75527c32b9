"""What verl imports in each of its processes (``VERL_USE_EXTERNAL_MODULES``): the CPU platform, the
``hf_cpu`` rollout named where verl looks rollouts up (its worker-side registry and its replicas'),
vLLM's CPU linear layers keeping their weights for verl's weight sync (``vllm_weights``), and verl's
weight sync into SGLang sending CPU tensors (``sglang_weights``). The
rollout module is named, not imported: verl imports it when it needs it, and a Ray actor process
that imports it first (to build the server) imports verl, and so this plugin, from it.
"""

import importlib

from verl.workers.rollout import base as verl_rollout_base
from verl.workers.rollout.replica import RolloutReplicaRegistry

from rollscope.cpu import ROLLOUT_NAME, platform, sglang_weights, vllm_weights

_ROLLOUT_MODULE = "rollscope.cpu.rollout"


def _replica_class() -> type:
    return importlib.import_module(_ROLLOUT_MODULE).HFCPUReplica


platform.install()
vllm_weights.install()
sglang_weights.install()
verl_rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{_ROLLOUT_MODULE}.HFCPUServerAdapter"
RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica_class)
