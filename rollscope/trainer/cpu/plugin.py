"""What verl imports in each of its processes (``VERL_USE_EXTERNAL_MODULES``): the CPU platform and
the ``hf_cpu`` rollout, installed where verl looks them up."""

from rollscope.trainer.cpu import platform, rollout

platform.install()
rollout.install()
