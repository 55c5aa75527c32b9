"""A store with damaged shards, and one on a read-only file system: everything healthy is still
served (API, CLI, viewer, push), with one warning naming each damaged shard."""

import shutil
import subprocess
import sys
import threading

import httpx
import pytest

from rollscope import tracing
from rollscope.store import TraceStore

pytestmark = pytest.mark.slow


def record(trace_dir, experiments=("a", "b", "c")):
    """One shard per experiment (a tracer each), 3 trajectories in each."""
    for experiment in experiments:
        tracing.init_tracing(experiment=experiment, trace_dir=str(trace_dir))
        for i in range(3):
            with tracing.rollout_trace_attr(step=1, sample_index=i), tracing.trace_span("llm.generate", kind="llm"):
                pass
        tracing.shutdown_tracing()
    return sorted(trace_dir.glob("*.rstrace"))


@pytest.fixture
def damaged(tmp_path):
    trace_dir = tmp_path / "traces"
    shards = record(trace_dir)
    data = shards[0].read_bytes()
    shards[0].write_bytes(data[: len(data) // 3])  # truncated mid-write
    shards[1].write_bytes(b"\x00garbage" * 512)  # overwritten
    return trace_dir, shards


def test_the_api_skips_damaged_shards_and_names_them(damaged, caplog):
    trace_dir, shards = damaged
    with TraceStore(trace_dir) as store:
        records = store.trajectories()
        assert len(records) == 3 and store.count() == 3
        assert set(store.damaged) == {shards[0], shards[1]}
        assert len(store.get(records[0].id).spans) == 1
    warnings = [r.getMessage() for r in caplog.records if "damaged shard" in r.getMessage()]
    assert len(warnings) == 2 and all(any(s.name in w for s in shards[:2]) for w in warnings)


def test_the_cli_lists_the_healthy_shards_with_one_warning_each(damaged):
    trace_dir, shards = damaged
    result = subprocess.run(
        [sys.executable, "-m", "rollscope.cli", "traces", "ls", "--dir", str(trace_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "3 of 3 trajectories" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert {shards[0].name, shards[1].name} == {
        name for line in lines for name in (shards[0].name, shards[1].name) if name in line
    }


def test_the_viewer_serves_the_healthy_shards(damaged):
    from rollscope.viewer.server import make_server

    trace_dir, _ = damaged
    httpd = make_server(str(trace_dir), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        for page in ("/", "/steps", "/group?step=1&sample=0"):
            assert httpx.get(url + page, timeout=30).status_code == 200, page
        assert "3 of 3 match" in httpx.get(url + "/", timeout=30).text
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_finished_store_on_a_read_only_file_system_is_readable(tmp_path):
    """Read by a process that sees the whole file system read-only (bubblewrap's --ro-bind / /)."""
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is needed for this test: apt-get install bubblewrap (make install does it)")
    trace_dir = tmp_path / "traces"
    record(trace_dir, experiments=("ro",))
    code = (
        f"from rollscope.store import TraceStore\ns = TraceStore({str(trace_dir)!r})\nrecords = s.trajectories()\n"
        "print(len(records), len(s.get(records[0].id).spans), len(s.damaged))"
    )
    result = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["3", "1", "0"]


class Collected:
    """Test double: a push destination that keeps what it is sent."""

    def __init__(self):
        self.records = []

    def write(self, record):
        self.records.append(record)

    def flush(self):
        pass


def test_push_sends_the_healthy_shards(damaged, caplog):
    from rollscope.datasets.push import push

    trace_dir, shards = damaged
    destination = Collected()
    progress = list(push("weave", str(trace_dir), destination=destination))
    assert progress[-1] == (3, 3)
    assert len({r.experiment for r in destination.records}) == 1  # the healthy shard's, whole
    assert all(len(r.spans) == 1 for r in destination.records)
    assert any(shards[0].name in r.getMessage() for r in caplog.records)
