"""The trace sidecar: a helper process that shapes trace events and runs the backends able to live
outside the traced process (the local store), so their CPU never competes with the rollout for
the traced process's GIL.

What stays in the traced process is the capture (the hooks) and the packing (``_wire``): about a
sixth of the per-trajectory work. The sidecar holds what it receives in a ``Backlog`` and stores
it on a core nobody else is using (benchmarks/RESULTS.md).

The traced process's end is ``parent`` (the worker the exporter sees), made of ``process`` (the
child started, greeted and ended), ``sender`` (events packed, shipped, numbered; flushes),
``replay_log`` (what was sent until the child's store has it) and ``failover`` (the child's
backends continued here when it dies). ``child`` is the sidecar process, ``protocol`` the frames
between the two. ``pool``: several sidecars for one traced process, a trajectory to each.

The child ignores Ctrl-C (the parent decides when tracing ends), is nobody's child and in a
session of its own (a process manager that ends the traced process with its children leaves it
be), and closes cleanly when the parent disappears (end of its stdin) or stops waiting for it, so
a killed rollout loses at most what was in the pipe. ``lease``: a launcher waits for the sidecars
of the processes it started (``ROLLSCOPE_SIDECAR_LOCK``).
If the sidecar dies, its backends continue inside the traced process with a warning. The local
store loses nothing: it commits the count of events it has stored with the events themselves,
the traced process keeps what it sent until the sidecar reports it stored (``POSITIONS``), and the
store's shard is continued from its committed count with the rest. Other backends are told what
the sidecar had not reported delivered, counted exactly as dropped.
"""

from rollscope.tracing._sidecar.parent import SidecarWorker
from rollscope.tracing._sidecar.pool import SidecarPool
from rollscope.tracing._sidecar.process import SidecarError

__all__ = ["SidecarError", "SidecarPool", "SidecarWorker"]
