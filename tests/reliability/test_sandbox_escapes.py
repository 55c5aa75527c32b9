"""The Python sandbox tool against escape attempts beyond tests/tools/test_builtin.py: each one is
refused or contained, and nothing is left running."""

import asyncio
import os

import pytest

from rollscope.tools.builtin.python_sandbox import run_sandboxed
from tests.tools.test_builtin import sandbox_processes_left

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("code", "refused"),
    [
        # files outside the working directory, by every route
        ("print(open('/etc/hostname').read())", "access to /etc/hostname is not allowed"),
        ("open('../escape.txt', 'w')", "is not allowed"),
        ("print(open('/proc/self/environ').read())", "not allowed"),
        ("import os; print(os.listdir('/root'))", "not allowed"),
        ("import os; fd = os.open('/etc/passwd', os.O_RDONLY); print(os.read(fd, 100))", "not allowed"),
        ("import os; os.symlink('/etc/passwd', 'p'); print(open('p').read())", "not allowed"),
        ("import pathlib; print(pathlib.Path('/etc/shadow').read_text())", "not allowed"),
        ("import os; os.remove('/tmp/anything')", "not allowed"),
        ("import shutil; shutil.rmtree('/tmp')", "not allowed"),
        # network
        ("import socket; socket.socket()", "socket.__new__ is not allowed"),
        ("import socket; socket.create_connection(('127.0.0.1', 22), timeout=1)", "not allowed"),
        ("import urllib.request; urllib.request.urlopen('http://127.0.0.1:1/')", "not allowed"),
        # processes: fork bombs, spawning, native code
        ("import os; os.fork()", "os.fork is not allowed"),
        ("import subprocess; subprocess.run(['true'])", "not allowed"),
        ("import os\nwhile True: os.fork()", "not allowed"),
        ("import os; os.posix_spawn('/bin/sleep', ['sleep', '60'], {})", "not allowed"),
        ("import os; os.system('sleep 60 &')", "not allowed"),
        ("import multiprocessing as m; m.Process(target=print).start()", "not allowed"),
        ("import ctypes; ctypes.CDLL(None).fork()", "not allowed"),
        # memory
        ("x = bytearray(3 * 1024 ** 3)", "MemoryError"),
    ],
)
def test_escape_is_refused(code, refused):
    result = asyncio.run(run_sandboxed(code, wall_s=10, cpu_s=3, memory_mb=256))
    assert result["status"] in ("error", "killed") and refused in result["output"], result


def test_memory_and_time_limits_and_nothing_left_behind():
    hog = asyncio.run(
        run_sandboxed("x = []\nwhile True: x.append(' ' * 10_000_000)", wall_s=10, cpu_s=5, memory_mb=256)
    )
    assert hog["status"] == "error" and "MemoryError" in hog["output"]
    slow = asyncio.run(run_sandboxed("import time\nwhile True: time.sleep(1)", wall_s=1))
    assert slow["status"] == "timeout"
    assert sandbox_processes_left() == []


def test_working_directory_is_private_and_removed():
    code = "import os; open('note.txt', 'w').write('x'); print(os.getcwd()); print(sorted(os.listdir('.')))"
    result = asyncio.run(run_sandboxed(code, wall_s=10))
    cwd, listing = result["output"].splitlines()[:2]
    assert result["status"] == "ok" and "note.txt" in listing
    assert not os.path.exists(os.path.join(cwd, "note.txt"))  # a tmpfs of the sandbox's own, gone with it
