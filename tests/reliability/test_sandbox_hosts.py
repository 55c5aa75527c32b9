"""The sandbox's bounds where users run it, each mode on this machine: as it is (root, cgroup v1:
pids and memory cgroups), a cgroup-v2-only host (simulated: a private mount namespace with only
cgroup2 mounted, whose pids and memory controllers are not ours to use, as in a container without
delegation; as root, so the sandbox runs as uid 65534 under rlimits), and an unprivileged user
with 20 processes of its own. In each: two concurrent fork bombs, memory spread over processes,
and escapes, with the audit hook switched off; evidence read on the host (marker files), counts
reported by the attacking code itself."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
ATTACKS = [sys.executable, "-m", "tests.reliability.sandbox_attacks"]
# Unmounts the host's cgroup hierarchies in a private mount namespace and mounts cgroup2 alone.
V2_ONLY = 'umount -R /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && exec "$@"'


@pytest.fixture
def markers():
    """Where escaped code would leave files: open to every uid (the unprivileged user's sandbox
    must be stopped by the sandbox, not by this directory's mode)."""
    path = Path(tempfile.mkdtemp(prefix="rollscope-markers-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def attack(markers: Path, *prefix: str, nobody: bool = False) -> dict:
    argv = [*prefix, *ATTACKS, str(markers), *(["--as-nobody"] if nobody else [])]
    done = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["problem"] is None
    assert result["markers"] == [] and list(markers.iterdir()) == []  # nothing reached the host
    assert "-1" in result["escapes"]["mount"]
    assert result["held_mb"] <= 512  # all the processes together, whatever each could reach
    return result


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("simulating a host's cgroups (a private mount namespace) needs root")


def test_this_host_cgroup_v1(markers):
    needs_root()
    result = attack(markers)
    assert "pids cgroup (v1)" in result["plan"] and "memory cgroup (v1)" in result["plan"]
    assert all(0 < n < 16 for n in result["forked"])


def test_a_cgroup_v2_only_host_without_delegation(markers):
    needs_root()
    result = attack(markers, "unshare", "-m", "--propagation", "private", "sh", "-c", V2_ONLY, "sh")
    assert "RLIMIT_NPROC" in result["plan"] and "RLIMIT_AS 64 MB per process x 8" in result["plan"]
    assert "as host uid 65534" in result["plan"]  # root is exempt from RLIMIT_NPROC: not root inside
    # 8 processes: bubblewrap (outside), its init, the runner, and 5 forks; each bomb its own 5
    assert result["forked"] == [5, 5]


def test_an_unprivileged_user_with_processes_of_its_own(markers):
    needs_root()  # (to become one: the test starts as root and drops to uid 65534)
    result = attack(markers, nobody=True)
    assert result["uid"] == 65534 and "RLIMIT_NPROC" in result["plan"]
    assert result["forked"] == [5, 5]  # the user's 20 other processes are not counted against the sandbox
