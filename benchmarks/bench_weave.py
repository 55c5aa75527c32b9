"""The Weave backend at training speed, side by side in one run (each variant in its own interpreter).

Trajectories as verl's tool loop makes them: a run span, 3 LLM turns (300 prompt ids; 100 response
ids with log-probs, as a verl TokenOutput), 2 tool calls; 7 Weave calls each (root + 6).

Throughput, end to end until the backend's client confirmed (``flush``), into the in-process
trace server (``tests.doubles.weave_server``; the weave client is the real one):
  calls    rollscope's weave backend: complete call records to the client's trace server
  client   the same trajectories through the weave client's ``create_call``/``finish_call`` (the
           way rollscope's backend wrote them before, and how verl's own decorator writes)

The traced process's own CPU per trajectory (``time.process_time()`` there, everything it runs:
rollout thread, exporter, sender), with the W&B stand-in and the OTLP receiver in processes of
their own:
  local        the local store alone (in the trace sidecar)
  local+weave  plus the weave backend, over HTTP to the W&B stand-in (in the sidecar)
  local+otel   plus the otel backend, OTLP to a receiver (in the sidecar): Weave's other door

A burst (``--burst``, default 10,000 trajectories: 70,000 calls, as fast as the loop makes them,
with the default queue bound), local+weave over HTTP, side by side:
  burst         the weave worker's spool on disk (the default)
  burst-memory  no spool (its directory unwritable): the queue in memory only, dropping beyond it
What the stand-in received (calls and distinct ids) is counted there.

usage: python benchmarks/bench_weave.py [--trajectories 1000] [--client-trajectories 60] [--burst 10000]
                                        [--only VARIANT,...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: its test doubles (tests/doubles)

from fresh import run_fresh

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
os.environ.setdefault("WANDB_SILENT", "true")
CALLS_PER_TRAJECTORY = 7
TURNS, TOOLS = 3, 2

# An OTLP/HTTP receiver that reads and discards, in its own process.
_OTLP_RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Discard(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Discard)
print(f"http://127.0.0.1:{server.server_address[1]}/v1/traces", flush=True)
import threading; threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
"""


def _serve(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )  # (the repository: -m finds tests.doubles)
    return proc, proc.stdout.readline().strip()


def _register_client_path() -> None:
    """The weave client's own create_call/finish_call for every call, as a backend (for comparison)."""
    from rollscope.tracing import register_backend
    from rollscope.tracing.backends.weave import WeaveBackend, call_id, trajectory_view

    class ClientPathWeave(WeaveBackend):
        name = "weave-client-path"

        def write(self, trajectory, spans):
            client, t = self.client, trajectory_view(trajectory, self.experiment)
            root = client.create_call(
                t["name"],
                {"trajectory_id": t["id"]},
                attributes=t["attributes"],
                use_stack=False,
                _call_id_override=call_id(t["id"]),
            )
            calls = {t["id"]: root}
            for s in spans:
                inputs = s.inputs if isinstance(s.inputs, dict) else {"inputs": s.inputs}
                calls[s.id] = client.create_call(
                    s.name, inputs, parent=calls.get(s.parent_id, root), attributes=t["attributes"], use_stack=False
                )
            for s in reversed(spans):
                client.finish_call(calls[s.id], output=s.outputs)
            client.finish_call(root, output={"reward": t["reward"]})

    register_backend(ClientPathWeave.name, ClientPathWeave)


def _trajectories(n: int) -> None:
    """Record n trajectories through the tracing API."""
    from verl.workers.rollout.replica import TokenOutput

    from rollscope import tracing

    prompt = list(range(300))
    response = list(range(1000, 1100))
    logprobs = [-0.01 * i for i in range(100)]
    for i in range(n):
        with tracing.rollout_trace_attr(step=i // 64, sample_index=i % 64, rollout_n=0, name="tool_agent"):
            with tracing.trace_span("ToolAgentLoop.run", kind="agent", inputs={"raw_prompt": "What is 17 * 23?"}):
                for turn in range(TURNS):
                    with tracing.trace_span(
                        "llm.generate",
                        kind="llm",
                        inputs={"request_id": f"r{i}", "prompt_ids": prompt, "sampling_params": {"temperature": 1.0}},
                    ) as s:
                        s.outputs = TokenOutput(token_ids=response, log_probs=logprobs, stop_reason="completed")
                    if turn < TOOLS:
                        with tracing.trace_span(
                            "CalculatorTool.execute", kind="tool", inputs={"parameters": {"expression": "17*23"}}
                        ) as s:
                            s.outputs = {"text": "391", "reward": 0.0}
            tracing.set_reward(1.0)


def one(variant: str, n: int) -> dict:
    from rollscope import tracing

    tmp = tempfile.mkdtemp()
    servers: list[subprocess.Popen] = []
    options: dict = {"trace_dir": f"{tmp}/traces"}
    client = server = None
    if variant in ("calls", "client"):
        from tests.doubles.weave_server import InMemoryTraceServer, make_client

        if variant == "client":
            _register_client_path()
        server = InMemoryTraceServer()
        client = make_client(server, project="bench")
        backend = "weave" if variant == "calls" else "weave-client-path"
        options = {"weave_client": client}
    elif variant in ("local+weave", "burst", "burst-memory"):
        proc, url = _serve(["-m", "tests.doubles.weave_server"])
        servers.append(proc)
        if variant == "burst-memory":
            os.environ["ROLLSCOPE_SPOOL_DIR"] = "/dev/null/no-spool"
        os.environ.update({"WANDB_API_KEY": "x" * 40, "WANDB_BASE_URL": url, "WF_TRACE_SERVER_URL": f"{url}/traces"})
        backend, options["weave_project"] = "local,weave", "ent/bench"
    elif variant == "local+otel":
        proc, url = _serve(["-c", _OTLP_RECEIVER])
        servers.append(proc)
        backend, options["otel_endpoint"] = "local,otel", url
    else:
        backend = "local"
    tracing.init_tracing(backend=backend, project="bench", experiment="weave", **options)
    _trajectories(3)  # every backend started (the sidecar's weave.init, the ops published) before the clocks
    assert tracing.flush_tracing(600)
    t0, cpu0 = time.perf_counter(), time.process_time()
    _trajectories(n)
    assert tracing.flush_tracing(1800)
    if client is not None:
        client.flush()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0  # all of this process's threads
    stats = tracing.stats()["backends"]
    tracing.shutdown_tracing(120)
    received = None
    if variant.startswith("local+weave") or variant.startswith("burst"):
        import urllib.request

        with urllib.request.urlopen(f"{os.environ['WANDB_BASE_URL']}/stand-in/calls") as reply:
            received = json.load(reply)
    for proc in servers:
        proc.stdin.close()
        proc.wait(30)
    if variant != "burst-memory":
        assert all(s["dropped"] == 0 and s["errors"] == 0 for s in stats.values()), stats
    if server is not None:
        assert len(server.ends) == (n + 3) * CALLS_PER_TRAJECTORY, len(server.ends)
    calls = n * CALLS_PER_TRAJECTORY
    out = {
        "trajectories": n,
        "calls": calls,
        "calls_per_s": calls / elapsed,
        "traced_cpu_ms_per_trajectory": 1e3 * cpu / n,
    }
    if received is not None:
        weave = stats["weave"]
        warmup = 3 * CALLS_PER_TRAJECTORY
        out.update(
            received_calls=received["calls"] - warmup,
            distinct_ids=received["ids"] - warmup,
            dropped=weave["dropped"],
            lossless=weave["lossless"],
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=1000)
    ap.add_argument("--client-trajectories", type=int, default=60)
    ap.add_argument("--burst", type=int, default=10_000)
    ap.add_argument("--only", help="comma-separated variants (default: all)")
    ap.add_argument("--json")
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        print(json.dumps(one(args.variant, args.n)))
        return
    here = str(Path(__file__).resolve())
    results = {}
    variants = ("calls", "client", "local", "local+weave", "local+otel", "burst", "burst-memory")
    chosen = args.only.split(",") if args.only else variants
    for variant in chosen:
        n = {"client": args.client_trajectories, "burst": args.burst, "burst-memory": args.burst}.get(
            variant, args.trajectories
        )
        results[variant] = run_fresh(here, "--variant", variant, "--n", str(n))
        r = results[variant]
        received = (
            f"  received {r['received_calls']:,} calls ({r['distinct_ids']:,} ids), dropped {r['dropped']:,}, "
            f"lossless {r['lossless']}"
            if "received_calls" in r
            else ""
        )
        print(
            f"{variant:<12} {n:>6} trajectories  {r['calls_per_s']:>8.0f} calls/s end to end  "
            f"{r['traced_cpu_ms_per_trajectory']:>7.2f} ms traced-process CPU per trajectory{received}",
            flush=True,
        )
    if {"calls", "client"} <= results.keys():
        calls, client = results["calls"], results["client"]
        print(f"weave backend vs the client path: {calls['calls_per_s'] / client['calls_per_s']:.1f}x the calls/s")
    for variant in ("local+weave", "local+otel", "burst"):
        if {variant, "local"} <= results.keys():
            ratio = results[variant]["traced_cpu_ms_per_trajectory"] / results["local"]["traced_cpu_ms_per_trajectory"]
            print(f"traced-process CPU, {variant} / local: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
