"""``--source weave:ENTITY/PROJECT`` against W&B's own Weave trace server (tests.engines, one per
module): the same run traced to the local store and to Weave gives the same answers from both
sources, command by command and field by field; errors are one line and exit 2."""

import json
import subprocess
import sys

import pytest

from rollscope import tracing
from rollscope.cli import main
from rollscope.sources import SourceError, open_source
from tests.conftest import RECORDED_N, RECORDED_SAMPLES, record_run

pytestmark = pytest.mark.slow
PROJECT = "ent/same-run"
SOURCE = f"weave:{PROJECT}"
REWARDS = '''
def inverted(data_source, solution_str, ground_truth, extra_info=None):
    """Right is wrong: every advantage changes sign."""
    return 0.0 if ground_truth in solution_str else 1.0
'''


@pytest.fixture(scope="module")
def same_run(weave_trace_server, tmp_path_factory):
    """One run (two steps of gsm8k-calculator, every 4th tool call failing) traced to the local
    store and to Weave at once, then the trainer's records of step 1 sent to both."""
    tmp = tmp_path_factory.mktemp("same-run")
    traces, _ = record_run(tmp, ["backend=local,weave", f"project={PROJECT}"], steps=(1, 2), failing_every=4)
    store = open_source(None, traces)
    experiment = store.trajectories(limit=1)[0].experiment
    tracing.init_tracing(backend="local,weave", project=PROJECT, experiment=experiment, trace_dir=str(traces))
    for i, t in enumerate(store.trajectories(step=1)):
        tracing.get_tracer().training(
            t.id,
            {
                "step": 1,
                "uid": f"u{t.sample_index}",
                "advantage": 0.5 - i % 2,
                "policy_version": 3,
                "lag": i % 2,
                "logprob_delta_max": 0.1 * i,
                "entropy_mean": 1.0 / (1 + i),
            },
        )
    assert tracing.flush_tracing(120)
    tracing.shutdown_tracing(120)
    store.close()
    return traces


def _answer(capsys, *args):
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def both(capsys, same_run, *args):
    """The command's output from the local store and from Weave."""
    return _answer(capsys, *args, "--dir", str(same_run)), _answer(capsys, *args, "--source", SOURCE)


def test_listings_are_the_same_from_both_sources(same_run, capsys):
    local, weave = both(capsys, same_run, "traces", "ls", "--json", "--limit", "100")
    rows = json.loads(local)
    assert len(rows) == 2 * RECORDED_SAMPLES * RECORDED_N
    assert any(r["num_tool_errors"] for r in rows) and any(r["reward"] for r in rows)
    assert json.loads(weave) == rows
    for args in (["--step", "2"], ["--step", "1", "--sample", "0"], ["--tool-errors"], ["--sort", "reward", "--desc"]):
        local, weave = both(capsys, same_run, "traces", "ls", "--json", *args)
        assert json.loads(weave) == json.loads(local), args
    local, weave = both(capsys, same_run, "traces", "ls", "--step", "2")
    assert weave.splitlines()[:-1] == local.splitlines()[:-1]  # the text listing too, but where it read from
    assert SOURCE in weave.splitlines()[-1]


def test_insights_groups_and_prompt_history_are_the_same(same_run, capsys):
    local, weave = both(capsys, same_run, "insights", "--json")
    found = json.loads(local)
    names = {s["name"] for s in found["signals"]}
    assert {"zero_variance", "tool_errors", "logprob_mismatch", "off_policy_lag"} <= names
    assert any(s["count"] for s in found["signals"] if s["name"] == "tool_errors")
    assert {"answer_collapse", "answer_length_with_reward", "entropy_collapse"} <= names  # reward hacking's too
    assert json.loads(weave) == found
    for args in (
        ["insights", "--json", "--step", "2"],
        ["traces", "group", "1", "0", "--json"],
        ["traces", "prompt", "2", "--json"],
    ):
        local, weave = both(capsys, same_run, *args)
        assert json.loads(weave) == json.loads(local), args


def test_a_trajectory_and_a_diff_are_the_same_span_for_span(same_run, capsys):
    rows = json.loads(_answer(capsys, "traces", "ls", "--json", "--dir", str(same_run), "--step", "1"))
    a, b = rows[0]["id"], rows[1]["id"]
    local, weave = both(capsys, same_run, "traces", "show", a, "--json")
    shown = json.loads(local)
    assert shown["spans"] and shown["training"]["advantage"] is not None
    assert {s["kind"] for s in shown["spans"]} >= {"agent", "llm", "tool"}
    assert json.loads(weave) == shown
    local, weave = both(capsys, same_run, "traces", "diff", a, b, "--json")
    assert json.loads(weave) == json.loads(local)


def test_exports_are_the_same_file(same_run, capsys, tmp_path):
    for fmt in ("jsonl", "sft", "dpo"):
        main(["export", str(tmp_path / f"local.{fmt}"), "--format", fmt, "--dir", str(same_run)])
        main(["export", str(tmp_path / f"weave.{fmt}"), "--format", fmt, "--source", SOURCE])
        local = (tmp_path / f"local.{fmt}").read_text()
        assert local and (tmp_path / f"weave.{fmt}").read_text() == local, fmt


def test_a_rescoring_reports_the_same_and_is_stored_in_weave_beside_the_run(same_run, capsys, tmp_path, monkeypatch):
    (tmp_path / "rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    local, weave = both(capsys, same_run, "rescore", "--reward", "rewards:inverted", "--workers", "2", "--json")
    local, weave = json.loads(local), json.loads(weave)
    assert local["steps"] and any(s["flipped"] for s in local["steps"])
    for report in (local, weave):
        report.pop("seconds"), report.pop("path")
    assert weave == local
    local, weave = both(capsys, same_run, "traces", "ls", "--rescoring", "inverted", "--json", "--limit", "100")
    assert json.loads(weave) == json.loads(local)
    assert all(r["rescored_reward"] is not None for r in json.loads(weave))
    local, weave = both(capsys, same_run, "insights", "--check", "inverted", "--json")  # the reward against it
    checked = [s for s in json.loads(local)["signals"] if s["name"] == "reward_vs_check"]
    assert checked and any(s["count"] for s in checked) and json.loads(weave) == json.loads(local)
    with open_source(SOURCE) as source:  # kept in Weave, not in the throw-away copy
        assert source.rescoring_names() == ["inverted"]
        with pytest.raises(FileNotFoundError, match=r"no rescoring 'other' in weave:ent/same-run .*stored: inverted"):
            source.rescoring("other")


def test_a_steps_listing_fetches_that_step_only(same_run):
    with open_source(SOURCE, step=2) as source:
        assert source.total() == RECORDED_SAMPLES * RECORDED_N  # what the server sent: step 2's roots
        assert {t.step for t in source.trajectories()} == {2}
    with open_source(SOURCE, first_step=2, last_step=2) as source:
        assert source.total() == RECORDED_SAMPLES * RECORDED_N


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "rollscope.cli", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_errors_are_one_line_naming_the_source_and_exit_2(weave_trace_server, monkeypatch):
    import os

    for args, fragment in [
        (["traces", "ls", "--source", "weave:ent/no-such-project"], "weave:ent/no-such-project: no trajectories there"),
        (["traces", "ls", "--source", "weave:just-a-name"], "weave:ENTITY/PROJECT"),
        (["insights", "--source", "wandb:ent/x"], "'weave:ENTITY/PROJECT'"),
    ]:
        done = _cli(*args, env=os.environ)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and fragment in done.stderr, done.stderr
    no_key = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    done = _cli("traces", "ls", "--source", SOURCE, env={**no_key, "NETRC": os.devnull})
    assert done.returncode == 2 and "no W&B credentials" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    gone = {**os.environ, "WF_TRACE_SERVER_URL": "http://127.0.0.1:9/traces"}  # nothing listens on port 9
    done = _cli("insights", "--source", SOURCE, env=gone)
    assert done.returncode == 2 and "reading from http://127.0.0.1:9/traces failed" in done.stderr, done.stderr


def test_a_server_that_goes_away_mid_read_is_one_error_and_nothing_half_written(same_run, tmp_path):
    """The server answers the count and the first page, then is gone (a test double around the
    real server's client: W&B's own server cannot be made to die between two pages)."""
    from rollscope.sources import weave as weave_source

    class DiesAfterOnePage:
        def __init__(self, real):
            self.real, self.pages = real, 0

        def __getattr__(self, name):
            return getattr(self.real, name)

        def calls_query_stream(self, request):
            self.pages += 1
            if self.pages > 1:
                raise ConnectionError("connection reset by peer")
            return self.real.calls_query_stream(request)

    real = weave_source._server(PROJECT)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(weave_source, "PAGE", 5)
        with pytest.raises(SourceError, match=r"weave:ent/same-run: reading from .* failed: ConnectionError"):
            weave_source.WeaveSource(PROJECT, server=DiesAfterOnePage(real))
    out = tmp_path / "out.jsonl"
    assert main(["export", str(out), "--format", "jsonl", "--source", "weave:ent/nothing-here"]) == 2
    assert not out.exists()


def test_bad_records_a_count_that_is_no_count_and_a_pager_that_repeats_cost_only_themselves(same_run, caplog):
    """A test double around the real server's client (W&B's own server answers correctly): its
    feedback holds records without a call, with a list payload or a ref that is no string; its
    count is a string; it ignores the page offset. Each is counted and said, the read ends, and
    what could be read is there."""
    from rollscope.sources import weave as weave_source

    real = weave_source._server(PROJECT)
    whole = weave_source.WeaveSource(PROJECT, server=real)
    everything = {t.id for t in whole.trajectories()}
    whole.close()

    class Misbehaving:
        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def calls_query_stats(self, request):
            return type("Stats", (), {"count": "many"})()

        def calls_query_stream(self, request):
            return self.real.calls_query_stream({**request, "offset": 0})  # the offset ignored

        def feedback_query(self, request):
            found = self.real.feedback_query(request)
            bad = [{"payload": {"advantage": 1.0}}, {"weave_ref": "x/y", "payload": [1, 2]}, {"weave_ref": 7}, "junk"]
            return type("Found", (), {"result": [*bad, *found.result]})()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(weave_source, "PAGE", 5)
        source = weave_source.WeaveSource(PROJECT, server=Misbehaving(real))
    read = {t.id for t in source.trajectories()}
    assert len(read) == 5 and read <= everything  # the first page, read once
    assert source.skipped == {
        "a call count that is not a count": 1,
        "a page of calls that repeats the one before it (offset 5 ignored): reading stopped": 1,
        "training feedback records without a call or a payload (skipped)": 4,
    }
    assert "repeats the one before it" in caplog.text
    source.close()


def test_the_viewer_serves_the_same_pages_from_weave(same_run, capsys):
    from rollscope.viewer.server import Viewer

    rows = json.loads(_answer(capsys, "traces", "ls", "--json", "--dir", str(same_run), "--step", "1"))
    local, weave = Viewer(str(same_run)), Viewer(source=SOURCE)
    for target in (
        "/",
        "/?step=2&sort=reward",
        f"/t/{rows[0]['id']}",
        "/group?step=1&sample=0",
        "/insights",
        "/steps",
        "/prompt?sample=1",
        f"/compare?id={rows[0]['id']}&id={rows[1]['id']}",
    ):
        status, _, page = weave.handle(target)
        assert status == 200, (target, page[:300])
        assert page == local.handle(target)[2], target
    local.store().close(), weave.store().close()


HOSTILE_PROJECT = "ent/hostile"
HTML = '<meta http-equiv="refresh" content="0;url=https://example.invalid/">'


def _write_calls(calls, project=HOSTILE_PROJECT):
    """Calls written straight to W&B's own server, as anyone with access to a project could."""
    import datetime

    from rollscope.sources.weave import _server
    from rollscope.tracing.backends.weave import send_calls

    now = datetime.datetime.now(datetime.timezone.utc)
    batch = [
        {
            "project_id": project,
            "id": c["id"],
            "trace_id": c["trace"],
            "parent_id": c.get("parent"),
            "op_name": c.get("op", "hostile.op"),
            "display_name": c.get("op", "hostile.op"),
            "started_at": now,
            "ended_at": now,
            "attributes": c.get("attributes", {}),
            "inputs": c.get("inputs", {}),
            "output": c.get("output"),
            "summary": c.get("summary", {}),
            "exception": c.get("exception"),
        }
        for c in calls
    ]
    return send_calls(_server(project), batch)


def test_a_hostile_project_costs_each_bad_call_only_itself(weave_trace_server):
    """Root calls whose rows hold a dict reward, NaN, a time that is no time, HTML in a count; spans
    whose exception is not JSON, whose packed numbers do not parse, 300 of them nested: each bad
    field is left empty and named on its own row or span, the good trajectory reads as written,
    and every page of the viewer answers, the hostile text drawn as text."""
    import uuid

    from rollscope.semconv import UNREADABLE
    from rollscope.tracing.backends.weave import call_id
    from rollscope.viewer.server import Viewer

    def root(tid, row):  # (ids as rollscope derives them: a trajectory's calls are found by its trace id)
        return {
            "id": call_id(tid),
            "trace": call_id(tid),
            "inputs": {"trajectory_id": tid},
            "summary": {"rollscope": {"row": {"status": "ok", "start_ns": 1, **row}}},
        }

    good = root("good", {"reward": 1.0, "step": 3, "num_llm_calls": 2})
    roots = [
        good,
        root("dict-reward", {"reward": {"a": 1}}),
        root("nan", {"reward": "NaN"}),
        root("time", {"start_ns": "yesterday"}),
        root("html", {"num_llm_calls": HTML, "agent_name": HTML}),
    ]
    deep = roots[0]
    spans, parent = [], deep["id"]
    for i in range(300):  # under the good root: nested 300 deep
        span = {"id": str(uuid.uuid4()), "trace": deep["trace"], "parent": parent, "op": f"level{i}"}
        spans.append(span)
        parent = span["id"]
    spans[5]["exception"] = "<b>not json</b>"
    spans[6]["summary"] = {"rollscope": {"packed": {"output": [["ids"]]}}}
    spans[6]["output"] = {"ids": "1 2 three"}
    assert _write_calls(roots + spans) == []

    with open_source(f"weave:{HOSTILE_PROJECT}") as source:
        found = {t.id: t for t in source.trajectories()}
        assert set(found) == {"good", "dict-reward", "nan", "time", "html"}
        assert found["good"].reward == 1.0 and UNREADABLE not in found["good"].attributes
        assert "reward:" in found["dict-reward"].attributes[UNREADABLE] and found["dict-reward"].reward is None
        assert "reward:" in found["nan"].attributes[UNREADABLE] and found["nan"].reward is None
        assert "start_ns:" in found["time"].attributes[UNREADABLE]
        assert found["html"].num_llm_calls == 0 and "num_llm_calls:" in found["html"].attributes[UNREADABLE]
        assert found["html"].agent_name == HTML  # text, kept as text
        by_name = {s.name: s for s in source.get("good").spans}
        assert len(by_name) == 300
        assert by_name["level5"].error_message == "<b>not json</b>"
        assert UNREADABLE in by_name["level6"].attributes and "level7" in by_name
    viewer = Viewer(source=f"weave:{HOSTILE_PROJECT}")
    for target in ("/", "/t/good", "/t/html", "/t/nan", "/insights", "/steps"):
        status, _, body = viewer.handle(target)
        page = body.decode()
        assert status == 200, (target, page[:300])
        assert "<meta http-equiv" not in page and "<b>not json" not in page, target
    assert "level299" in viewer.handle("/t/good")[2].decode()
    viewer.store().close()


def test_a_hostile_projects_values_are_drawn_as_text_in_chromium(weave_trace_server, browser):
    """Each tag a page's CSP does not stop, in a root call's counts and names as the project holds
    them, read through ``--source weave:`` and drawn by Chromium as text."""
    from rollscope.tracing.backends.weave import call_id
    from tests.viewer.conftest import HOSTILE_TAGS, assert_drawn_as_text, serving_source

    project = "ent/hostile-drawn"
    tags = dict(zip(("num_llm_calls", "num_tool_calls", "num_errors"), HOSTILE_TAGS, strict=True))
    row = {
        "status": "error",
        "start_ns": 1,
        "reward": 0.0,
        **tags,
        "agent_name": HOSTILE_TAGS[0],
        "experiment": HOSTILE_TAGS[1],
        "error_message": HOSTILE_TAGS[2],
    }
    root = {
        "id": call_id("drawn"),
        "trace": call_id("drawn"),
        "inputs": {"trajectory_id": "drawn"},
        "summary": {"rollscope": {"row": row}},
        "output": {"text": HOSTILE_TAGS[1]},
    }
    assert _write_calls([root], project) == []
    with serving_source(f"weave:{project}") as url:
        assert_drawn_as_text(browser, url + "/", texts=HOSTILE_TAGS[:2], shot="hostile-weave-list")
        assert_drawn_as_text(browser, f"{url}/t/drawn", texts=HOSTILE_TAGS[2:], shot="hostile-weave-trajectory")
