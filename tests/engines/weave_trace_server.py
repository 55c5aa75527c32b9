"""W&B's own Weave trace server on 127.0.0.1, for tests: weave's ``ClickHouseTraceServer`` (the
engine behind Weave's Traces table) over in-process ClickHouse (chDB), behind weave's
``ExternalTraceServer`` id adapter as W&B runs it, with the HTTP routes the weave 0.54 client calls.

Runs in its own venv (``make install`` builds ``.venv-weave``: weave[trace-server] 0.52.43, chdb;
../shared/notes/weave-real-server.md): ``.venv-weave/bin/python tests/engines/weave_trace_server.py
DATA_DIR`` prints its URL once the migrations ran, and serves until its stdin closes. Every body
is validated by the server's own request model: one it refuses is a 422 naming the field, never
swallowed; the server's own errors go through weave's ``handle_server_exception``.
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import json
import sys
import threading
import traceback
import types
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The 0.52.43 wheel imports this module (only its LLM playground uses it) without shipping it.
_providers = types.ModuleType("weave.trace_server.model_providers.model_providers")
_providers.read_model_to_provider_info_map = lambda *a, **k: {}
_providers.VERTEX_PROVIDER_NAMES = ()
_providers.LLMModelProviderInfo = dict
sys.modules.setdefault("weave.trace_server.model_providers", types.ModuleType("weave.trace_server.model_providers"))
sys.modules["weave.trace_server.model_providers.model_providers"] = _providers

import clickhouse_connect  # noqa: E402
import pydantic  # noqa: E402
from weave.trace_server import trace_server_interface as tsi  # noqa: E402
from weave.trace_server.clickhouse_trace_server_batched import ClickHouseTraceServer  # noqa: E402
from weave.trace_server.external_to_internal_trace_server_adapter import (  # noqa: E402
    ExternalTraceServer,
    IdConverter,
)

# route (after /traces/) -> the server's method; its request model is that method's annotation
ROUTES = {
    "call/start": "call_start",
    "call/end": "call_end",
    "call/read": "call_read",
    "call/update": "call_update",
    "call/upsert_batch": "call_start_batch",
    "calls/delete": "calls_delete",
    "calls/query_stats": "calls_query_stats",
    "calls/stream_query": "calls_query_stream",
    "obj/create": "obj_create",
    "obj/read": "obj_read",
    "objs/query": "objs_query",
    "obj/delete": "obj_delete",
    "table/create": "table_create",
    "table/update": "table_update",
    "table/query": "table_query",
    "table/query_stats": "table_query_stats",
    "refs/read_batch": "refs_read_batch",
    "file/content": "file_content_read",
    "files/query_stats": "files_stats",
    "feedback/create": "feedback_create",
    "feedback/query": "feedback_query",
    "feedback/purge": "feedback_purge",
    "feedback/replace": "feedback_replace",
    "feedback/stats": "feedback_stats",
    "project/stats": "project_stats",
}
AUTHENTICATED = {"feedback_create", "feedback_replace"}
USER = "tester"
# Fields the 0.54 client sends that the 0.52 models forbid, dropped when they change nothing.
NEUTRAL = {"latest_only": False}


class Base64Ids(IdConverter):
    """External ids as W&B's server converts them, reversibly: ``entity/project`` and user ids as
    their base64; a run ``entity/project/run_id`` as ``<its project's base64>:<run_id>``, the form
    the server's validator takes (``wb_run_id_validator``)."""

    def ext_to_int_project_id(self, project_id: str) -> str:
        return base64.b64encode(project_id.encode()).decode()

    def int_to_ext_project_id(self, project_id: str) -> str | None:
        return base64.b64decode(project_id).decode()

    def ext_to_int_run_id(self, run_id: str) -> str:
        project, _, run = run_id.rpartition("/")
        return f"{self.ext_to_int_project_id(project)}:{run}"

    def int_to_ext_run_id(self, run_id: str) -> str:
        project, _, run = run_id.partition(":")
        return f"{self.int_to_ext_project_id(project)}/{run}"

    def ext_to_int_user_id(self, user_id: str) -> str:
        return base64.b64encode(user_id.encode()).decode()

    def int_to_ext_user_id(self, user_id: str) -> str:
        return base64.b64decode(user_id).decode()


class ChdbTraceServer(ClickHouseTraceServer):
    """The production server, its ClickHouse client minted in process on chDB's files in ``path``."""

    def __init__(self, path: str) -> None:
        self._chdb_path = path
        super().__init__(host="chdb", database="weave_test")

    def _mint_client(self) -> Any:
        client = clickhouse_connect.get_client(interface="chdb", path=self._chdb_path)
        self._ensure_database(client)
        client.database = self._database
        return client


def request_model(method: str) -> type[pydantic.BaseModel]:
    return typing.get_type_hints(getattr(tsi.FullTraceServerInterface, method))["req"]


def _plain(result: Any) -> Any:
    return result.model_dump(mode="json") if isinstance(result, pydantic.BaseModel) else result


class Handler(BaseHTTPRequestHandler):
    server_version = "weave-trace-server-0.52.43"
    trace_server: ExternalTraceServer

    def _reply(self, payload: Any, status: int = 200, content_type: str = "application/json") -> None:
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path.endswith("/server_info"):
            return self._reply({"min_required_weave_python_version": "0.0.1", "trace_server_version": "0.52.43"})
        if self.path.endswith("/health"):
            return self._reply({"status": "ok"})
        return self._reply({"detail": f"no route GET {self.path}"}, 404)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0]
        if path.endswith("/graphql"):
            request = json.loads(body)
            return self._reply(_graphql(request.get("query", ""), request.get("variables") or {}))
        if not path.startswith("/traces/"):
            return self._reply({"detail": f"no route POST {path}"}, 404)
        route = path[len("/traces/") :]
        try:
            if route.startswith("v2/") and route.endswith("/calls/complete"):
                entity, project = route.split("/")[1:3]
                batch = json.loads(body)["batch"]
                for item in batch:
                    item.setdefault("project_id", f"{entity}/{project}")
                return self._call("calls_complete", {"batch": batch})
            if route == "file/create":
                return self._call("file_create", _multipart(self.headers, body))
            if route == "feedback/batch/create":
                items = json.loads(body)["batch"]
                made = [_plain(self._run("feedback_create", item)) for item in items]
                return self._reply({"res": made})
            method = ROUTES.get(route)
            if method is None:
                return self._reply({"detail": f"no route POST {path}"}, 404)
            return self._call(method, json.loads(body))
        except pydantic.ValidationError as exc:
            return self._reply({"detail": json.loads(exc.json())}, 422)
        except Exception as exc:  # the server's own errors, as W&B answers them (and in its log)
            from weave.trace_server.errors import handle_server_exception

            traceback.print_exc()

            status, detail = _status_of(handle_server_exception, exc)
            return self._reply({"reason": detail}, status)

    def _run(self, method: str, fields: dict[str, Any]) -> Any:
        for key, value in NEUTRAL.items():
            if fields.get(key, value) == value:
                fields.pop(key, None)
        if method in AUTHENTICATED:  # W&B's HTTP layer sets the caller's user from its credentials
            fields["wb_user_id"] = USER
        return getattr(self.trace_server, method)(request_model(method).model_validate(fields))

    def _call(self, method: str, fields: dict[str, Any]) -> None:
        result = self._run(method, fields)
        if method == "file_content_read":
            return self._reply(result.content, content_type="application/octet-stream")
        if isinstance(result, typing.Iterator):  # a stream: one JSON object a line
            try:
                lines = b"".join(json.dumps(_plain(item)).encode() + b"\n" for item in result)
            finally:  # (chDB serves nothing else on this thread until a stream is closed)
                close = getattr(result, "close", None)
                if close is not None:
                    close()
            return self._reply(lines, content_type="application/jsonl")
        return self._reply(_plain(result))

    def log_message(self, *args: Any) -> None:
        pass


def _status_of(handle: Any, exc: Exception) -> tuple[int, str]:
    try:
        handled = handle(exc)
        return int(handled.get("status_code", 500)), str(handled.get("message", exc))
    except Exception:
        return 500, f"{type(exc).__name__}: {exc}"


def _multipart(headers: Any, body: bytes) -> dict[str, Any]:
    """``file/create``'s form: project_id, the file (its name and content), maybe expected_digest."""
    head = f"Content-Type: {headers['Content-Type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name == "file":
            fields["name"], fields["content"] = part.get_filename(), part.get_payload(decode=True)
        else:
            fields[name] = part.get_payload(decode=True).decode()
    return fields


def _graphql(query: str, variables: dict[str, Any]) -> dict[str, Any]:
    """What ``weave.init`` asks W&B's GraphQL: the viewer, its default entity, the project (any
    project exists; its name is the one asked for)."""
    if "DefaultEntity" in query or "viewer" in query:
        return {"data": {"viewer": {"username": "tester", "defaultEntity": {"name": "ent"}}}}
    name = variables.get("name") or variables.get("project") or "proj"
    if "UpsertModel" in query:
        return {"data": {"upsertModel": {"model": {"name": name, "description": ""}}}}
    return {"data": {"project": {"name": name}}}


def main(data_dir: str) -> None:
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    internal = ChdbTraceServer(str(Path(data_dir) / "chdb"))
    internal._run_migrations()
    Handler.trace_server = ExternalTraceServer(internal, Base64Ids())
    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    print(f"http://127.0.0.1:{http.server_address[1]}", flush=True)
    sys.stdin.read()  # serves until its parent closes our stdin
    http.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
