"""The viewer over HTTP on 127.0.0.1: pages, filters, escaping, refusals, a store still being written."""

import os
import re
import socket
import threading

import httpx

from rollscope import tracing
from rollscope.store import TraceStore
from rollscope.store.compaction import compact
from rollscope.store.segments import SEGMENTS
from rollscope.viewer.server import make_server
from tests.viewer.conftest import HOSTILE, record, serving


def get(server, path):
    return httpx.get(server + path, timeout=30)


def ids_on(page):
    return re.findall(r'href="/t/([0-9a-f]+)"', page)


def test_table_filters_and_pages(server, store_dir):
    page = get(server, "/").text
    assert "24 of 24 match" in page and len(set(ids_on(page))) == 24
    assert "7 of 24 match" not in page
    filtered = get(server, "/?step=1&sample=0&rollout=").text
    assert "4 of 24 match" in filtered
    assert "6 of 24 match" in get(server, "/?tool_errors=yes").text  # rollout 3 of every group
    assert "12 of 24 match" in get(server, "/?min_reward=1").text
    with TraceStore(store_dir) as store:
        best = store.trajectories(order_by="reward", descending=True, limit=1)[0]
    assert ids_on(get(server, "/?sort=reward&desc=1").text)[0] == best.id
    # each row says when it started (sortable) and its whole task on hover
    assert re.search(r'<td class="started">20\d\d-\d\d-\d\d \d\d:\d\d:\d\d</td>', page) and 'id="sort-start"' in page
    assert '<td class="task" title="What is 0 + 0?">What is 0 + 0?</td>' in page


def test_trajectory_page_has_the_span_tree(server, store_dir):
    with TraceStore(store_dir) as store:
        t = store.trajectories(step=2, sample_index=1, rollout_n=3)[0]
    page = get(server, f"/t/{t.id}").text
    assert "The answer is 5." in page and "calculator: bad expression" in page
    assert 'class="span kind-tool span-error"' in page
    assert "20 → 13 tokens" in page and "What is 2 + 3?" in page
    assert f'id="reward">{t.reward:.3g}<' in page


def test_trace_content_is_escaped(server, store_dir):
    with TraceStore(store_dir) as store:
        t = store.trajectories(step=0, sample_index=0, rollout_n=1)[0]
    response = get(server, f"/t/{t.id}")
    assert HOSTILE not in response.text and "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in response.text
    assert "script-src 'none'" in response.headers["content-security-policy"]


def test_compare_group_and_steps(server, store_dir):
    with TraceStore(store_dir) as store:
        group = store.group(1, 0)
    page = get(server, "/compare?" + "&".join(f"id={r.id}" for r in group[:3])).text
    assert all(r.id in page for r in group[:3]) and "The answer is 1." in page and "The answer is 3." in page
    assert "differs" in page
    page = get(server, "/group?step=1&sample=0").text
    assert 'id="mean">0.6<' in page  # rewards 0.1, 1.1, 0.1, 1.1
    assert "+0.500" in page and "-0.500" in page and "+1.00" in page
    page = get(server, "/steps").text
    assert page.count("<polyline") == 8 and "tokens per trajectory" in page and "zero-variance GRPO groups" in page
    assert re.search(r">2</a></td><td>8</td><td>0.7</td>", page)  # step 2: 8 trajectories, mean 0.7


def test_bad_requests_and_traversal_are_refused(server):
    assert get(server, "/compare?id=only-one").status_code == 400
    assert get(server, "/?step=x").status_code == 400
    assert get(server, "/t/nope").status_code == 404
    for path in (
        "/static/../../etc/passwd",
        "/static/%2e%2e/%2e%2e/etc/passwd",
        "/t/../../etc/passwd",
        "/../rollscope/viewer/server.py",
        "/static/style.css/../../server.py",
    ):
        response = httpx.Client().send(httpx.Request("GET", server + path), follow_redirects=False)
        assert response.status_code == 404, path
        assert "root:" not in response.text and "import" not in response.text
    assert get(server, "/static/style.css").headers["content-type"].startswith("text/css")


def test_binds_to_localhost_by_default(store_dir):
    from rollscope.viewer.server import make_server

    httpd = make_server(str(store_dir), port=0)
    try:
        assert httpd.server_address[0] == "127.0.0.1"
    finally:
        httpd.server_close()


def test_a_refresh_shows_new_trajectories(server, store_dir):
    before = int(re.search(r"(\d+) of \d+ match", get(server, "/").text).group(1))
    record(store_dir, steps=1, samples=1, rollouts=2, experiment="later")  # another writer, another shard
    after = get(server, "/").text
    assert f"{before + 2} of {before + 2} match" in after
    assert f"2 of {before + 2} match" in get(server, "/?experiment=later").text


def test_only_its_own_host_names_are_answered(server, store_dir):
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends its own Host."""
    port = server.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.", ""):
        response = httpx.get(server + "/", headers={"Host": host}, timeout=30)
        assert response.status_code == 421, host
        assert "trajector" not in response.text
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", "127.0.0.1"):
        assert httpx.get(server + "/", headers={"Host": host}, timeout=30).status_code == 200, host
    from rollscope.viewer.server import make_server

    httpd = make_server(str(store_dir), port=0, allowed_hosts=("traces.lab.internal",))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        assert httpx.get(url, headers={"Host": "traces.lab.internal"}, timeout=30).status_code == 200
        assert httpx.get(url, headers={"Host": "evil.example"}, timeout=30).status_code == 421
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_integers_past_64_bits_are_a_bad_request(server):
    huge = str(2**64)
    for path in (
        f"/?page={huge}",
        f"/?step={huge}",
        f"/?sample={huge}",
        f"/group?step={huge}&sample=1",
        f"/group?step=0&sample={huge}",
        f"/steps?step=-{huge}",
    ):
        response = get(server, path)
        assert response.status_code == 400, path
        assert "out of range" in response.text


def test_half_sent_requests_do_not_hold_the_server(server, monkeypatch):
    """Idle connections that never finish their request are dropped after the read timeout; the
    server keeps answering meanwhile (no timing asserted: only that it answers and they close)."""
    from rollscope.viewer.server import _Handler

    assert _Handler.timeout is not None and _Handler.timeout > 0  # the server has a read timeout
    monkeypatch.setattr(_Handler, "timeout", 3)  # shorter here (its own is 10 s); the rule is the same
    host, port = server.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(50)]
    try:
        for s in idle:
            s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line that ends it
        assert get(server, "/").status_code == 200
        idle[0].settimeout(60)
        assert idle[0].recv(100) == b""  # the server closed it (after its read timeout)
    finally:
        for s in idle:
            s.close()


def _publish(shared, local, experiment, trajectories):
    """One writer of the shared-filesystem layout: its trajectories end up in sealed segments."""
    tracing.init_tracing(trace_dir=str(shared), local_dir=str(local), sidecar=False, experiment=experiment)
    for i in range(trajectories):
        with tracing.rollout_trace_attr(step=i, sample_index=0, rollout_n=0):
            with tracing.trace_span("llm.generate", kind="llm") as s:
                s.outputs = {"response_text": f"reply {i}"}
            tracing.set_reward(1.0)
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing(30)


def _open_files_under(directory):
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


def test_one_store_serves_concurrent_requests_and_follows_new_and_compacted_segments(tmp_path):
    shared = tmp_path / "shared"
    for w in range(3):
        _publish(shared, tmp_path / f"node{w}", f"w{w}", 4)
    httpd = make_server(str(shared), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        paths = ["/", "/?sort=reward&desc=1", "/steps", "/insights", "/live", "/?experiment=w1", "/?step=2"]
        statuses = []

        def client():
            with httpx.Client(base_url=url) as c:
                statuses.extend(c.get(p).status_code for p in paths * 3)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert statuses == [200] * 8 * 3 * len(paths)
        segments = sorted(str(p) for p in (shared / SEGMENTS).glob("*.rstrace"))
        assert len(segments) >= 3
        opened = _open_files_under(shared)  # each segment open at most once, for all 8 clients' threads
        assert len(opened) == len(set(opened)) and set(opened) <= set(segments)

        _publish(shared, tmp_path / "node3", "w3", 2)  # a new writer's segment shows at the next request
        assert "2 of 14 match" in httpx.get(url + "/?experiment=w3").text
        compact(shared, min_segments=2)
        assert "14 of 14 match" in httpx.get(url + "/").text
        remaining = [str(p) for p in (shared / SEGMENTS).glob("*.rstrace")]
        assert len(remaining) == 1 and set(_open_files_under(shared)) <= set(remaining)  # none of the replaced
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_every_retokenization_difference_is_listed_as_text_with_its_cause(tmp_path):
    """The run span's chat-template check with two differences: the banner lists both, each with
    its cause and both sides as text (escaped: a template's text is markup)."""
    from rollscope.semconv import RETOKENIZATION

    check = {
        "match": False,
        "rollout_length": 40,
        "template_length": 44,
        "position": 12,
        "window_start": 4,
        "rollout": [1, 2],
        "template": [1, 3],
        "difference_count": 2,
        "cause": "text",
        "differences": [
            {
                "position": 12,
                "template_position": 12,
                "rollout": [],
                "template": [7, 8],
                "rollout_text": "",
                "template_text": "<think>\n\n</think>\n\n",
                "cause": "text",
            },
            {
                "position": 30,
                "template_position": 34,
                "rollout": [9],
                "template": [10, 11],
                "rollout_text": '{"a":1}',
                "template_text": '{"a": 1}',
                "cause": "whitespace",
            },
        ],
    }
    tracing.init_tracing(trace_dir=str(tmp_path))
    with (
        tracing.rollout_trace_attr(step=0, sample_index=0),
        tracing.trace_span("Loop.run", kind="agent", **{RETOKENIZATION: check}),
    ):
        pass
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    with TraceStore(tmp_path) as store:
        [t] = store.trajectories()
    with serving(tmp_path) as url:
        page = get(url, f"/t/{t.id}").text
    items = re.findall(r"<li>at (\d+) \((\w+)\)", page)
    assert items == [("12", "text"), ("30", "whitespace")]
    assert "template <code>&lt;think&gt;" in page and "<think>" not in page


def test_each_span_lists_its_attributes_and_an_llm_turn_its_sampling(recorded):
    """What Weave's call page shows, span by span: an llm span's sampling settings (temperature,
    top_p) and whether its tool calls were constrained, and every span's attributes."""
    from rollscope.viewer.server import Viewer

    traces, _ = recorded
    with TraceStore(traces) as store:
        tid = store.trajectories(limit=1)[0].id
    viewer = Viewer(str(traces))
    status, _, body = viewer.handle(f"/t/{tid}")
    viewer.store().close()
    page = body.decode()
    assert status == 200
    panels = page.split('<details class="facts-panel">')[1:]
    llm = [p for p in panels if p.startswith("<summary>attributes · sampling")]
    assert llm and len(panels) > len(llm)  # (the tool spans have theirs)
    first = llm[0]
    for key in ("sampling · temperature", "sampling · top_p", "tool calls constrained", "gen_ai.usage.input_tokens"):
        assert f'<th class="mono">{key}</th>' in first, (key, first[:800])


def test_compare_shows_each_trajectorys_task_and_ground_truth(recorded):
    """Rewards of 1 and 0 side by side come with what each was asked and the right answer."""
    from rollscope.viewer.server import Viewer

    traces, truth = recorded
    with TraceStore(traces) as store:
        group = store.trajectories(step=2, sample_index=0)
    viewer = Viewer(str(traces))
    status, _, body = viewer.handle("/compare?" + "&".join(f"id={t.id}" for t in group[:2]))
    viewer.store().close()
    page = body.decode()
    assert status == 200
    row = page[page.index('<tr class="task">') : page.index("</tr>", page.index('<tr class="task">'))]
    [answer] = [a for q, a in truth.items() if q in row]  # (its question is in the row, once)
    assert row.count(f'<span class="mono ground-truth">{answer}</span>') == 2, row


def test_the_wandb_run_column_links_to_the_runs_trajectories(tmp_path):
    """A store whose trajectories carry their W&B run: a column with the run's id, each a link that
    filters to that run; a store without one has no such column."""
    from tests.sources.wandb_runs import traced_runs

    d = tmp_path / "traces"
    traced_runs(d, ["ent/proj/r8x2k1", "ent/proj/r8x2k1", "ent/proj/q7", None])
    with serving(d) as url:
        page = get(url, "/").text
        assert "<th>W&amp;B run</th>" in page and page.count('title="ent/proj/r8x2k1">r8x2k1</a>') == 2
        assert "/?wandb_run=ent%2Fproj%2Fr8x2k1" in page
        only = get(url, "/?wandb_run=ent%2Fproj%2Fr8x2k1").text
        assert "2 of 4 match" in only and len(set(ids_on(only))) == 2
        assert "1 of 4 match" in get(url, "/?wandb_run=q7").text


def test_no_wandb_run_column_without_a_run(server):
    assert "W&amp;B run</th>" not in get(server, "/").text


def test_compare_lines_trajectories_up_by_model_turn_with_each_turns_tool_calls(server, store_dir, tmp_path):
    """Row K is model turn K on every side, the tool calls that answered it under it: a tool call
    is never beside an llm call; a group of one rollout offers no compare (it needs two)."""
    with TraceStore(store_dir) as store:
        group = store.group(1, 0)
        llm_turns = max(store.get(r.id).num_llm_calls for r in group[:2])
    page = get(server, "/compare?" + "&".join(f"id={r.id}" for r in group[:2])).text
    rows = re.findall(r'<tr class="turn">(.*?)</tr>', page, re.S)
    assert len(rows) == llm_turns
    for row in rows:
        for cell in re.findall(r"<td class=[^>]*>(.*?)</td>", row, re.S):
            names = re.findall(r'<span class="name kind-(\w+)">', cell)
            assert names[:1] == ["llm"] and set(names[1:]) <= {"tool"}, names  # the turn first, its calls after
    assert "per-call ids" not in page
    single = tmp_path / "single"
    record(single, steps=1, samples=1, rollouts=1)
    from rollscope.viewer.server import Viewer

    viewer = Viewer(str(single))
    status, _, body = viewer.handle("/group?step=0&sample=0")
    viewer.store().close()
    assert status == 200 and "side by side" not in body.decode() and "1 rollout ·" in body.decode()


def test_a_rescoring_stored_without_a_report_is_listed_and_shown_with_its_rewards(tmp_path):
    """A rescoring file is read back as found: one saved by other code than ``rollscope rescore``
    (no report of what it changed) still lists and opens, saying it has rewards only."""
    from rollscope.store.rescorings import RescoredReward
    from rollscope.viewer.server import Viewer

    record(tmp_path / "traces", steps=1, samples=1, rollouts=2)
    store = TraceStore(tmp_path / "traces")
    rows = [RescoredReward(t.id, t.step, str(t.sample_index), t.reward, 0.0, {}) for t in store.trajectories()]
    store.save_rescoring("bare", {"reward": "a function of mine"}, rows)
    viewer = Viewer(str(tmp_path / "traces"))
    status, _, listed = viewer.handle("/rescorings")
    assert status == 200 and b"bare" in listed
    status, _, page = viewer.handle("/rescorings?name=bare")
    assert status == 200 and b'id="no-report"' in page and b"2 trajectories" in page


def test_a_page_that_fails_is_a_500_naming_the_error_and_the_rest_still_answer(store_dir, monkeypatch):
    """Any exception in a page (here a test double: the steps page made to raise, as a bug or a
    row no reader expected would) costs that page: a 500 that names it; every other page answers."""
    from rollscope.viewer.server import Viewer

    viewer = Viewer(str(store_dir))

    def broken(*args):
        raise ArithmeticError("a value no page expected")

    monkeypatch.setattr(viewer, "steps", broken)
    viewer.routes["/steps"] = viewer.steps
    status, _, page = viewer.handle("/steps")
    assert status == 500 and b"ArithmeticError: a value no page expected" in page
    assert viewer.handle("/")[0] == 200 and viewer.handle("/insights")[0] == 200
    assert viewer.handle("/steps")[0] == 500  # (and again: nothing was left locked)


def test_a_page_that_waits_holds_up_no_other_page(store_dir, monkeypatch):
    """Requests run side by side on the viewer's one store: while one page waits (a test double:
    the metrics page made to wait, as one reading a long W&B file or a slow shared filesystem
    would), the index, a trajectory's page and the insights answer from other threads."""
    import threading

    from rollscope.viewer.server import Viewer

    viewer = Viewer(str(store_dir))
    waiting, release = threading.Event(), threading.Event()

    def slow(*args):
        waiting.set()
        assert release.wait(60)
        return "done"

    monkeypatch.setattr(viewer, "metrics", slow)
    viewer.routes["/metrics"] = viewer.metrics
    held = threading.Thread(target=viewer.handle, args=("/metrics",))
    held.start()
    try:
        assert waiting.wait(60)
        answers = []
        for target in ("/", "/insights", f"/t/{TraceStore(store_dir).trajectories(limit=1)[0].id}"):
            other = threading.Thread(target=lambda t=target: answers.append(viewer.handle(t)[0]))
            other.start()
            other.join(60)
            assert not other.is_alive(), f"{target} waited for another page"
        assert answers == [200, 200, 200]
    finally:
        release.set()
        held.join(60)


def test_a_rescoring_read_for_one_trajectory_holds_that_trajectory_only(tmp_path):
    """What a trajectory's page asks of each rescoring: its row, not the run's."""
    from rollscope.store.rescorings import RescoredReward

    record(tmp_path / "traces", steps=1, samples=2, rollouts=2)
    store = TraceStore(tmp_path / "traces")
    ids = [t.id for t in store.trajectories()]
    store.save_rescoring("all", {"reward": "f"}, [RescoredReward(i, 1, "0", 1.0, 0.5, {}) for i in ids])
    assert set(store.rescoring("all").rewards) == set(ids)
    assert list(store.rescoring("all", ids=[ids[2], "no-such-id"]).rewards) == [ids[2]]
