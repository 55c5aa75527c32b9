"""A stand-in for W&B's HTTP endpoints on 127.0.0.1 (server_info, GraphQL, objects, files, calls): the
real weave client and ``weave.init`` talk to it as to W&B, in this process and in the sidecar."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class WandbStandIn:
    """Answers what weave.init and the trace client ask, keeps the call batches it receives."""

    def __init__(self):
        self.calls = []
        self.paths = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, payload, status=200):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                stand_in.paths.append(("GET", self.path))
                if self.path.endswith("/server_info"):
                    return self._reply({"min_required_weave_python_version": "0.0.1", "trace_server_version": "stand-in"})
                return self._reply({})

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stand_in.paths.append(("POST", self.path))
                if self.path.endswith("/graphql"):
                    query = json.loads(body).get("query", "")
                    if "DefaultEntity" in query:
                        return self._reply({"data": {"viewer": {"username": "tester", "defaultEntity": {"name": "ent"}}}})
                    if "UpsertModel" in query:
                        return self._reply({"data": {"upsertModel": {"model": {"name": "proj", "description": ""}}}})
                    return self._reply({"data": {"project": {"name": "proj"}}})
                if "calls/complete" in self.path or "upsert_batch" in self.path:
                    stand_in.calls.extend(json.loads(body).get("batch", []))
                    return self._reply({})
                if self.path.endswith("/table/create"):
                    return self._reply({"digest": "t" * 32, "row_digests": []})
                return self._reply({"digest": "d" * 32})

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def wandb(monkeypatch):
    from weave.trace.context.weave_client_context import set_weave_client_global

    stand_in = WandbStandIn()
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", stand_in.url)
    monkeypatch.setenv("WF_TRACE_SERVER_URL", f"{stand_in.url}/traces")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    set_weave_client_global(None)
    yield stand_in
    set_weave_client_global(None)
    stand_in.close()
