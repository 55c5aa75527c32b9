"""``/live`` while a run writes: a real writer process with one trajectory stuck in a tool; the page
lists it as running (turns so far, time in it) and marks it stalled, shows the finished ones, and
reloads itself with a meta refresh (no script: the page's policy forbids it)."""

import os
import subprocess
import sys
import time

import httpx

from tests.cli.test_tail import REPO, WRITER
from tests.viewer.conftest import serve


def test_live_page_shows_the_running_trajectory_stalled_and_reloads_itself(tmp_path):
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(trace_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert writer.stdout.readline().strip() == "stuck"
        time.sleep(1.5)  # in its tool for longer than the stall bound below
        for url in serve(trace_dir):
            reply = httpx.get(f"{url}/live?stall=1&refresh=3", timeout=30)
            page = reply.text
            assert reply.status_code == 200 and "script-src 'none'" in reply.headers["content-security-policy"]
            assert '<meta http-equiv="refresh" content="3">' in page and "<script" not in page
            running = page.split('id="running"')[1].split("</table>")[0]
            assert running.count("<tr class=") == 1 and "STALLED" in running
            assert "last: llm.generate (llm) ended, after 1 llm turn" in running and "<td>1</td>" in running
            ended = page.split('id="ended"')[1].split("</table>")[0]
            assert ended.count("<tr><td") == 3 and "1 stalled" in page
            quiet = httpx.get(f"{url}/live?refresh=0", timeout=30).text
            assert "http-equiv" not in quiet and "STALLED" not in quiet  # the default bound: 120 s
            assert httpx.get(f"{url}/live?stall=-1", timeout=30).status_code == 400
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "done"
    finally:
        writer.kill()
