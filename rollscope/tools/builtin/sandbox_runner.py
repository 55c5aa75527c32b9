"""Runs inside the sandbox child process: install the guard, then run the user's code.

Started as ``python -I -S sandbox_runner.py WORKDIR [NPROC]`` (isolated mode, no site-packages)
with the resource limits already applied by the parent, except ``RLIMIT_NPROC`` when given: set
here, inside the sandbox's user namespace, where the kernel counts only the sandbox's processes
(``sandbox_bounds``), before the code runs; it cannot raise it again. The audit hook refuses what the sandbox promises
the code cannot do, even where the OS layer (network namespace) is not available: sockets,
new processes, native code loading, and opening files outside the working directory and the
standard library.
"""

import os
import resource
import sys
import traceback

WORKDIR = os.path.realpath(sys.argv[1])
ALLOWED_READ = tuple(
    os.path.realpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.__file__)}
)
BLOCKED_EVENTS = {
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "subprocess.Popen",
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.posix_spawn",
    "os.spawn",
    "os.exec",
    "os.kill",
    "os.killpg",
    "ctypes.dlopen",
    "ctypes.cdata",
    "ctypes.call_function",
    "sys.addaudithook",
    "os.chdir",
    "os.chroot",
}


# Other file-system events whose path arguments are checked like open's (reading: listing a directory;
# writing: anything that changes the file system).
READ_EVENTS = {"os.listdir", "os.scandir"}
WRITE_EVENTS = {
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.utime",
    "os.link",
    "os.symlink",
    "shutil.copyfile",
    "shutil.copymode",
    "shutil.copystat",
    "shutil.rmtree",
    "shutil.move",
    "shutil.make_archive",
    "shutil.unpack_archive",
}


class SandboxViolation(PermissionError):
    pass


def _inside(path: str, roots: tuple) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _guard(event, args):
    if event in BLOCKED_EVENTS:
        raise SandboxViolation(f"sandbox: {event} is not allowed")
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        _check_path(args[0], writing=any(c in mode for c in "wax+"))
    elif event in READ_EVENTS or event in WRITE_EVENTS:
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)):
                _check_path(arg, writing=event in WRITE_EVENTS)


def _check_path(arg, writing):
    path = os.path.realpath(os.fsdecode(arg))
    if _inside(path, (WORKDIR,)) or (not writing and _inside(path, ALLOWED_READ)):
        return
    raise SandboxViolation(f"sandbox: access to {path} is not allowed")


def main():
    if len(sys.argv) > 2:
        nproc = int(sys.argv[2])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    with open(os.path.join(WORKDIR, "main.py")) as f:
        source = f.read()
    code = compile(source, "main.py", "exec")
    sys.path[:] = [p for p in sys.path if _inside(os.path.realpath(p), ALLOWED_READ)]
    sys.addaudithook(_guard)
    try:
        exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit:
        raise
    except BaseException as exc:  # show the model its own frames only, not the runner's
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "main.py"]
        lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
        sys.stderr.write("Traceback (most recent call last):\n" + "".join(lines))
        sys.exit(1)


if __name__ == "__main__":
    main()
