"""What a read costs: each llm turn is read as stored (what it adds to the turn it continues), and
a prompt is made whole only when asked (rollscope/trajectory/turns.py). A store whose many turns
all continue one long prompt (what a shared store can hold, written here as a copied row) costs
its readers what the long prompt costs once, not once per turn."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

from rollscope import tracing
from rollscope.agentloops.llm_client import TracedLLMClient
from rollscope.semconv import PROMPT_BASE, PROMPT_CONTINUES, PROMPT_UNRESOLVED
from rollscope.store.reader import TraceStore
from tests.trajectory.crafted import continue_last_turn

BASE = 2**17


class Server:
    """The LLM server, a test double: five tokens back, at once."""

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        return {"token_ids": [11, 12, 13, 14, 15], "stop_reason": "stop"}


def crafted(trace_dir: Path, continuations: int) -> str:
    """A trajectory whose first turn's prompt is ``BASE`` ids and ``continuations`` turns each
    continuing it (the second turn's row copied); returns its id."""
    tracing.init_tracing(trace_dir=str(trace_dir), sidecar=False)

    async def loop():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt = list(range(1000, 1000 + BASE))
            client = TracedLLMClient(Server())
            out = await client.generate("r0", prompt_ids=prompt, sampling_params={})
            await client.generate("r1", prompt_ids=prompt + out["token_ids"] + [7, 8], sampling_params={})

    asyncio.run(loop())
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    continue_last_turn(trace_dir, continuations)
    [t] = TraceStore(trace_dir).trajectories()
    return t.id


def peak_of(read) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_store_of_many_turns_continuing_one_long_prompt_is_read_at_the_cost_of_that_prompt(tmp_path):
    """200 turns continuing one 2^17-id prompt: ``get``, ``traces show``, the viewer's page and an
    export each peak under 3x what the same read of the long turn alone does (an eager reader
    built 200 prompts of 2^17 ids: 26M ids)."""
    import contextlib
    import io

    from rollscope.cli import main as cli_main
    from rollscope.viewer.server import Viewer

    alone, many = tmp_path / "alone", tmp_path / "many"
    ids = {"alone": crafted(alone, 0), "many": crafted(many, 200)}

    def reads(store: Path, trajectory_id: str) -> dict[str, int]:
        def show():
            with contextlib.redirect_stdout(io.StringIO()):
                cli_main(["traces", "show", trajectory_id, "--dir", str(store)])

        def export():
            with contextlib.redirect_stdout(io.StringIO()):
                cli_main(["export", "--format", "jsonl", "--dir", str(store), str(store / "out.jsonl")])

        viewer = Viewer(str(store))
        viewer.handle("/")
        return {
            "get": peak_of(lambda: TraceStore(store).get(trajectory_id).spans),
            "show": peak_of(show),
            "page": peak_of(lambda: viewer.handle(f"/t/{trajectory_id}")),
            "export": peak_of(export),
        }

    base, costs = reads(alone, ids["alone"]), reads(many, ids["many"])
    assert all(costs[what] <= 3 * base[what] for what in base), (costs, base)


def test_a_prompt_is_made_whole_only_when_asked_and_exactly(tmp_path):
    trajectory_id = crafted(tmp_path, 3)
    record = TraceStore(tmp_path).get(trajectory_id)
    llm = sorted((s for s in record.spans if s.kind == "llm"), key=lambda s: s.start_ns)
    first, *rest = llm
    whole = [*range(1000, 1000 + BASE), 11, 12, 13, 14, 15, 7, 8]
    for span in rest:  # (each as stored: what it adds, and which turn it continues)
        assert PROMPT_BASE in span.inputs and span.attributes[PROMPT_CONTINUES]["span"] == first.id
        assert record.prompts.length(span) == len(whole) and record.prompts.ids(span) == whole
    assert record.prompts.ids(first) == whole[:BASE] and record.prompts.base(first) is None


def test_a_chain_of_continuations_longer_than_pythons_recursion_limit_is_read(tmp_path):
    """2,000 turns each continuing the one before: checked and made whole without recursion."""
    tracing.init_tracing(trace_dir=str(tmp_path), sidecar=False)

    async def loop():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt, client = [1, 2, 3], TracedLLMClient(Server())
            for turn in range(2000):
                out = await client.generate(f"r{turn}", prompt_ids=prompt, sampling_params={})
                prompt = prompt + out["token_ids"] + [turn]

    asyncio.run(loop())
    assert tracing.flush_tracing(60)
    [t] = TraceStore(tmp_path).trajectories()
    record = TraceStore(tmp_path).get(t.id)
    last = max((s for s in record.spans if s.kind == "llm"), key=lambda s: s.start_ns)
    assert record.prompts.length(last) == 3 + 1999 * 6
    assert record.prompts.ids(last)[-6:] == [11, 12, 13, 14, 15, 1998]
    assert not any(PROMPT_UNRESOLVED in (s.attributes or {}) for s in record.spans)
