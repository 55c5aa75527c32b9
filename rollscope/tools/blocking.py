"""Tool calls that never return, bounded: every wait a tool makes costs its own timeout, nothing more.

Two ways a tool can hold a run past its timeout, and what bounds each:

- **A function tool that blocks** (``time.sleep(600)``, a socket with no timeout): it runs on a
  thread, and a thread cannot be stopped. ``in_thread`` runs it on a daemon thread of its own, so
  the call's timeout answers the loop at once, and the thread, left behind, does not hold the
  process when the run ends (asyncio's default executor joins its threads at exit: the command sat
  there after its summary, for good).
- **An async tool that blocks its event loop** (``time.sleep`` in an ``async def``): nothing on
  that loop runs, its own timeout included. ``guard`` registers the call with a watchdog thread;
  a call still running a second past its timeout is interrupted where it blocks, by a signal whose
  handler raises ``ToolBlocked`` in it, only if that call is the one the loop is running (the main
  thread's loop: where ``rollscope run`` runs its loops; elsewhere the guard does nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

GRACE_S = 1.0  # past its timeout, a call the loop's own timeout did not end is taken to block the loop
_TICK_S = 0.25


class ToolBlocked(TimeoutError):
    """Raised inside a tool call that blocked its event loop past its timeout."""


async def in_thread(fn: Callable[..., Any], name: str, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` on a daemon thread of its own (with the caller's context variables), awaited:
    cancelled (a timeout), the caller goes on at once and the thread is left to finish or not.
    (``kwargs`` a dict, not keywords: a tool's parameter may be called ``name`` or ``fn``.)"""
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(result)

    def run() -> None:
        try:
            result, error = context.run(fn, **kwargs), None
        except BaseException as exc:  # (handed to the caller, as to_thread would)
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # (the loop closed meanwhile: nobody is waiting)
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=f"tool {name}", daemon=True).start()
    return await future


class _Watchdog:
    """The calls being guarded (task -> its deadline and tool), and the thread that interrupts one
    that blocks the main thread's loop."""

    def __init__(self) -> None:
        self.calls: dict[asyncio.Task, tuple[float, str]] = {}
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.installed = False

    def install(self) -> bool:
        """The signal handler, once, where it can be (the main thread; SIGALRM unused by others)."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGALRM"):
            return False
        if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
            return False  # (someone else's alarm: left alone)
        signal.signal(signal.SIGALRM, self.interrupt)
        self.installed = True
        self.thread = threading.Thread(target=self.watch, name="rollscope tool watchdog", daemon=True)
        self.thread.start()
        return True

    def watch(self) -> None:
        main = threading.main_thread()
        while main.is_alive():
            time.sleep(_TICK_S)
            now = time.monotonic()
            with self.lock:
                overdue = any(deadline + GRACE_S < now for deadline, _ in self.calls.values())
            if overdue:
                signal.pthread_kill(main.ident, signal.SIGALRM)  # type: ignore[arg-type]

    def interrupt(self, signum: int, frame: Any) -> None:
        """In the main thread: raise in the call running there, if it is one past its deadline."""
        try:
            task = asyncio.current_task()
        except RuntimeError:  # (no loop running here now)
            return
        with self.lock:
            found = self.calls.get(task) if task is not None else None
        if found is not None and found[0] + GRACE_S < time.monotonic():
            with self.lock:
                self.calls.pop(task, None)
            raise ToolBlocked(f"tool '{found[1]}' blocked its event loop past its timeout")


_watchdog = _Watchdog()


@contextlib.contextmanager
def guard(tool: str, timeout_s: float) -> Iterator[None]:
    """While a tool call runs: interrupted where it blocks the main thread's loop past ``timeout_s``."""
    task = asyncio.current_task()
    if task is None or not _watchdog.install():
        yield
        return
    with _watchdog.lock:
        _watchdog.calls[task] = (time.monotonic() + timeout_s, tool)
    try:
        yield
    finally:
        with _watchdog.lock:
            _watchdog.calls.pop(task, None)
