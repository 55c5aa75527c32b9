"""A store others have written to (a shared filesystem): crafted rows, payloads and shards each cost
only themselves. Every case ends with the good trajectories still readable through the API, the
CLI and the viewer, and with what could not be read marked where it is and counted."""

import sqlite3
import subprocess
import sys
import time

import httpx
import pytest
import zstandard

from rollscope import tracing
from rollscope.semconv import UNREADABLE
from rollscope.store import TraceStore
from rollscope.store.schema import MAX_PAYLOAD_BYTES
from tests.viewer.conftest import HOSTILE_TAGS, assert_drawn_as_text, serving

pytestmark = pytest.mark.slow
HOSTILE_HTML = '<meta http-equiv="refresh" content="0;url=https://example.invalid/">'


def record(trace_dir, n=6):
    """``n`` trajectories of one llm and one tool span each, in one shard."""
    tracing.init_tracing(experiment="hostile", trace_dir=str(trace_dir))
    for i in range(n):
        with tracing.rollout_trace_attr(step=1, sample_index=i, task=f"task {i}"):
            with tracing.trace_span("llm.generate", kind="llm", inputs={"prompt_text": f"q{i}"}) as s:
                s.outputs = {"response_text": f"a{i}"}
            with tracing.trace_span("calc.execute", kind="tool", inputs={"expression": "1+1"}) as s:
                s.outputs = {"text": "2"}
    assert tracing.flush_tracing(30)
    tracing.shutdown_tracing()
    [shard] = sorted(trace_dir.glob("*.rstrace"))
    return shard


def zstd_bomb(size):
    """A zstd frame of ``size`` zero bytes written in pieces (no declared size, small on disk)."""
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    piece = b"\0" * (1 << 20)
    frame = b"".join(compressor.compress(piece) for _ in range(size >> 20))
    return frame + compressor.flush()


@pytest.fixture
def hostile(tmp_path):
    trace_dir = tmp_path / "traces"
    shard = record(trace_dir)
    with sqlite3.connect(shard) as db:
        ids = [r[0] for r in db.execute("SELECT id FROM trajectories ORDER BY sample_index")]
        db.execute("UPDATE trajectories SET num_llm_calls = ? WHERE id = ?", [HOSTILE_HTML, ids[0]])
        db.execute("UPDATE trajectories SET attributes = '[1, 2]' WHERE id = ?", [ids[1]])
        db.execute("UPDATE trajectories SET attributes = '{not json' WHERE id = ?", [ids[2]])
        spans = {r[0]: r[1] for r in db.execute("SELECT trajectory_id, id FROM spans WHERE kind = 'tool'")}
        db.execute("UPDATE spans SET payload = ? WHERE id = ?", [b"\x01 not json", spans[ids[3]]])
        db.execute("UPDATE spans SET payload = ? WHERE id = ?", [zstd_bomb(256 << 20), spans[ids[4]]])
    # a second shard whose "trajectories" is a view over a query that never ends
    trap = trace_dir / "trap.rstrace"
    with sqlite3.connect(trap) as db:
        db.execute(
            "CREATE VIEW trajectories AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
            "SELECT i AS id FROM n"
        )
    return trace_dir, ids, trap


def test_the_api_reads_every_good_row_and_marks_each_bad_one(hostile, caplog):
    trace_dir, ids, trap = hostile
    with TraceStore(trace_dir) as store:
        records = {r.id: r for r in store.trajectories()}
        assert set(records) == set(ids)  # all six: the bad ones marked, none lost
        assert trap in store.damaged and "view" in store.damaged[trap]
        assert records[ids[0]].num_llm_calls is None and "num_llm_calls is" in records[ids[0]].attributes[UNREADABLE]
        assert "a JSON list, not an object" in records[ids[1]].attributes[UNREADABLE]
        assert "not JSON" in records[ids[2]].attributes[UNREADABLE]
        assert records[ids[5]].attributes == {"task": "task 5", "answer": "a5"} and records[ids[5]].num_llm_calls == 1
        bad_json = {s.kind: s for s in store.get(ids[3]).spans}
        assert "not JSON" in bad_json["tool"].attributes[UNREADABLE] and bad_json["llm"].outputs == {
            "response_text": "a3"
        }
        bomb = {s.kind: s for s in store.get(ids[4]).spans}
        assert f"more than {MAX_PAYLOAD_BYTES:,} bytes" in bomb["tool"].attributes[UNREADABLE]
        assert [s.outputs for s in store.get(ids[5]).spans] == [{"response_text": "a5"}, {"text": "2"}]
        assert sum(store.unreadable.values()) == 5
    said = [r.getMessage() for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(said) == 1  # once per shard, naming it
    assert str(trace_dir) in said[0]


def test_the_cli_lists_and_shows_them_in_bounded_time(hostile):
    trace_dir, ids, _ = hostile
    started = time.monotonic()
    listed = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "ls", "--dir", str(trace_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert all(i in listed.stdout for i in ids) and HOSTILE_HTML not in listed.stdout
    assert "trap.rstrace" in listed.stderr and "view" in listed.stderr
    for tid in (ids[3], ids[4]):
        shown = subprocess.run(
            [sys.executable, "-m", "rollscope.cli", "traces", "show", tid, "--dir", str(trace_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert "calc.execute" in shown.stdout and "llm.generate" in shown.stdout
    assert time.monotonic() - started < 120  # (the view's query would never have returned)


def test_the_viewer_shows_a_hostile_count_as_a_marker(hostile):
    trace_dir, ids, _ = hostile
    with serving(trace_dir) as url:
        table = httpx.get(url + "/", timeout=60).text
        page = httpx.get(f"{url}/t/{ids[0]}", timeout=60).text
    assert "<meta http-equiv" not in table and "<meta http-equiv" not in page
    assert 'class="bad-value"' in table and all(i in table for i in ids)


def test_hostile_values_in_every_column_are_drawn_as_text_in_chromium(tmp_path, browser):
    """Each tag a page's CSP does not stop, in the count columns (a marker) and in the text ones
    (shown as the characters they are), on the listing and the trajectory page."""
    trace_dir = tmp_path / "traces"
    shard = record(trace_dir, n=2)
    with sqlite3.connect(shard) as db:
        [tid, _] = [r[0] for r in db.execute("SELECT id FROM trajectories ORDER BY sample_index")]
        for column, tag in zip(("num_llm_calls", "num_tool_calls", "num_errors"), HOSTILE_TAGS, strict=True):
            db.execute(f"UPDATE trajectories SET {column} = ? WHERE id = ?", [tag, tid])
        db.execute(
            "UPDATE trajectories SET agent_name = ?, experiment = ?, status = 'error', error_message = ? WHERE id = ?",
            [*HOSTILE_TAGS, tid],
        )
    with serving(trace_dir) as url:
        assert_drawn_as_text(browser, url + "/", texts=HOSTILE_TAGS[:2], shot="hostile-store-list")
        assert_drawn_as_text(browser, f"{url}/t/{tid}", texts=HOSTILE_TAGS[2:], shot="hostile-store-trajectory")


def test_push_sends_every_readable_trajectory_and_says_which_it_left_out(hostile, tmp_path):
    """MLflow (its real client, a SQLite tracking store): the readable trajectories land, each
    marked one is left out and named, progress is recorded, and a second push sends nothing twice."""
    import mlflow

    trace_dir, ids, _ = hostile
    readable = ids[5]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    command = [
        sys.executable,
        "-m",
        "rollscope.cli",
        "push",
        "--to",
        "mlflow",
        "--dir",
        str(trace_dir),
        "--endpoint",
        uri,
        "--project",
        "hostile",
    ]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stderr[-2000:]  # something was left out: said, and not a success
    assert "pushed 1 trajectories to mlflow" in first.stdout and "left out 5" in first.stdout
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert "pushed 0 trajectories" in again.stdout and "left out 5" in again.stdout
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name("hostile")
    [trace] = mlflow.search_traces(experiment_ids=[experiment.experiment_id], return_type="list")
    assert readable in str(trace.info.tags) + str(trace.info.trace_metadata) + str(trace.data.spans[0].attributes)


def test_a_trajectory_nested_thousands_deep_is_drawn_whole(tmp_path):
    """2,000 spans each inside the last (the local store or a Weave project can hold such a tree):
    the page answers, every span on it, the deepest drawn at the viewer's depth bound."""
    import contextlib

    tracing.init_tracing(trace_dir=str(tmp_path))
    with tracing.rollout_trace_attr(step=0, sample_index=0), contextlib.ExitStack() as nest:
        for i in range(2000):
            nest.enter_context(tracing.trace_span(f"level{i}"))
    assert tracing.flush_tracing(60)
    tracing.shutdown_tracing()
    with TraceStore(tmp_path) as store:
        [t] = store.trajectories()
    with serving(tmp_path) as url:
        response = httpx.get(f"{url}/t/{t.id}", timeout=120)
    assert response.status_code == 200
    assert all(f">level{i}<" in response.text for i in (0, 39, 40, 1999))


def test_times_of_the_wrong_type_cost_their_rows_a_marker_and_every_reader_answers(tmp_path):
    """A row whose start_ns is TEXT or the REAL 1e30 (SQLite keeps what it is given): read as no
    time, marked and counted; ``traces ls``, ``export`` and the viewer's pages answer for every row."""
    from rollscope.viewer.server import Viewer

    trace_dir = tmp_path / "traces"
    shard = record(trace_dir, n=3)
    db = sqlite3.connect(shard)
    ids = [r[0] for r in db.execute("SELECT id FROM trajectories ORDER BY id")]
    db.execute("UPDATE trajectories SET start_ns = 'abc' WHERE id = ?", (ids[0],))
    db.execute("UPDATE trajectories SET start_ns = 1e30 WHERE id = ?", (ids[1],))
    db.commit()
    db.close()
    with TraceStore(trace_dir) as store:
        records = {r.id: r for r in store.trajectories(limit=None)}
        assert [records[i].start_ns for i in ids[:2]] == [None, None] and records[ids[2]].start_ns > 0
        assert "start_ns is 'abc'" in records[ids[0]].attributes[UNREADABLE]
        assert records[ids[0]].duration_s is None and store.unreadable[shard] == 2
    for command in (["traces", "ls"], ["export", "--format", "jsonl", str(tmp_path / "out")]):
        done = subprocess.run(
            [sys.executable, "-m", "rollscope.cli", *command, "--dir", str(trace_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stderr)
    viewer = Viewer(str(trace_dir))
    for page in ["/", "/steps", "/live", "/insights", *(f"/t/{i}" for i in ids)]:
        assert viewer.handle(page)[0] == 200, page
