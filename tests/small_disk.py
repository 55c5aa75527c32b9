"""A disk that fills up, for the tests of what happens then."""

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def small_tmpfs(path, size: str):
    """A tmpfs of ``size`` (``1m``, ``256k``) mounted at ``path``: a disk that fills up. Needs root
    (CI has it); elsewhere the test is skipped with the reason."""
    path.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)
