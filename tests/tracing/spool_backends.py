"""Backends for the spool's tests, importable by module path (a subprocess runs them too).

``LedgerBackend`` stands for a remote destination: what it sends becomes visible only at its flush
(as a network client's batch), and it appends every delivered trajectory id to a file, so a test
sees exactly what arrived, across processes. ``ROLLSCOPE_TEST_HANG_AFTER`` makes its flush hang
for good once that many trajectories were delivered (a server that stops answering);
``ROLLSCOPE_TEST_LEDGER_GATE`` (a path) makes it hold every flush until that file exists (a server
that answers only when the test lets it, whichever process the backend runs in).
"""

from __future__ import annotations

import os
import threading
import time

from rollscope.tracing.backends.base import Delivery
from rollscope.tracing.backends.buffered import TrajectoryBackend
from rollscope.tracing.backends.registry import register_backend


class LedgerBackend(TrajectoryBackend):
    name = "ledger"
    options = frozenset({"ledger_path"})
    gate = threading.Event()  # set: sends; cleared: every flush waits (a slow server)
    # 100 events per batch: a small client queue, so a test's burst spans many batches
    delivery = Delivery(whole_trajectories=True, batch=100)

    def __init__(self, *, project=None, experiment=None, ledger_path: str) -> None:
        super().__init__(project=project, experiment=experiment)
        self.path = ledger_path
        self.batch: list[str] = []
        self.spans: dict[str, list[str]] = {}
        self.hang_after = int(os.environ.get("ROLLSCOPE_TEST_HANG_AFTER", "0")) or None
        self.gate_path = os.environ.get("ROLLSCOPE_TEST_LEDGER_GATE")

    def write(self, trajectory, spans) -> None:
        self.batch.append(trajectory.id)
        self.spans[trajectory.id] = [s.name for s in spans]

    def flush(self) -> None:
        self.gate.wait()
        while self.gate_path is not None and not os.path.exists(self.gate_path):
            time.sleep(0.05)
        if self.hang_after is not None and self._delivered() >= self.hang_after:
            open(f"{self.path}.hung", "w").close()  # (for the test: what was delivered is confirmed)
            threading.Event().wait()  # the server stopped answering
        with open(self.path, "a") as f:
            f.writelines(f"{i}\n" for i in self.batch)
        self.batch = []

    def destination(self) -> str:
        return f"ledger {self.path}"

    def _delivered(self) -> int:
        try:
            with open(self.path) as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0


LedgerBackend.gate.set()
register_backend(LedgerBackend.name, LedgerBackend)


class SidecarLedgerBackend(LedgerBackend):
    """The ledger in the trace sidecar, as the remote backends run (gated by the file only)."""

    name = "sidecar-ledger"
    delivery = Delivery(whole_trajectories=True, batch=100, out_of_process=True)


register_backend(SidecarLedgerBackend.name, SidecarLedgerBackend)
