"""The Python sandbox's kernel boundary, attacked as a hostile model would: every attempt first
switches off the in-interpreter audit hook (as such code can), so what holds is bubblewrap's
namespaces, the host's limits and the host-side reading. Each test asserts on evidence on the host
(a marker file not created, no process left, this process alive, its memory bounded, a secret not
printed), not on the tool's message."""

import asyncio
import os
import resource
import uuid
from pathlib import Path

import pytest

from rollscope.tools.builtin.python_sandbox import PythonSandboxTool, SandboxUnavailable, run_sandboxed
from tests.tools.test_builtin import sandbox_processes_left

pytestmark = pytest.mark.slow

# What sandboxed code can do to the audit hook (its globals and function live in the same interpreter).
GUARD_OFF = (
    "import sys\n"
    "_runner = sys.modules['__main__']\n"
    "_runner._guard.__code__ = (lambda event, args: None).__code__\n"
    "_runner.BLOCKED_EVENTS.clear()\n"
)


def run(code, **limits):
    limits = {"wall_s": 10, "cpu_s": 5, "memory_mb": 512, **limits}
    return asyncio.run(run_sandboxed(GUARD_OFF + code, **limits))


@pytest.fixture
def marker(tmp_path):
    """A host path sandboxed code tries to create; each test asserts it never exists."""
    path = Path("/tmp") / f"rollscope-escape-{uuid.uuid4().hex}"
    yield path
    path.unlink(missing_ok=True)


def no_sandbox_process_left():
    return sandbox_processes_left() == []


def test_the_guard_really_is_off_in_these_tests():
    result = run("import os; print('pid', os.getpid()); os.system('echo shell ran')")
    assert "shell ran" in result["output"]  # the hook would have refused os.system


@pytest.mark.parametrize(
    "attempt",
    [
        "import os; os.system('touch {m}')",
        "import subprocess; subprocess.run(['/bin/sh', '-c', 'touch {m}'])",
        "import _posixsubprocess, os\n"
        "r, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'touch {m}'], [b'/bin/sh'], True, (), None, None,"
        " -1, -1, -1, -1, -1, -1, r, w, False, False, False, None, None, None, -1, None, False)\n"
        "os.waitpid(pid, 0)",
        "open('{m}', 'w').write('x')",
        "import os; os.close(os.open('{m}', os.O_WRONLY | os.O_CREAT))",
        "import os; os.symlink('{m}', 'link'); open('link', 'w').write('x')",
        "import ctypes; ctypes.CDLL(None).system(b'touch {m}')",
    ],
    ids=["os.system", "subprocess", "fork_exec", "open", "os.open", "symlink", "native code"],
)
def test_nothing_reaches_the_host_file_system(attempt, marker):
    result = run(attempt.format(m=marker))
    assert not marker.exists(), f"sandboxed code created {marker} on the host: {result}"


def test_no_pth_file_lands_in_the_python_installation():
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    name = f"rollscope-evil-{uuid.uuid4().hex}.pth"
    code = (
        f"import os, sys\nfor d in [{str(site)!r}, {str(stdlib)!r}, sys.prefix + '/lib']:\n"
        f"    try:\n        os.close(os.open(d + '/{name}', os.O_WRONLY | os.O_CREAT))\n"
        f"    except OSError as e:\n        print(type(e).__name__, e.errno)\n"
    )
    result = run(code)
    assert not (site / name).exists() and not (stdlib / name).exists()
    assert result["output"].count("Error") == 3  # read-only or absent: refused by the kernel


def test_host_secrets_and_files_are_not_there(monkeypatch):
    monkeypatch.setenv("ROLLSCOPE_TEST_SECRET", "hunter2-do-not-leak")
    code = (
        "import os\nfor p in ['/etc/shadow', '/etc/passwd', '/root/.bashrc', '/home']:\n"
        "    try:\n        os.stat(p); print('visible', p)\n    except OSError as e:\n        print('absent', p)\n"
        "for pid in os.listdir('/proc'):\n    if pid.isdigit():\n"
        "        try:\n            print(open(f'/proc/{pid}/environ', 'rb').read())\n        except OSError:\n"
        "            pass\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
        "print(sorted(os.listdir('/root')) if os.path.isdir('/root') else 'no /root')"
    )
    result = run(code)
    out = result["output"]
    assert "visible" not in out and out.count("absent") == 4
    assert "hunter2" not in out and "root:x:0:0" not in out
    assert str(os.getpid()) not in out.splitlines()[-2]  # only the sandbox's own processes are in its /proc
    listing = out.splitlines()[-1]
    assert listing == "no /root" or listing == "['.pyenv']"  # at most the path to the interpreter's prefix


def test_inherited_file_descriptors_are_closed(tmp_path):
    secret = tmp_path / "open-in-host.txt"
    secret.write_text("host data")
    with open(secret) as held:  # an fd of the host process, open while the sandbox starts
        code = (
            "import os\nprint(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
            "for fd in range(3, 64):\n    try:\n        print(fd, os.read(fd, 100))\n    except OSError:\n"
            "        pass\n"
        )
        result = run(code)
        assert held.fileno() >= 3
    assert "host data" not in result["output"]
    assert result["output"].splitlines()[0] in ("[0, 1, 2, 3]", "[0, 1, 2]")  # 3: the listing's own fd


def test_no_write_outside_the_capped_work_directory(marker):
    code = (
        f"import os\nfor p in ['/escape', '/dev/shm/x', '{marker}', '/usr/x']:\n"
        "    try:\n        open(p, 'w'); print('wrote', p)\n    except OSError as e:\n        print('refused', p, e.errno)\n"
    )
    result = run(code)
    assert "wrote" not in result["output"] and result["output"].count("refused") == 4
    assert not marker.exists()


def test_total_disk_is_capped():
    code = (
        "n = 0\ntry:\n    for i in range(40):\n        with open(f'f{i}', 'wb') as f:\n"
        "            f.write(b'x' * (16 * 1024 * 1024 - 1)); n += 1\nexcept OSError as e:\n"
        "    print('stopped after', n, 'files:', e.errno)\n"
    )
    result = run(code, disk_mb=64)
    stopped = int(result["output"].split("stopped after")[1].split()[0])
    assert stopped <= 4  # 64 MiB of tmpfs, not 40 x 16 MiB of host disk


def test_mount_unshare_and_setns_are_refused_by_the_kernel():
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x00020000 | 0x10000000))\n"
        "print('mount', libc.mount(b'none', b'/work', b'tmpfs', 0, None))\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\nprint('setns', libc.setns(fd, 0))\n"
        "print('uid', os.getuid(), 'caps', open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
    )
    out = run(code)["output"]
    assert "unshare -1" in out and "mount -1" in out and "setns -1" in out  # no nested user namespace either
    assert "uid 65534 caps 0000000000000000" in out


def test_signals_reach_no_host_process():
    """Its parent is its pid namespace's init (which ignores signals from inside); the host's
    processes do not exist for it."""
    code = (
        "import os, signal\nprint('parent', os.getppid())\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9)\n"
        f"for pid in (1, {os.getpid()}, {os.getppid()}):\n    try:\n        os.kill(pid, 9); print('killed', pid)\n"
        "    except OSError as e:\n        print('refused', pid, e.errno)\nprint('sandbox went on')"
    )
    result = run(code)
    assert "parent 1" in result["output"] and "sandbox went on" in result["output"]
    assert f"killed {os.getpid()}" not in result["output"] and f"killed {os.getppid()}" not in result["output"]
    assert os.getppid() > 1  # this host process and its parent are alive
    assert no_sandbox_process_left()


def test_a_child_in_a_new_session_does_not_outlive_the_call():
    # the parent waits until the child has exec'd (its copy of the close-on-exec pipe closes then)
    code = (
        "import os\nr, w = os.pipe()\nif os.fork() == 0:\n    os.close(r)\n    os.setsid()\n"
        "    os.execv('/bin/sleep', ['sleep', '987654'])\nos.close(w)\nos.read(r, 1)\nprint('parent done')"
    )
    result = run(code)
    assert "parent done" in result["output"]
    leftovers = []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"987654" in Path(f"/proc/{p}/cmdline").read_bytes():
                leftovers.append(p)
        except OSError:
            pass
    assert leftovers == [] and no_sandbox_process_left()


def test_fork_bomb_is_bounded_and_leaves_nothing():
    code = (
        "import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30); os._exit(0)\n    n += 1\n"
        "print('forked', n)"
    )
    result = run(code, max_procs=16)
    assert int(result["output"].split("forked")[1].split()[0]) < 16
    assert no_sandbox_process_left()


def test_memory_bomb_is_bounded():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run("x = []\nwhile True: x.append(bytearray(50 * 1024 * 1024))", memory_mb=256)
    assert result["status"] in ("error", "killed")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: not the host's memory
    assert no_sandbox_process_left()


def test_sleeping_past_the_timeout_and_an_infinite_loop_are_killed():
    assert run("import time; time.sleep(60)", wall_s=1)["status"] == "timeout"
    assert run("while True: pass", wall_s=30, cpu_s=1)["status"] == "killed"
    assert no_sandbox_process_left()


def test_three_gigabytes_of_output_keep_the_host_bounded():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run(
        "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(3 * 1024):\n    sys.stdout.write(chunk)", wall_s=60
    )
    assert result["status"] == "output_limit" and len(result["output"]) < 5000
    assert "truncated" in result["output"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB
    assert no_sandbox_process_left()


def test_legit_code_behaves_as_before():
    code = (
        "import math, json, collections, os\nopen('data.json', 'w').write(json.dumps({'a': [1, 2, 3]}))\n"
        "d = json.load(open('data.json'))\nprint(math.factorial(10), sum(d['a']), os.listdir('.'))\n"
        "import tempfile\nwith tempfile.NamedTemporaryFile('w') as f:\n    f.write('x')\nprint('ok')"
    )
    result = asyncio.run(run_sandboxed(code, wall_s=10))
    assert result["status"] == "ok", result
    assert "3628800 6 ['main.py', 'tmp', 'data.json']" in result["output"] or "3628800 6" in result["output"]


def test_without_bubblewrap_the_tool_refuses_unless_told_otherwise(monkeypatch):
    from rollscope.tools.builtin import python_sandbox

    monkeypatch.setenv("PATH", "/nonexistent")
    python_sandbox.sandbox_problem.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
            PythonSandboxTool({})
        with pytest.raises(SandboxUnavailable):
            asyncio.run(run_sandboxed("print(1)", wall_s=5))
        trusted = PythonSandboxTool({"allow_unsandboxed": True})
        assert trusted.unsandboxed
    finally:
        python_sandbox.sandbox_problem.cache_clear()
