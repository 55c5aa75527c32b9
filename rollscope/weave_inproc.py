"""An in-process Weave trace server for the real weave client (no W&B account, no network): a test
double of W&B's server, for tests and benchmarks (the client itself is real).

Used as the anchor in benchmarks: verl's own ``rollout_trace_op`` with the weave backend, recording
through the real ``WeaveClient`` into this server. It stores what it is sent, so the benchmark can
check that every call arrived.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any


class InMemoryTraceServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[Any] = []
        self.ends: list[Any] = []
        self.objects: list[Any] = []

    def _digest(self, payload: Any) -> str:
        return hashlib.sha256(repr(payload).encode()).hexdigest()[:32]

    def call_start(self, req: Any) -> Any:
        from weave.vendor.weave_server_sdk.types.call_start_response import CallStartResponse

        with self.lock:
            self.starts.append(req)
        start = req["start"]
        return CallStartResponse(id=start["id"], trace_id=start["trace_id"])

    def call_end(self, req: Any) -> Any:
        with self.lock:
            self.ends.append(req)
        return None

    def obj_create(self, req: Any) -> Any:
        from weave.vendor.weave_server_sdk.types.object_create_response import ObjectCreateResponse

        with self.lock:
            self.objects.append(req)
        return ObjectCreateResponse(digest=self._digest(req))

    def file_create(self, req: Any) -> Any:
        from weave.vendor.weave_server_sdk.types.file_create_response import FileCreateResponse

        return FileCreateResponse(digest=self._digest(req))

    def table_create(self, req: Any) -> Any:
        from weave.vendor.weave_server_sdk.types.table_create_response import TableCreateResponse

        return TableCreateResponse(digest=self._digest(req), row_digests=[])

    def ensure_project_exists(self, entity: str, project: str) -> Any:
        return None


def make_client(server: InMemoryTraceServer, project: str = "bench") -> Any:
    """A real WeaveClient recording into ``server``, set as weave's global client."""
    from weave.trace.context.weave_client_context import set_weave_client_global
    from weave.trace.weave_client import WeaveClient

    client = WeaveClient("local", project, server, ensure_project_exists=False)
    set_weave_client_global(client)
    return client
