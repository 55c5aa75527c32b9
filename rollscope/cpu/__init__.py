"""verl and its engines without a GPU: the CPU harness behind ``make demo-train`` and the trainer tests.

verl 0.9.1 on CPU, registered through verl's plugin points (nothing in verl is edited).

``plugin`` is the module verl imports in every process it starts (driver, trainer workers,
agent-loop workers, the rollout server) when ``VERL_USE_EXTERNAL_MODULES=rollscope.cpu.plugin``
is set (``rollscope.cpu.launch.cpu_environment`` sets it with the rest). It installs:

- ``platform``: the ``cpu`` platform (``VERL_PLATFORM=cpu``): gloo for collectives, ``"cpu"`` as
  the device, stand-ins for the CUDA memory and RNG calls verl makes;
- ``rollout``: the ``hf_cpu`` rollout (``actor_rollout_ref.rollout.name=hf_cpu``): a Ray actor
  that generates with Hugging Face ``generate`` and takes the actor's weights at every sync;
- ``vllm_weights``: for verl's own vLLM rollout on vLLM's CPU build (``rollout.name=vllm``), the
  linear layers keep their weights so that verl's weight sync can load new ones;
- ``sglang_weights``: for verl's own SGLang rollout (``rollout.name=sglang``), verl's weight sync
  sends CPU tensors through shared memory instead of failing in SGLang's CUDA-only pickling.

``vllm_dist`` writes the ``vllm`` distribution name an install of vLLM's CPU build lacks (``make vllm``);
``sglang`` holds what an install of SGLang needs beside it on a CPU (``make sglang``).

``launch`` builds the environment and overrides that run verl's own ``main_ppo`` with the plugin
(``run_main_ppo``); ``demo`` (with ``demo_task``) is ``make demo-train``. What every training job
runs, on any hardware, is apart: ``rollscope.trainer``.

Importing this package or its modules changes nothing; only the plugin does.
"""

ROLLOUT_NAME = "hf_cpu"


class UnsupportedOnCPU(ValueError):
    """A setting verl on CPU cannot honour, named with what to set instead."""
