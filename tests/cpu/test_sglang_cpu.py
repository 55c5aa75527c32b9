"""What ``make sglang`` installs beside SGLang (rollscope.cpu.sglang), checked in a fresh
interpreter of the project's venv: the ``sgl_kernel`` stand-in is this checkout's, every kernel of it
says it is missing instead of computing, and torchvision (PyPI's CUDA build) imports through the
start-up fix; SGLang's server itself runs in tests/llm/test_sglang_server.py."""

import subprocess
import sys
import textwrap
from pathlib import Path

from rollscope.cpu import sglang

HERE = Path(sglang.__file__).parent


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)


def test_the_installed_sgl_kernel_is_the_stand_in_and_its_kernels_say_they_are_missing():
    result = run_python("""
        import sgl_kernel, sgl_kernel.elementwise
        print(sgl_kernel.__file__)
        for kernel in (sgl_kernel.silu_and_mul, sgl_kernel.elementwise.rmsnorm):
            try:
                kernel(1)
            except NotImplementedError as exc:
                print(exc)
        try:
            import sgl_kernel.scalar_type
        except ImportError:
            print("scalar_type refused")
    """)
    assert result.returncode == 0, result.stderr
    path, silu, rmsnorm, refused = result.stdout.splitlines()
    assert Path(path).read_text() == (HERE / "sgl_kernel_stub.py").read_text(), "stale: run `make sglang`"
    assert silu.startswith("sgl_kernel.silu_and_mul: SGLang's kernel is not on this CPU")
    assert rmsnorm.startswith("sgl_kernel.elementwise.rmsnorm: ")
    assert refused == "scalar_type refused"


def test_torchvision_imports_without_its_operators_and_sglang_masks_cpu_logits():
    result = run_python("""
        import torch, torchvision.io, torchvision.transforms
        from torchvision.extension import _has_ops
        from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend
        logits = torch.zeros(1, 40)
        mask = torch.tensor([[0b101]], dtype=torch.int32).expand(1, 2).contiguous()  # tokens 0 and 2 allowed
        XGrammarGrammarBackend.apply_vocab_mask(logits=logits, vocab_mask=mask)
        print(_has_ops(), (logits[0] == 0).nonzero().flatten().tolist())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "[0,", "2,", "32,", "34]"]
