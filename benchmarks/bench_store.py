"""Local store ingest and query, side by side with MLflow 3.x tracing on sqlite, in one run.

  ingest_1proc   one process: trajectories of 7 spans (verl's shape: agent run, 3 LLM turns,
                 3 tool calls) through the whole tracing pipeline, until flushed to disk, once
                 tracing has started up (a warm-up flushed first, as for MLflow); with one trace
                 sidecar (the default) and with ``--sidecars`` (2: one a core here)
  ingest_4proc   four such processes at once (this machine has 2 cores), each its own shard
  writer_only    the shard writer alone, pre-built rows: the store's raw capacity
  mlflow         MLflow tracing into a sqlite tracking store with async logging (verl's setup),
                 7-span traces until flushed
  query          a 1,000,000-span store in 4 shards: trajectories(step=S), group(step, sample),
                 a first page of 100, medians over repeated queries

``--text N``: every span's inputs and outputs also carry N characters of text (Python source and
its docstrings, a different slice each span: what a code agent's prompts and tool results hold),
in both the ingest and MLflow's; ``--no-query`` leaves the query part out.

usage: python benchmarks/bench_store.py [--trajectories N] [--sidecars 2] [--mlflow-traces M] [--spans 1000000]
                                        [--text N] [--no-query] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("WANDB_ERROR_REPORTING", "false")

SPANS_PER_TRAJECTORY = 7
TEXT_CHARS = int(os.environ.get("ROLLSCOPE_BENCH_TEXT", "0"))  # (``--text``, passed on to the children)


def _text(i: int, part: int) -> str:
    """``TEXT_CHARS`` characters of Python source, from a place that depends on ``i`` and ``part``."""
    if not TEXT_CHARS:
        return ""
    import inspect
    import json.decoder

    global _SOURCE
    if not _SOURCE:
        _SOURCE = "".join(inspect.getsource(m) for m in (json.decoder, json.encoder, argparse, statistics))
    at = (i * 7919 + part * 104729) % (len(_SOURCE) - TEXT_CHARS)
    return _SOURCE[at : at + TEXT_CHARS]


_SOURCE = ""


# Traced and flushed before the clock starts, as MLflow's one trace is (``_mlflow``): every sidecar
# has then finished starting up (its secret rules load on a thread of their own after it says
# ready, ~0.7 s of CPU each), so the figure is the rate of ingest, not of a start-up in a window
# a few seconds long. Trajectories land on sidecars by their ids: 64 reach two with certainty.
WARMUP_TRAJECTORIES = 64


def _traced_trajectories(n: int, trace_dir: str) -> dict:
    from rollscope import tracing

    tracing.init_tracing(project="bench", experiment="ingest", trace_dir=trace_dir)
    prompt = list(range(200))
    for i in range(WARMUP_TRAJECTORIES):
        _trajectory(tracing, -1 - i, prompt)
    assert tracing.flush_tracing(600)
    t0 = time.perf_counter()
    for i in range(n):
        _trajectory(tracing, i, prompt)
    caller = time.perf_counter() - t0
    assert tracing.flush_tracing(600)
    total = time.perf_counter() - t0
    tracing.shutdown_tracing()
    spans = n * SPANS_PER_TRAJECTORY
    return {"spans": spans, "caller_s": caller, "total_s": total, "spans_per_s": spans / total}


def _trajectory(tracing, i: int, prompt: list[int]) -> None:
    with tracing.rollout_trace_attr(step=i // 64, sample_index=i % 64, rollout_n=0):
        with tracing.trace_span("agent_loop.run", inputs={"raw_prompt": "What is 17 * 23?"}) as run:
            for turn in range(3):
                inputs = {"prompt_ids": prompt, "prompt_text": _text(i, turn)}
                with tracing.trace_span("generate", kind="llm", inputs=inputs) as g:
                    g.outputs = {
                        "token_ids": [1, 2, 3, 4, 5, 6, 7, 8],
                        "stop_reason": "stop",
                        "text": _text(i, 3 + turn),
                    }
                inputs = {"expression": "17*23", "code": _text(i, 6 + turn)}
                with tracing.trace_span("calculator", kind="tool", inputs=inputs) as c:
                    c.outputs = {"text": "391" + _text(i, 9 + turn), "turn": turn}
            run.outputs = {"answer": "391"}
        tracing.set_reward(1.0)


def _writer_only(n: int, trace_dir: str) -> dict:
    from rollscope.store.writer import ShardWriter

    rows_t, rows_s = _synthetic_rows(n, seed=1)
    writer = ShardWriter(trace_dir)
    t0 = time.perf_counter()
    for i in range(0, len(rows_t), 500):
        writer.write(rows_t[i : i + 500], rows_s[i * 7 : (i + 500) * 7])
    total = time.perf_counter() - t0
    writer.close()
    return {"spans": len(rows_s), "total_s": total, "spans_per_s": len(rows_s) / total}


def _llm_payload(rng: random.Random, response_tokens: int) -> bytes:
    """An llm turn as token2text records it: a ChatML prompt, response tokens with their texts and
    log-probabilities, usage attributes (what the chat and token views read)."""
    from rollscope.store.schema import encode_payload

    prompt = (
        "<|im_start|>system\nYou are a careful assistant with a calculator.<|im_end|>\n<|im_start|>user\n"
        + "What is 61 times 16? " * 20
        + "<|im_end|>\n<|im_start|>assistant\n"
    )
    texts = [
        rng.choice([" the", " answer", " is", " 9", "7", "6", ".", " call", "<tool_call>"])
        for _ in range(response_tokens)
    ]
    return encode_payload(
        {
            "inputs": {"prompt_ids": list(range(len(prompt) // 4)), "prompt_text": prompt},
            "outputs": {
                "token_ids": [rng.randrange(32000) for _ in texts],
                "token_texts": texts,
                "log_probs": [-rng.expovariate(3.0) for _ in texts],
                "response_text": "".join(texts),
                "stop_reason": "completed",
            },
            "attributes": {"gen_ai.usage.input_tokens": len(prompt) // 4, "gen_ai.usage.output_tokens": len(texts)},
        }
    )


def _synthetic_rows(n: int, seed: int, steps: int = 100, rollouts: int = 8):
    """Trajectory and span rows as the local backend writes them, with realistic payload sizes."""
    from rollscope.store.schema import encode_payload
    from rollscope.tracing.spans import new_id

    rng = random.Random(seed)
    payloads = [
        encode_payload({"inputs": {"prompt_ids": list(range(rng.randint(50, 300)))}, "outputs": {"text": "x" * k}})
        for k in range(20, 400, 40)
    ]
    llm_payloads = [_llm_payload(rng, k) for k in range(40, 200, 40)]
    per_step = max(1, n // (steps * rollouts))
    trajectories, spans = [], []
    now = time.time_ns()
    for i in range(n):
        tid = new_id()
        step, rest = divmod(i, per_step * rollouts)
        sample, rollout = divmod(rest, rollouts)
        reward = float(rng.random() < 0.5)
        tokens, tool_error = rng.randint(20, 400), rng.random() < 0.1
        attributes = '{"tool_errors": {"calculator|exception": 1}}' if tool_error else None
        trajectories.append(
            (
                tid,
                "bench",
                "q",
                step,
                sample,
                rollout,
                0,
                "tool_agent",
                "ok",
                reward,
                now + i,
                now + i + 1000,
                7,
                3,
                3,
                int(tool_error),
                tokens,
                int(tool_error),
                None,
                None,
                attributes,
                int(rng.random() < 0.05),
                int(rng.random() < 0.1),
                -0.3 * tokens,
                tokens,
                rng.randint(0, 40),
                int(rng.random() < 0.03),
                None,
            )
        )
        parent = None
        for j in range(SPANS_PER_TRAJECTORY):
            sid = new_id()
            kind = "custom" if j == 0 else ("llm" if j % 2 else "tool")
            spans.append(
                (
                    sid,
                    tid,
                    parent or tid,
                    f"span{j}",
                    kind,
                    now + i,
                    now + i + 10,
                    "ok",
                    None,
                    None,
                    rng.choice(llm_payloads if kind == "llm" else payloads),
                )
            )
            parent = parent or sid
    return trajectories, spans


def _mlflow(n: int, tmp: str) -> dict:
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.ERROR)
    mlflow.set_tracking_uri(f"sqlite:///{tmp}/mlruns.db")
    mlflow.set_experiment(experiment_id=mlflow.create_experiment("bench", artifact_location=f"{tmp}/artifacts"))
    mlflow.config.enable_async_logging()

    def one(i: int) -> None:
        with mlflow.start_span(name="agent_loop") as root:
            mlflow.set_trace_tag(root.trace_id, "step", str(i // 64))
            for turn in range(3):
                with mlflow.start_span(name="generate") as g:
                    g.set_inputs({"prompt_ids": list(range(200)), "prompt_text": _text(i, turn)})
                    g.set_outputs({"token_ids": [1, 2, 3, 4, 5, 6, 7, 8], "text": _text(i, 3 + turn)})
                with mlflow.start_span(name="calculator") as c:
                    c.set_inputs({"expression": "17*23", "code": _text(i, 6 + turn)})
                    c.set_outputs({"text": "391" + _text(i, 9 + turn), "turn": turn})

    one(-1)
    mlflow.flush_trace_async_logging()
    t0 = time.perf_counter()
    for i in range(n):
        one(i)
    caller = time.perf_counter() - t0
    mlflow.flush_trace_async_logging()
    total = time.perf_counter() - t0
    stored = len(mlflow.search_traces(return_type="list", max_results=100_000))
    assert stored == n + 1, f"mlflow stored {stored} traces, expected {n + 1}"
    spans = n * SPANS_PER_TRAJECTORY
    return {"spans": spans, "caller_s": caller, "total_s": total, "spans_per_s": spans / total}


def median_ms(fn, repeats: int) -> float:
    """The median of ``repeats`` calls of ``fn``, in milliseconds."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def build_store(total_spans: int, directory: str, shards: int = 4) -> None:
    """A store of ``total_spans`` spans in ``shards`` shard files (the viewer benchmark reuses it)."""
    from rollscope.store.writer import ShardWriter

    n = total_spans // SPANS_PER_TRAJECTORY
    for shard in range(shards):
        rows_t, rows_s = _synthetic_rows(n // shards, seed=shard)
        w = ShardWriter(directory)
        for i in range(0, len(rows_t), 2000):
            w.write(rows_t[i : i + 2000], rows_s[i * 7 : (i + 2000) * 7])
        w.close()


def build_store_reported(total_spans: int, directory: str) -> None:
    """``build_store``, saying how long it took (the insights and viewer benchmarks start so)."""
    t0 = time.perf_counter()
    build_store(total_spans, directory)
    print(f"store of {total_spans:,} spans built in {time.perf_counter() - t0:.1f} s", flush=True)


def _query(total_spans: int, tmp: str) -> dict:
    from rollscope.store import TraceStore

    t0 = time.perf_counter()
    build_store(total_spans, tmp)
    build_s = time.perf_counter() - t0
    store = TraceStore(tmp)
    spans = sum(t.num_spans for t in store.trajectories())
    rng = random.Random(0)
    steps = [rng.randrange(100) for _ in range(30)]
    it = iter(steps * 3)
    per_step = len(store.trajectories(step=steps[0]))
    res = {
        "spans_in_store": spans,
        "trajectories_in_store": store.count(),
        "build_s": build_s,
        "trajectories_per_step": per_step,
        "trajectories_step_ms": median_ms(lambda: store.trajectories(step=next(it)), 30),
        "group_ms": median_ms(lambda: store.group(step=rng.randrange(100), sample_index=rng.randrange(10)), 30),
        "first_page_100_ms": median_ms(lambda: store.trajectories(limit=100, order_by="start", descending=True), 30),
        "cold_open_and_step_query_ms": median_ms(lambda: TraceStore(tmp).trajectories(step=next(it)), 10),
    }
    return res


def _child(mode: str, n: int, trace_dir: str) -> None:
    fn = {"ingest": _traced_trajectories, "writer": _writer_only, "mlflow": _mlflow}[mode]
    print(json.dumps(fn(n, trace_dir)))


def _spawn(mode: str, n: int, trace_dir: str, sidecars: int = 1) -> subprocess.Popen:
    """``mode`` in a fresh interpreter, with ``sidecars`` trace sidecars (``ROLLSCOPE_TRACE_SIDECAR``)."""
    return subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--trajectories", str(n), "--dir", trace_dir],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ROLLSCOPE_TRACE_SIDECAR": str(sidecars)},
    )


def _result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate(timeout=1200)
    assert p.returncode == 0
    return json.loads(out.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=5000)
    ap.add_argument("--sidecars", type=int, default=2, help="the second ingest's trace sidecars")
    ap.add_argument("--mlflow-traces", type=int, default=30)
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--text", type=int, default=0, help="characters of text in every span's inputs and outputs")
    ap.add_argument("--no-query", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child, args.trajectories, args.dir)
    global TEXT_CHARS
    TEXT_CHARS = args.text
    os.environ["ROLLSCOPE_BENCH_TEXT"] = str(args.text)
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        res["ingest_1proc"] = _result(_spawn("ingest", args.trajectories, f"{tmp}/one"))
        pool = _result(_spawn("ingest", args.trajectories, f"{tmp}/pool", args.sidecars))
        res["ingest_1proc_sidecars"] = {"sidecars": args.sidecars, **pool}
        procs = [_spawn("ingest", args.trajectories, f"{tmp}/four") for _ in range(4)]
        t0 = time.perf_counter()
        four = [_result(p) for p in procs]
        wall = time.perf_counter() - t0
        from rollscope.store import TraceStore

        stored = sum(t.num_spans for t in TraceStore(f"{tmp}/four").trajectories())
        assert stored == 4 * (args.trajectories + WARMUP_TRAJECTORIES) * SPANS_PER_TRAJECTORY, stored
        res["ingest_4proc"] = {
            "per_process_spans_per_s": [r["spans_per_s"] for r in four],
            "aggregate_spans_per_s": stored / wall,
        }
        res["writer_only"] = _result(_spawn("writer", args.trajectories * 4, f"{tmp}/writer"))
        res["mlflow"] = _mlflow(args.mlflow_traces, tmp)
        res["ratio_ingest_vs_mlflow"] = res["ingest_1proc"]["spans_per_s"] / res["mlflow"]["spans_per_s"]
        if not args.no_query:
            Path(f"{tmp}/q").mkdir()
            res["query"] = _query(args.spans, f"{tmp}/q")
    i1, i4, m = res["ingest_1proc"], res["ingest_4proc"], res["mlflow"]
    if args.text:
        print(f"every span carries {args.text:,} characters of text in its inputs and outputs")
    for label, r in (("1 sidecar", i1), (f"{args.sidecars} sidecars", res["ingest_1proc_sidecars"])):
        print(
            f"ingest, 1 process, {label}: {r['spans_per_s']:>10,.0f} spans/s (caller {r['caller_s']:.2f}s, "
            f"to disk {r['total_s']:.2f}s for {r['spans']:,} spans)"
        )
    print(
        f"ingest, 4 processes: {i4['aggregate_spans_per_s']:>10,.0f} spans/s in all; per process "
        + ", ".join(f"{v:,.0f}" for v in i4["per_process_spans_per_s"])
    )
    print(f"writer only:         {res['writer_only']['spans_per_s']:>10,.0f} spans/s")
    print(f"mlflow sqlite:       {m['spans_per_s']:>10,.1f} spans/s ({m['spans_per_s'] / 7:.1f} traces/s)")
    print(f"rollscope / mlflow:  {res['ratio_ingest_vs_mlflow']:>10,.0f}x")
    q = res.get("query")
    print(
        "query: not measured (--no-query)"
        if q is None
        else f"query over {q['spans_in_store']:,} spans ({q['trajectories_in_store']:,} trajectories, 4 shards): "
        f"trajectories(step) {q['trajectories_step_ms']:.1f} ms for {q['trajectories_per_step']} rows, "
        f"group {q['group_ms']:.1f} ms, first page of 100 {q['first_page_100_ms']:.1f} ms, "
        f"cold open + step query {q['cold_open_and_step_query_ms']:.1f} ms"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
