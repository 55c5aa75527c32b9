"""A pure-Python wheel written from a few files (the ``make vllm`` and ``make sglang`` steps install
them with ``pip --no-deps``)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Mapping
from pathlib import Path


def write_wheel(
    out: Path, name: str, version: str, summary: str, files: Mapping[str, str], requires: tuple[str, ...] = ()
) -> Path:
    """Write ``NAME-VERSION-py3-none-any.whl`` into ``out`` holding ``files`` (path in the wheel ->
    text) and its metadata; return its path."""
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {summary}\n"
    contents = {
        **files,
        f"{info}/METADATA": metadata + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: rollscope\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(text.encode())},{len(text.encode())}" for path, text in contents.items()]
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in contents.items():
            archive.writestr(path, text)
    return wheel


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
