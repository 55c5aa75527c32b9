"""Test doubles of W&B's servers for the real weave client (no W&B account, no network), for tests
and benchmarks: an in-process Weave trace server, and a stand-in of W&B's HTTP endpoints on
127.0.0.1 (``python -m tests.doubles.weave_server`` serves one in its own process and prints its URL).

Used as the anchor in benchmarks: verl's own ``rollout_trace_op`` with the weave backend, recording
through the real ``WeaveClient`` into this server. It stores what it is sent, so the benchmark can
check that every call arrived.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class InMemoryTraceServer:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.starts: list[Any] = []
        self.ends: list[Any] = []
        self.objects: list[Any] = []
        self.feedback: list[Any] = []

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

    def calls_complete(self, req: Any) -> Any:
        """Complete calls (start and end together) as the start and end records they pair."""
        with self.lock:
            for call in req["batch"]:
                self.starts.append({"start": call})
                self.ends.append({"end": call})
        return None

    def feedback_create(self, req: Any) -> Any:
        with self.lock:
            self.feedback.append(req)
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


class WandbStandIn:
    """W&B's HTTP endpoints on 127.0.0.1 as ``weave.init`` and the trace client use them (server_info,
    GraphQL, objects, files, complete-call batches, feedback); keeps the calls it receives. Point the client at
    it with ``environment()``."""

    def __init__(self) -> None:
        self.calls = []
        self.feedback = []  # feedback items as created (weave_ref, feedback_type, payload, ...)
        self.paths = []
        # A server that misbehaves: a batch holding a call this says is bad is refused whole, with
        # a 400, as W&B's server refuses one (the calls in it are lost to a client that drops it).
        self.refuse: Any = None
        self.refused_batches = 0
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, payload: Any, status: int = 200) -> None:
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                stand_in.paths.append(("GET", self.path))
                if self.path == "/stand-in/calls":  # for a stand-in in another process: what it received
                    ids = {c.get("id") for c in stand_in.calls}
                    return self._reply({"calls": len(stand_in.calls), "ids": len(ids)})
                if self.path.endswith("/server_info"):
                    info = {"min_required_weave_python_version": "0.0.1", "trace_server_version": "stand-in"}
                    return self._reply(info)
                return self._reply({})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stand_in.paths.append(("POST", self.path))
                if self.path.endswith("/graphql"):
                    query = json.loads(body).get("query", "")
                    if "DefaultEntity" in query:
                        viewer = {"username": "tester", "defaultEntity": {"name": "ent"}}
                        return self._reply({"data": {"viewer": viewer}})
                    if "UpsertModel" in query:
                        model = {"name": "proj", "description": ""}
                        return self._reply({"data": {"upsertModel": {"model": model}}})
                    return self._reply({"data": {"project": {"name": "proj"}}})
                if "calls/complete" in self.path or "upsert_batch" in self.path:
                    batch = json.loads(body).get("batch", [])
                    if stand_in.refuse is not None and any(stand_in.refuse(call) for call in batch):
                        stand_in.refused_batches += 1
                        return self._reply({"reason": "invalid call in batch"}, 400)
                    stand_in.calls.extend(batch)
                    return self._reply({})
                if self.path.endswith("/feedback/batch/create") or self.path.endswith("/feedback/create"):
                    items = json.loads(body)
                    items = items.get("batch", []) if "batch" in self.path else [items]
                    stand_in.feedback.extend(items)
                    made = [
                        {
                            "id": item.get("id") or f"f{len(stand_in.feedback)}",
                            "created_at": "2026-01-01T00:00:00Z",
                            "payload": item.get("payload", {}),
                            "wb_user_id": "",
                        }
                        for item in items
                    ]
                    return self._reply({"res": made} if "batch" in self.path else made[0])
                if self.path.endswith("/table/create"):
                    return self._reply({"digest": "t" * 32, "row_digests": []})
                return self._reply({"digest": "d" * 32})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def environment(self) -> dict[str, str]:
        return {
            "WANDB_API_KEY": "x" * 40,
            "WANDB_BASE_URL": self.url,
            "WF_TRACE_SERVER_URL": f"{self.url}/traces",
            "WANDB_ERROR_REPORTING": "false",
        }

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    import sys

    stand_in = WandbStandIn()
    print(stand_in.url, flush=True)
    sys.stdin.read()  # serves until its parent closes our stdin
