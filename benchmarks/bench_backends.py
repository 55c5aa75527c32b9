"""Each trace backend side by side with the local store, in one run: the caller's cost per span
(what a rollout pays) and end-to-end throughput (spans per second until the backend confirmed).

  local   the embedded store
  weave   the real weave client into an in-process trace server (tests.doubles.weave_server)
  mlflow  a real SQLite MLflow tracking store
  otel    OTLP http/protobuf to a local receiver (a thread here that reads and discards)

Trajectories of 5 spans (agent run, 2 LLM turns, a tool call, a reward span) with realistic payloads,
recorded through the tracing API; lossy queues sized so nothing is dropped (what is measured is
the backend, not the drop policy). Each backend in a fresh interpreter.

usage: python benchmarks/bench_backends.py [--trajectories 2000] [--mlflow-trajectories 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its test doubles (tests/doubles)

from fresh import run_fresh

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
SPANS = 5


def _receiver() -> str:
    class Discard(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Discard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1/traces"


def one(backend: str, n: int) -> dict:
    from rollscope import tracing

    tmp = tempfile.mkdtemp()
    options: dict = {"trace_dir": f"{tmp}/traces"} if backend == "local" else {}
    client = None
    if backend == "weave":
        from tests.doubles.weave_server import InMemoryTraceServer, make_client

        client = make_client(InMemoryTraceServer(), project="bench")
    elif backend == "mlflow":
        options.update(mlflow_tracking_uri=f"sqlite:///{tmp}/mlflow.db", mlflow_experiment="bench")
    elif backend == "otel":
        options.update(otel_endpoint=_receiver())
    tracing.init_tracing(backend=backend, project="bench", experiment="backends", max_queue=n * (SPANS + 3), **options)
    prompt = list(range(300))
    t0 = time.perf_counter()
    for i in range(n):
        with tracing.rollout_trace_attr(step=i // 64, sample_index=i % 64, rollout_n=0, name="tool_agent"):
            with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": "What is 17 * 23?"}):
                for _ in range(2):
                    with tracing.trace_span(
                        "llm.generate", kind="llm", inputs={"prompt_ids": prompt}, **{"gen_ai.usage.output_tokens": 30}
                    ) as s:
                        s.outputs = {"token_ids": list(range(30)), "response_text": "x" * 120}
                with tracing.trace_span("calculator", kind="tool", inputs={"expression": "17*23"}) as s:
                    s.outputs = {"text": "391"}
            with tracing.trace_span("reward", kind="reward") as s:
                s.outputs = 1.0
    caller = time.perf_counter() - t0
    assert tracing.flush_tracing(1800)
    if client is not None:
        client.flush()
    total = time.perf_counter() - t0
    stats = tracing.stats()["backends"][backend]
    tracing.shutdown_tracing(60)
    spans = n * SPANS
    assert stats["dropped"] == 0 and stats["errors"] == 0, stats
    return {
        "trajectories": n,
        "spans": spans,
        "caller_us_per_span": 1e6 * caller / spans,
        "end_to_end_spans_per_s": spans / total,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=2000)
    ap.add_argument("--mlflow-trajectories", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--backend", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend:
        print(json.dumps(one(args.backend, args.n)))
        return
    results = {}
    print("backend   trajectories  caller µs/span  end-to-end spans/s  vs local")
    for backend in ("local", "weave", "mlflow", "otel"):
        n = args.mlflow_trajectories if backend == "mlflow" else args.trajectories
        results[backend] = run_fresh(__file__, "--backend", backend, "--n", str(n))
        r, local = results[backend], results["local"]
        print(
            f"{backend:<9} {n:>12} {r['caller_us_per_span']:>15.1f} {r['end_to_end_spans_per_s']:>19.0f} "
            f"{local['end_to_end_spans_per_s'] / r['end_to_end_spans_per_s']:>8.1f}x slower"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
