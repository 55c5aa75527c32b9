"""Long trajectories as users run them: what tracing costs and stores as a trajectory grows.

A multi-turn loop as verl's ToolAgentLoop runs one (the prompt list extended in place by each
reply and each tool's answer) through rollscope's traced LLM client, with Qwen's real vocabulary
(tests/agentloops/real_models.py), token2text on, log-probs on every reply, into the local store
through the trace sidecar (the defaults). Each turn's prompt is the whole context so far: a
2,000-token first prompt, then per turn a 200-token reply and 1,300 tokens of tool output (text
from Python's own sources, tokenized). The LLM is a test double that answers at once, so tracing's
cost is all there is to see.

  cost per turn    the rollout thread's CPU per turn, traced minus untraced, the two alternating
                   trajectory by trajectory in one process
  bytes            what the store holds for the trajectory (its spans' payloads), per trajectory
                   and per token of the final context, beside the floor: the final context's ids
                   and the replies' log-probs alone, packed (uint32, float32) and zstd-compressed
                   as the store compresses
  ingest           context tokens recorded a second, from the first rollout to everything stored
  read             the viewer's page for the trajectory (``Viewer.handle``) and ``traces show``
                   printing it (in process), milliseconds
  exact            every turn's prompt read back through the store equals what the loop passed

``--baseline REV`` runs the same with REV's rollscope (a git worktree, PYTHONPATH), side by side.

usage: python benchmarks/bench_long_trajectories.py [--turns 5 20 40] [--long-turns 84]
                                                    [--repeat 3] [--baseline REV] [--json OUT]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import io
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIRST_PROMPT, REPLY, TOOL = 2_000, 200, 1_300
REDACTED_ID = -1  # store.tokens.REDACTED_ID (written here: a baseline tree may not have that module)


def corpus_ids(tokenizer, n: int, seed: int) -> list[int]:
    """``n`` tokens of real text (Python's own sources), from a seeded place."""
    sources = sorted(Path(os.__file__).parent.glob("*.py"))
    rng = random.Random(seed)
    ids: list[int] = []
    while len(ids) < n:
        text = rng.choice(sources).read_text(errors="replace")
        start = rng.randrange(max(1, len(text) - 8000))
        ids += tokenizer.encode(text[start : start + 8000])
    return ids[:n]


class InstantLLM:
    """Answers at once with the next 200 tokens of text and a log-prob for each: a test double."""

    def __init__(self, replies: list[list[int]]) -> None:
        self.replies, self.n = replies, 0

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        ids = self.replies[self.n % len(self.replies)]
        self.n += 1
        return {"token_ids": list(ids), "log_probs": [-0.25] * len(ids), "stop_reason": "stop"}


def trajectory(
    client, first: list[int], tools: list[list[int]], turns: int, tracing, traced: bool, passed: list | None = None
) -> float:
    """One trajectory; the rollout thread's CPU seconds."""

    async def loop():
        prompt = list(first)
        for turn in range(turns):
            if passed is not None:
                passed.append(list(prompt))
            out = await client.generate(f"r{turn}", prompt_ids=prompt, sampling_params={"temperature": 1.0})
            prompt += out["token_ids"]
            prompt += tools[turn % len(tools)]

    async def main():
        if traced:
            with tracing.rollout_trace_attr(step=0, sample_index=0):
                await loop()
        else:
            await loop()

    t0 = time.thread_time()
    asyncio.run(main())
    return time.thread_time() - t0


def floor_bytes(first: list[int], tools: list[list[int]], replies: list[list[int]], turns: int) -> int:
    import zstandard

    context: list[int] = list(first)
    for turn in range(turns):
        context += replies[turn % len(replies)] + tools[turn % len(tools)]
    ids = array.array("I", context).tobytes()
    log_probs = array.array("f", [-0.25] * (REPLY * turns)).tobytes()
    c = zstandard.ZstdCompressor(level=1)
    return len(c.compress(ids)) + len(c.compress(log_probs))


def stored_bytes(store_dir: Path) -> int:
    total = 0
    for shard in store_dir.rglob("*.rstrace"):
        db = sqlite3.connect(shard)
        total += db.execute("SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM spans").fetchone()[0]
        db.close()
    return total


def measure(turns: int, repeat: int, model: str, token2text: bool = True) -> dict:
    from transformers import AutoTokenizer

    from rollscope import tracing
    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.store.reader import TraceStore
    from rollscope.tracing._redaction import Redactor

    tokenizer = AutoTokenizer.from_pretrained(model)
    first = corpus_ids(tokenizer, FIRST_PROMPT, 0)
    # every turn's text its own (a context that repeats would compress beyond what users' do)
    text = corpus_ids(tokenizer, turns * (TOOL + REPLY), 1)
    tools = [text[i * TOOL : (i + 1) * TOOL] for i in range(turns)]
    replies = [text[turns * TOOL + i * REPLY : turns * TOOL + (i + 1) * REPLY] for i in range(turns)]
    store_dir = Path(tempfile.mkdtemp(prefix="long-"))
    tracing.init_tracing(trace_dir=str(store_dir), token2text=token2text)
    plain = InstantLLM(replies)
    traced = TracedLLMClient(InstantLLM(replies), tokenizer)
    trajectory(plain, first, tools, 2, tracing, False)  # warm both
    trajectory(traced, first, tools, 2, tracing, True)
    assert tracing.flush_tracing(600)
    warm_bytes = stored_bytes(store_dir)
    with TraceStore(store_dir) as store:
        warm_ids = {t.id for t in store.trajectories()}
    costs, passed = [], []
    start = time.perf_counter()
    for i in range(repeat):
        untraced_s = trajectory(plain, first, tools, turns, tracing, False)
        traced_s = trajectory(traced, first, tools, turns, tracing, True, passed if i == 0 else None)
        costs.append((traced_s - untraced_s) / turns)
    assert tracing.flush_tracing(600)
    ingest_s = time.perf_counter() - start
    tracing.shutdown_tracing()
    context_tokens = sum(FIRST_PROMPT + t * (REPLY + TOOL) + REPLY for t in range(turns)) * repeat
    per_trajectory = (stored_bytes(store_dir) - warm_bytes) / repeat
    final_context = FIRST_PROMPT + turns * (REPLY + TOOL)
    floor = floor_bytes(first, tools, replies, turns)

    from rollscope.cli import main as cli_main
    from rollscope.viewer.server import Viewer

    with TraceStore(store_dir) as store:
        records = sorted((t for t in store.trajectories() if t.id not in warm_ids), key=lambda t: t.start_ns)
        first_record = store.get(records[0].id)
        llm = sorted((s for s in first_record.spans if s.kind == "llm"), key=lambda s: s.start_ns)
        # (a reader that keeps each turn as stored makes a prompt whole when asked; an older one read them whole)
        whole = [_whole(first_record, s) for s in llm]
        exact = sum(_same_but_redacted(w.get("prompt_ids"), p) for w, p in zip(whole, passed, strict=True))
        redacted_tokens = (whole[-1].get("prompt_ids") or []).count(REDACTED_ID)
        redact = Redactor().text  # (the text is stored redacted: Python's sources name passwords)
        text_exact = sum(
            w.get("prompt_text") == (redact(tokenizer.decode(p)) if token2text else None)
            for w, p in zip(whole, passed, strict=True)
        )
    viewer = Viewer(str(store_dir))
    viewer.handle("/")
    t0 = time.perf_counter()
    status, _, body = viewer.handle(f"/t/{records[0].id}")
    viewer_ms = (time.perf_counter() - t0) * 1e3
    assert status == 200, body[:300]
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        cli_main(["traces", "show", records[0].id, "--dir", str(store_dir)])
    show_ms = (time.perf_counter() - t0) * 1e3
    costs.sort()
    return {
        "turns": turns,
        "final_context_tokens": final_context,
        "cost_per_turn_us": round(costs[len(costs) // 2] * 1e6, 1),
        "bytes_per_trajectory": int(per_trajectory),
        "bytes_per_context_token": round(per_trajectory / final_context, 2),
        "floor_bytes": floor,
        "vs_floor": round(per_trajectory / floor, 2),
        "ingest_tokens_per_s": int(context_tokens / ingest_s),
        "viewer_ms": round(viewer_ms, 1),
        "show_ms": round(show_ms, 1),
        "page_bytes": len(body),
        "prompts_exact": f"{exact}/{len(passed)}",
        "texts_exact": f"{text_exact}/{len(passed)}",
        "redacted_tokens": redacted_tokens,
    }


def _same_but_redacted(stored: list[int] | None, passed: list[int]) -> bool:
    """The stored ids are the passed ones, but for tokens stored as carrying a secret (Python's
    sources name passwords: the text is stored redacted, and these tokens with it)."""
    return (
        stored is not None
        and len(stored) == len(passed)
        and all(a in (b, REDACTED_ID) for a, b in zip(stored, passed, strict=True))
    )


def volume(turns: int, model: str) -> dict:
    """The volume controls at this size: one step of 4 samples x 2 rollouts of ``turns`` turns,
    traced whole; with ``max_samples_per_step_per_worker=1``; and the whole one after
    ``traces compact --retain anomalous,sample=0.25,seed=0`` (``store.retention.retain``)."""
    from transformers import AutoTokenizer

    from rollscope import tracing
    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.store.retention import parse_policy, retain

    tokenizer = AutoTokenizer.from_pretrained(model)
    first = corpus_ids(tokenizer, FIRST_PROMPT, 0)
    text = corpus_ids(tokenizer, turns * (TOOL + REPLY), 1)
    tools = [text[i * TOOL : (i + 1) * TOOL] for i in range(turns)]
    replies = [text[turns * TOOL + i * REPLY : turns * TOOL + (i + 1) * REPLY] for i in range(turns)]

    async def step(client):
        for sample in range(4):
            for n in range(2):
                with tracing.rollout_trace_attr(step=1, sample_index=sample, rollout_n=n):
                    prompt = list(first)
                    for turn in range(turns):
                        out = await client.generate("r", prompt_ids=prompt, sampling_params={})
                        prompt += out["token_ids"] + tools[turn]
                    tracing.set_reward(float((sample + n) % 2 if sample else 1.0))

    out = {}
    for name, options in (("all", {}), ("max_samples_per_step_per_worker=1", {"max_samples_per_step_per_worker": 1})):
        store_dir = Path(tempfile.mkdtemp(prefix="long-volume-"))
        tracing.init_tracing(trace_dir=str(store_dir), token2text=True, **options)
        asyncio.run(step(TracedLLMClient(InstantLLM(replies), tokenizer)))
        tracing.shutdown_tracing(600)
        out[name] = stored_bytes(store_dir)
        if name == "all":
            done = retain(store_dir, parse_policy("anomalous,sample=0.25,seed=0"))
            out["after compact --retain anomalous,sample=0.25"] = stored_bytes(store_dir)
            out["retained groups"] = f"{done.summary['kept_groups']} of {done.summary['groups']}"
    return out


def _whole(record, span) -> dict:
    prompts = getattr(record, "prompts", None)
    return prompts.whole_inputs(span) if prompts is not None else span.inputs


def model_dir() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.agentloops.real_models import model_dir as make

    path = Path(tempfile.gettempdir()) / "rollscope-bench-qwen"
    return str(path if (path / "tokenizer.json").is_file() else make("qwen2.5", path))


def in_child(tree: Path, turns: int, repeat: int, model: str, token2text: bool = True) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_ERROR_REPORTING": "false"}
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            str(turns),
            "--repeat",
            str(repeat),
            "--model",
            model,
            *([] if token2text else ["--ids-only"]),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{turns} turns on {tree} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, nargs="+", default=[5, 20, 40])
    parser.add_argument("--long-turns", type=int, default=84, help="turns of the ~128k-token trajectory (0: none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", help="a git revision measured side by side")
    parser.add_argument("--json")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--volume", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ids-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.repeat, args.model, not args.ids_only)))
        return
    if args.volume:
        print(json.dumps(volume(args.volume, args.model)))
        return
    model = model_dir()
    sides = {"this tree": ROOT}
    if args.baseline:
        worktree = Path(tempfile.mkdtemp(prefix="long-baseline-")) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.baseline],
            check=True,
            capture_output=True,
        )
        sides = {args.baseline: worktree, **sides}
    lengths = [*args.turns, *([args.long_turns] if args.long_turns else [])]
    results: dict[str, list[dict]] = {name: [] for name in sides}
    for turns in lengths:
        for name, tree in sides.items():
            r = in_child(tree, turns, args.repeat, model)
            results[name].append(r)
            print(
                f"{name:>10} {turns:>3} turns {r['final_context_tokens']:>7,} tokens: "
                f"{r['cost_per_turn_us']:>8,.1f} us/turn  {r['bytes_per_trajectory']:>11,} B "
                f"({r['bytes_per_context_token']:.2f} B/token, {r['vs_floor']:.2f}x floor)  "
                f"ingest {r['ingest_tokens_per_s']:>10,} tok/s  viewer {r['viewer_ms']:,.0f} ms  "
                f"show {r['show_ms']:,.0f} ms  exact {r['prompts_exact']} ids, {r['texts_exact']} texts"
                + ("" if r.get("redacted_tokens") is None else f", {r['redacted_tokens']} redacted"),
                flush=True,
            )
    ours = {r["turns"]: r for r in results["this tree"]}
    short, long_ = min(args.turns), max(args.turns)
    summary = {
        "cost_ratio": round(ours[long_]["cost_per_turn_us"] / ours[short]["cost_per_turn_us"], 2),
        "bytes_per_token_ratio": round(
            ours[long_]["bytes_per_context_token"] / ours[short]["bytes_per_context_token"], 2
        ),
        "max_vs_floor": max(r["vs_floor"] for r in results["this tree"]),
    }
    print(
        f"{long_} turns against {short}: cost per turn x{summary['cost_ratio']} (goal <= 1.5), bytes per context "
        f"token x{summary['bytes_per_token_ratio']} (goal <= 1.5); at most {summary['max_vs_floor']}x the floor "
        "(goal <= 2)"
    )
    for name, tree in sides.items():  # (the trace sidecar decodes and scans each turn's ids for secrets)
        ids_only = in_child(tree, long_, args.repeat, model, token2text=False)
        summary[f"ids_only {name}"] = ids_only
        print(
            f"{name:>10} {long_} turns with token2text off (ids only): {ids_only['bytes_per_trajectory']:,} B, "
            f"{ids_only['vs_floor']}x the floor, {ids_only['cost_per_turn_us']:,.1f} us/turn, "
            f"ingest {ids_only['ingest_tokens_per_s']:,} tok/s, exact {ids_only['prompts_exact']} ids"
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_ERROR_REPORTING": "false"}
    proc = subprocess.run(
        [sys.executable, __file__, "--volume", "20", "--model", model],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=3600,
        check=True,
    )
    summary["volume"] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        "one step of 4 samples x 2 rollouts, 20 turns each, bytes stored: "
        + ", ".join(f"{k}: {v:,}" if isinstance(v, int) else f"{k}: {v}" for k, v in summary["volume"].items())
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
