"""Hostile code against the Python sandbox, run in a host mode the test chose (this host as is; a
cgroup-v2-only host simulated in a private mount namespace; an unprivileged user), printing what
held as one JSON line. Each attack first switches off the in-interpreter audit hook.

usage: python -m tests.reliability.sandbox_attacks MARKER_DIR [--as-nobody]
"""

import asyncio
import json
import os
import subprocess
import sys

from rollscope.tools.builtin.python_sandbox import run_sandboxed, sandbox_problem
from rollscope.tools.builtin.sandbox_bounds import plan

GUARD_OFF = (
    "import sys\n"
    "_runner = sys.modules['__main__']\n"
    "_runner._guard.__code__ = (lambda event, args: None).__code__\n"
    "_runner.BLOCKED_EVENTS.clear()\n"
)
FORK_BOMB = """
import os, time
n = 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(4)
        os._exit(0)
    n += 1
print('forked', n)
"""
# Memory spread over processes: each child holds what its address space allows, all at once.
MEMORY_SPREAD = """
import os, time
r, w = os.pipe()
for i in range(15):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        held, blocks = 0, []
        try:
            while True:
                blocks.append(b'x' * (8 << 20))
                held += 8
        except MemoryError:
            pass
        os.write(w, f'{held}\\n'.encode())
        time.sleep(4)
        os._exit(0)
time.sleep(2.5)
os.close(w)
data = b''
while chunk := os.read(r, 65536):
    data += chunk
print('held', sum(int(x) for x in data.split()))
"""
ESCAPES = {
    "os.system": "import os; os.system('touch {m}/system')",
    "subprocess": "import subprocess; subprocess.run(['/bin/sh', '-c', 'touch {m}/subprocess'])",
    "open": "open('{m}/open', 'w').write('x')",
    "mount": "import ctypes; print(ctypes.CDLL(None).mount(b'none', b'{m}', b'tmpfs', 0, None))",
    "kill host pid 1": "import os; os.kill(1, 9)",
}


async def main(markers: str) -> dict:
    limits = {"wall_s": 20, "cpu_s": 5, "memory_mb": 512, "max_procs": 16}
    out = {"uid": os.getuid(), "problem": sandbox_problem(), "plan": plan(16, 512).describe()}
    bombs = await asyncio.gather(*(run_sandboxed(GUARD_OFF + FORK_BOMB, **limits) for _ in range(2)))
    out["forked"] = [int(b["output"].split("forked")[1].split()[0]) for b in bombs]
    spread = await run_sandboxed(GUARD_OFF + MEMORY_SPREAD, **limits)
    out["held_mb"] = int(spread["output"].split("held")[1].split()[0])
    out["escapes"] = {}
    for name, code in ESCAPES.items():
        result = await run_sandboxed(GUARD_OFF + code.format(m=markers), **limits)
        out["escapes"][name] = result["output"][-200:]
    out["markers"] = sorted(os.listdir(markers))
    return out


if __name__ == "__main__":
    markers = sys.argv[1]
    others: list[subprocess.Popen] = []
    if "--as-nobody" in sys.argv:
        # An unprivileged user with many processes of its own (a training job's workers): the
        # sandbox's process bound must count only the sandbox's. (Not holding this process's
        # output pipe: the test reads it to its end.)
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
        others = [
            subprocess.Popen(
                ["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(20)
        ]
    result = asyncio.run(main(markers))
    assert all(p.poll() is None for p in others), "the user's own processes died during the attack"
    for p in others:
        p.kill()
    print(json.dumps(result), flush=True)
