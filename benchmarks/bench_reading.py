"""Reading at any size: what reading a long trajectory, and a store crafted to make readers
rebuild prompts, costs in time and memory.

  long     a 1,000-turn trajectory of about 1M context tokens (a 2,000-token first prompt, then
           per turn a 200-token reply and 800 tokens of tool output: Python's own sources in
           Qwen's vocabulary), written as a user's loop writes one (verl's ToolAgentLoop's shape,
           through rollscope's traced LLM client, token2text on, into the local store through the
           sidecar). Read, each in a fresh process: the viewer's page for it (``Viewer.handle``
           after the index page, as a user comes to it: milliseconds, and the process's peak RSS),
           a search on that page for a word only its last tool output holds, and ``traces show``.
  crafted  one trajectory whose first turn's prompt is 2^20 ids, and N turns (1,000) each
           continuing that prompt with a few tokens: rows copied in SQLite, as a shared store
           can hold them. ``traces show``, the viewer's page and ``export --format jsonl``, each in
           a fresh process: its peak RSS, beside the same read of the base turn alone (N = 0).

``--baseline REV`` runs the same reads with REV's rollscope (a git worktree, PYTHONPATH) on the same
stores; its crafted store has ``--baseline-continuations`` turns (100: at 1,000 an eager reader
needs about 8 GB).

usage: python benchmarks/bench_reading.py [--turns 1000] [--continuations 1000] [--baseline REV]
                                          [--baseline-continuations 100] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]
from bench_long_trajectories import InstantLLM, corpus_ids, model_dir, trajectory  # noqa: E402  (sibling scripts)

from tests.trajectory.crafted import continue_last_turn  # noqa: E402

FIRST, REPLY, TOOL = 2_000, 200, 800
NEEDLE = " NEEDLE_IN_THE_LAST_TOOL_OUTPUT"
BASE_IDS = 2**20


def write_long(store: Path, turns: int, model: str) -> str:
    """The 1,000-turn trajectory, through the tracing API (an llm span and a tool span a turn);
    returns its id."""
    from transformers import AutoTokenizer

    from rollscope import tracing
    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.store.reader import TraceStore

    tokenizer = AutoTokenizer.from_pretrained(model)
    first = corpus_ids(tokenizer, FIRST, 0)
    text = corpus_ids(tokenizer, turns * (TOOL + REPLY), 1)
    tools = [text[i * TOOL : (i + 1) * TOOL] for i in range(turns)]
    tools[-1] = tools[-1] + tokenizer.encode(NEEDLE)
    replies = [text[turns * TOOL + i * REPLY : turns * TOOL + (i + 1) * REPLY] for i in range(turns)]
    tracing.init_tracing(trace_dir=str(store), token2text=True)
    client = TracedLLMClient(InstantLLM(replies), tokenizer)

    @tracing.rollout_trace_op(kind="tool", name="search")
    async def search(turn: int) -> dict:
        return {"text": tokenizer.decode(tools[turn])}

    async def loop() -> None:
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt = list(first)
            for turn in range(turns):
                out = await client.generate(f"r{turn}", prompt_ids=prompt, sampling_params={"temperature": 1.0})
                await search(turn)
                prompt += out["token_ids"] + tools[turn]

    asyncio.run(loop())
    assert tracing.flush_tracing(1800)
    tracing.shutdown_tracing()
    [t] = TraceStore(store).trajectories()
    return t.id


def write_crafted(store: Path, continuations: int, model: str) -> str:
    """A base turn of 2^20 prompt ids and ``continuations`` turns continuing it; returns the id."""
    from transformers import AutoTokenizer

    from rollscope import tracing
    from rollscope.agentloops.llm_client import TracedLLMClient
    from rollscope.store.reader import TraceStore

    tokenizer = AutoTokenizer.from_pretrained(model)
    base = corpus_ids(tokenizer, BASE_IDS, 2)
    replies = [corpus_ids(tokenizer, 20, 3)]
    tracing.init_tracing(trace_dir=str(store), token2text=True)
    trajectory(TracedLLMClient(InstantLLM(replies), tokenizer), base, [tokenizer.encode(" more")], 2, tracing, True)
    assert tracing.flush_tracing(600)
    tracing.shutdown_tracing()
    [t] = TraceStore(store).trajectories()
    continue_last_turn(store, continuations)
    return t.id


READS = {  # what a child process does; its peak RSS is read by the parent
    "page": "from rollscope.viewer.server import Viewer\n"
    "v = Viewer(D)\nv.handle('/')\nt0 = time.perf_counter()\nstatus, _, body = v.handle('/t/' + ID)\n"
    "assert status == 200, body[:500]\nout = {'ms': (time.perf_counter() - t0) * 1e3, 'bytes': len(body)}",
    "search": "from rollscope.viewer.server import Viewer\n"
    "v = Viewer(D)\nv.handle('/')\nt0 = time.perf_counter()\nstatus, _, body = v.handle('/t/' + ID + '?q=' + Q)\n"
    "assert status == 200 and b'1 span matches' in body, body[:500]\n"
    "out = {'ms': (time.perf_counter() - t0) * 1e3}",
    "show": "import contextlib, io\nfrom rollscope.cli import main\nt0 = time.perf_counter()\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    main(['traces', 'show', ID, '--dir', D])\n"
    "out = {'ms': (time.perf_counter() - t0) * 1e3}",
    "export": "import contextlib, io, tempfile\nfrom rollscope.cli import main\nt0 = time.perf_counter()\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    main(['export', '--format', 'jsonl', '--dir', D, tempfile.mktemp(suffix='.jsonl')])\n"
    "out = {'ms': (time.perf_counter() - t0) * 1e3}",
}


def read(tree: Path, what: str, store: Path, trajectory_id: str) -> dict:
    """One read in a fresh process on ``tree``'s rollscope: its time and its peak RSS (MB)."""
    code = (
        f"import json, time\nD, ID, Q = {str(store)!r}, {trajectory_id!r}, {NEEDLE.strip()!r}\n"
        f"{READS[what]}\n"  # (the process's own high-water mark: ru_maxrss keeps the forking parent's)
        "out['peak_mb'] = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) / 1024\n"
        "print(json.dumps(out))"
    )
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_ERROR_REPORTING": "false"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        code_ = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, stdout=out, stderr=err, timeout=3600)
        out.seek(0), err.seek(0)
        if code_.returncode != 0:
            raise RuntimeError(f"{what} on {tree} exited {code_.returncode}:\n{err.read()[-3000:]}")
        return json.loads(out.read().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--continuations", type=int, default=1000)
    parser.add_argument("--baseline", help="a git revision read side by side")
    parser.add_argument("--baseline-continuations", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args()
    model = model_dir()
    work = Path(tempfile.mkdtemp(prefix="reading-"))
    sides = {"this tree": ROOT}
    if args.baseline:
        worktree = work / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.baseline],
            check=True,
            capture_output=True,
        )
        sides = {args.baseline: worktree, **sides}
    results: dict = {"turns": args.turns, "continuations": args.continuations}
    t0 = time.perf_counter()
    long_id = write_long(work / "long", args.turns, model)
    print(f"wrote a {args.turns}-turn trajectory in {time.perf_counter() - t0:.0f} s", flush=True)
    for name, tree in sides.items():
        for what in ("page", "search", "show"):
            r = results.setdefault(name, {})[f"long_{what}"] = read(tree, what, work / "long", long_id)
            print(
                f"{name:>10} {args.turns} turns  {what:<7} {r['ms']:>9,.0f} ms  peak {r['peak_mb']:>7,.0f} MB",
                flush=True,
            )
    counts = {0, args.continuations, *([args.baseline_continuations] if args.baseline else [])}
    crafted = {n: (work / f"crafted-{n}", write_crafted(work / f"crafted-{n}", n, model)) for n in sorted(counts)}
    for name, tree in sides.items():
        for n in sorted(counts):
            if name != "this tree" and n not in (0, args.baseline_continuations):
                continue
            store, tid = crafted[n]
            for what in ("show", "page", "export"):
                r = results[name][f"crafted_{n}_{what}"] = read(tree, what, store, tid)
                print(
                    f"{name:>10} base + {n:>5} continuations  {what:<7} {r['ms']:>9,.0f} ms  "
                    f"peak {r['peak_mb']:>7,.0f} MB",
                    flush=True,
                )
    ours = results["this tree"]
    for what in ("show", "page", "export"):
        ratio = ours[f"crafted_{args.continuations}_{what}"]["peak_mb"] / ours[f"crafted_0_{what}"]["peak_mb"]
        results.setdefault("ratios", {})[what] = round(ratio, 2)
        print(f"{what}: {args.continuations} continuations peak at {ratio:.2f}x one read of the base (goal <= 3)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.baseline:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(sides[args.baseline])], check=False
        )


if __name__ == "__main__":
    main()
