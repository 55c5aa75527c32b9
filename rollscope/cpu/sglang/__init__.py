"""SGLang on a CPU without SGLang's CPU kernels: what an install of SGLang needs beside it here.

SGLang's CPU kernels (``sgl_kernel``'s ``torch.ops.sgl_kernel.*_cpu``) are built only for CPUs with
AMX, and SGLang calls them only where AMX is present (``cpu_has_amx_support``); elsewhere it runs
its torch-native code. No wheel on PyPI holds them (``sglang-kernel`` and ``sgl-kernel`` link CUDA).
But SGLang imports ``sgl_kernel`` and ``torchvision`` unconditionally, at module level. So ``make
sglang`` installs a wheel (``dist``) holding:

- ``sgl_kernel``: ``sgl_kernel_stub``, a module whose every function raises ``NotImplementedError``
  naming itself, so that a path that does need a kernel says so instead of computing garbage;
- ``startup``, run at interpreter start-up (a ``.pth`` line), two fixes applied when their modules
  are imported: torchvision (PyPI's is a CUDA build, whose failing operator registrations fail
  ``import torchvision``, which SGLang's utilities do) and SGLang's xgrammar backend (which refuses
  to mask CPU logits, so that tool calls held to their schemas killed SGLang's scheduler).

Those two modules are never imported by rollscope: they are copied into the wheel as top-level
modules, so that every process in the venv (SGLang's scheduler and detokenizer among them) has them.
What is here is what running SGLang on the CPU takes besides: its own switches, the same for its
server (``SERVER_ARGUMENTS``) and for verl's SGLang rollout (``ENGINE_KWARGS``).
"""

# SGLang's CPU path (``is_cpu()``) is chosen by this variable, not by ``--device cpu`` alone.
ENVIRONMENT = {"SGLANG_USE_CPU_ENGINE": "1"}
# flashinfer (SGLang's default attention) is CUDA-only; the overlap scheduler runs a CUDA stream.
SERVER_ARGUMENTS = ("--device", "cpu", "--attention-backend", "torch_native", "--disable-overlap-schedule")
# The same for verl's ``actor_rollout_ref.rollout.engine_kwargs.sglang``, and no memory saver (it
# pauses GPU memory through CUDA's virtual memory API).
ENGINE_KWARGS = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "disable_overlap_schedule": True,
    "enable_memory_saver": False,
}
