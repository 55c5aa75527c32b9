"""verl's weight sync into SGLang from CPU tensors (verl's SGLang rollout on the CPU).

At every step verl's ``ServerAdapter.update_weights`` hands the actor's weights, bucket by bucket,
to SGLang's ``update_weights``, which pickles them with torch's multiprocessing reductions for
SGLang's scheduler to open in place (CUDA IPC on a GPU). SGLang patches torch's tensor reduction to
swap a CUDA device index for the device's UUID (``patch_torch._reduce_tensor_modified``), and the
patch indexes an argument only CUDA tensors have: a CPU tensor fails with ``IndexError`` before
anything is sent. Here CPU tensors go through torch's own reduction, into shared memory that the
scheduler opens by name (the ``file_system`` strategy: the default one passes a file descriptor
over a socket authenticated with the sender's multiprocessing key, which SGLang's scheduler, not a
child of verl's worker, does not hold). CUDA tensors go through SGLang's patch as before.

``install`` (called by the CPU plugin in every verl process) applies it where SGLang's patch module
is imported — verl's rollout worker, before its first sync — and makes no other process import SGLang.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from rollscope._import_hooks import after_import

PATCH_TORCH = "sglang.srt.utils.patch_torch"


def cpu_tensors_by_torch(patch_torch: ModuleType) -> None:
    """Make SGLang's tensor reduction leave CPU tensors to torch's, shared by file name."""
    import torch.multiprocessing
    from torch.multiprocessing import reductions

    sglangs = patch_torch._reduce_tensor_modified

    def reduce_tensor(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if tensor.is_cuda:
            return sglangs(tensor, *args, **kwargs)
        return reductions._reduce_tensor_original(tensor, *args, **kwargs)

    patch_torch._reduce_tensor_modified = reduce_tensor
    torch.multiprocessing.set_sharing_strategy("file_system")


def install() -> None:
    """Apply it where SGLang's patch module is loaded, now or later (once per process)."""
    after_import(PATCH_TORCH, cpu_tensors_by_torch)
