"""A trajectory of hundreds of turns on the viewer: its page draws a window of spans in detail with
the tree whole, each span a link to the window that draws it; its search reads span by span and
stops at a bound, saying so."""

from __future__ import annotations

import asyncio
import re

import pytest

from rollscope import tracing
from rollscope.agentloops.llm_client import TracedLLMClient
from rollscope.store.reader import TraceStore
from rollscope.viewer.views import SEARCH_MATCHES, WINDOW_SPANS

TURNS = 300


class Server:
    """The LLM server, a test double: a short reply at once."""

    async def generate(self, request_id, *, prompt_ids, sampling_params):
        return {"token_ids": [21, 22, 23], "stop_reason": "stop"}


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """One trajectory of ``TURNS`` llm turns, each followed by a tool call, through the tracing API."""
    trace_dir = tmp_path_factory.mktemp("long")
    tracing.init_tracing(trace_dir=str(trace_dir), sidecar=False)

    @tracing.rollout_trace_op(kind="tool", name="search")
    async def search(turn: int) -> dict:
        return {"text": f"result {turn}: the common word here" + (" and a rare word" if turn == TURNS - 1 else "")}

    async def loop():
        with tracing.rollout_trace_attr(step=0, sample_index=0):
            prompt, client = [1, 2, 3], TracedLLMClient(Server())
            for turn in range(TURNS):
                out = await client.generate(f"r{turn}", prompt_ids=prompt, sampling_params={})
                await search(turn)
                prompt = prompt + out["token_ids"] + [turn]

    asyncio.run(loop())
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    [t] = TraceStore(trace_dir).trajectories()
    return trace_dir, TraceStore(trace_dir).get(t.id)


def page(trace_dir, target: str) -> str:
    from rollscope.viewer.server import Viewer

    status, _, body = Viewer(str(trace_dir)).handle(target)
    assert status == 200, body[:500]
    return body.decode()


def drawn(html: str) -> set[str]:
    """The spans drawn in detail (their ``<details class="span-detail">``)."""
    return set(re.findall(r'id="span-([^"]+)">\s*<details class="span-detail"', html))


def test_the_page_draws_a_window_of_spans_and_lists_every_span(long_run):
    trace_dir, record = long_run
    html = page(trace_dir, f"/t/{record.id}")
    assert len(record.spans) == 2 * TURNS
    assert len(drawn(html)) == WINDOW_SPANS and 'id="window-next"' in html and 'id="window-previous"' not in html
    outline = html.split('id="outline"', 1)[1].split("</nav>", 1)[0]
    assert outline.count("<a href=") == 2 * TURNS  # (the tree whole: every span, each a link)
    late = sorted(record.spans, key=lambda s: s.start_ns)[-1]
    assert f"?at={late.id}#span-{late.id}" in outline


def test_a_span_past_the_first_window_is_drawn_on_the_page_its_link_opens(long_run):
    trace_dir, record = long_run
    late = sorted(record.spans, key=lambda s: s.start_ns)[-1]
    html = page(trace_dir, f"/t/{record.id}?at={late.id}")
    assert late.id in drawn(html) and 'id="window-previous"' in html and 'id="window-next"' not in html
    assert "result 299" in html


def test_a_search_finds_what_only_the_last_span_holds(long_run):
    trace_dir, record = long_run
    html = page(trace_dir, f"/t/{record.id}?q=rare+word")
    assert "1 span matches" in html and 'id="search-stopped"' not in html


def test_a_search_matching_every_span_stops_at_its_bound_and_says_so(long_run):
    trace_dir, record = long_run
    html = page(trace_dir, f"/t/{record.id}?q=common+word")
    assert f"{SEARCH_MATCHES} spans match" in html and 'id="search-stopped"' in html
