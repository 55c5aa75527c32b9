"""The wheel ``make sglang`` installs beside SGLang (``rollscope.cpu.sglang`` says why):
``sgl_kernel`` (the stub), ``_rollscope_sglang_cpu`` (``startup``), the import hooks it goes through and the
``.pth`` line that runs it.

    python -m rollscope.cpu.sglang.dist OUT_DIR   # prints the wheel's path
"""

from __future__ import annotations

import sys
from pathlib import Path

from rollscope import _import_hooks
from rollscope.cpu.wheel import write_wheel

NAME, VERSION = "rollscope_sglang_cpu", "1.0"
STARTUP = "_rollscope_sglang_cpu"
HOOKS = "_rollscope_import_hooks"  # rollscope._import_hooks, which the start-up fixes go through
_HERE = Path(__file__).parent


def wheel(out: Path) -> Path:
    """Write the wheel into ``out``; return its path."""
    files = {
        "sgl_kernel/__init__.py": (_HERE / "sgl_kernel_stub.py").read_text(),
        f"{STARTUP}.py": (_HERE / "startup.py").read_text(),
        f"{HOOKS}.py": Path(_import_hooks.__file__).read_text(),
        f"{NAME}.pth": f"import {STARTUP}; {STARTUP}.install()\n",
    }
    return write_wheel(out, NAME, VERSION, "sgl_kernel's stand-in and two fixes for SGLang on a CPU (rollscope)", files)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m rollscope.cpu.sglang.dist OUT_DIR")
    print(wheel(Path(sys.argv[1])))
