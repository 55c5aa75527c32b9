"""``rollscope rescore`` on a store recorded by ``rollscope run`` (``conftest``: every group's 1st
and 3rd rollouts right, rewards 1, 0, 1, 0): rewards recomputed in worker processes, advantages
derived again, the changes reported and stored beside the run, the original untouched."""

import json
import textwrap

import pytest

from rollscope.datasets.rescore import rescore
from rollscope.store import TraceStore, rescorings
from tests.cli.test_run_cli import rollscope
from tests.conftest import RECORDED_N as N
from tests.conftest import RECORDED_SAMPLES as SAMPLES

REWARDS = '''
from rollscope.bundled.rewards import exact_number

def inverted(data_source, solution_str, ground_truth, extra_info=None):
    """Right is wrong: every rollout's advantage changes sign."""
    return 1.0 - exact_number(data_source, solution_str, ground_truth)

def one_group_inverted(data_source, solution_str, ground_truth, extra_info=None):
    """Inverted for the question whose answer is {truth} only."""
    right = exact_number(data_source, solution_str, ground_truth)
    return {{"score": 1.0 - right if ground_truth == "{truth}" else right, "right": right}}

def everyone_right(trajectory):
    """A function of the stored trajectory: every group the same, no gradient left."""
    return 1.0 if trajectory.num_tool_calls else 0.0

async def slow_to_fail(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str.endswith("2."):
        raise RuntimeError("no verdict on 2")
    return exact_number(data_source, solution_str, ground_truth)
'''


@pytest.fixture
def rewards_file(recorded, tmp_path):
    _, truth = recorded
    path = tmp_path / "my_rewards.py"
    path.write_text(textwrap.dedent(REWARDS.format(truth=sorted(truth.values())[0])))
    return path


def original_rewards(traces):
    with TraceStore(traces) as store:
        return {t.id: t.reward for t in store.trajectories(limit=None)}


def test_the_runs_own_reward_changes_nothing(recorded):
    """Rescoring with the reward the run used (the same solution_str it was given) moves nothing."""
    traces, _ = recorded
    with TraceStore(traces) as store:
        report = rescore(store, "rollscope.bundled.rewards:exact_number", name="same", workers=1)
    assert report.trajectories == SAMPLES * N and report.failed == 0
    assert report.totals() == {
        "groups": SAMPLES,
        "moved": 0,
        "flipped": 0,
        "became_zero_variance": 0,
        "stopped_zero_variance": 0,
    }
    assert report.changed == []
    stored = rescorings.load(traces, "same")
    assert {i: r.reward for i, r in stored.rewards.items()} == original_rewards(traces)


def test_a_rescoring_that_flips_one_known_group_is_reported_and_stored_beside_the_run(recorded, rewards_file):
    traces, truth = recorded
    before = original_rewards(traces)
    target = sorted(truth.values())[0]
    with TraceStore(traces) as store:
        report = rescore(store, f"{rewards_file}:one_group_inverted", name="flip-one", workers=2)
    assert report.workers == 2
    [changed] = report.changed
    assert changed.flipped and not changed.zero_variance_before and not changed.zero_variance_after
    assert changed.moved == N
    for m in changed.members:  # each rollout's reward and advantage the other way round
        assert m["reward"] == 1.0 - m["original"] and m["advantage_after"] == -m["advantage_before"] != 0
    with TraceStore(traces) as store:
        [question] = [q for q, t in truth.items() if t == target]
        group = [t for t in store.trajectories(limit=None) if t.id in {m["id"] for m in changed.members}]
        assert all(question in t.spans[0].inputs["raw_prompt"][0]["content"] for t in group)
    assert report.totals()["flipped"] == 1 and report.totals()["moved"] == N
    stored = rescorings.load(traces, "flip-one")
    assert stored.meta["reward"].endswith(":one_group_inverted")
    assert sum(r.reward != r.original for r in stored.rewards.values()) == N
    assert all("right" in r.details for r in stored.rewards.values())  # the dict's components kept
    assert original_rewards(traces) == before  # never over the run's own


def test_a_function_of_the_trajectory_can_make_every_group_zero_variance(recorded, rewards_file):
    traces, _ = recorded
    with TraceStore(traces) as store:
        report = rescore(store, f"{rewards_file}:everyone_right", name="flat", workers=1)
    assert report.totals()["became_zero_variance"] == SAMPLES and report.totals()["flipped"] == 0
    assert {c.zero_variance_after for c in report.changed} == {True} and len(report.changed) == SAMPLES
    assert report.steps[0].mean_before == 0.5 and report.steps[0].mean_after == 1.0


def test_the_cli_reports_as_text_and_json_and_counts_a_failing_reward(recorded, rewards_file):
    traces, _ = recorded
    text = rollscope("rescore", "--reward", f"{rewards_file}:inverted", "--dir", str(traces), "--workers", "2")
    assert text.returncode == 0, text.stderr[-2000:]
    assert f"{SAMPLES * N} trajectories in {SAMPLES} groups, 2 worker(s)" in text.stdout
    assert text.stdout.count("advantage sign flipped") == SAMPLES
    assert "rescorings/inverted.rescore" in text.stdout
    failing = rollscope("rescore", "--reward", f"{rewards_file}:slow_to_fail", "--dir", str(traces), "--json")
    assert failing.returncode == 0, failing.stderr[-2000:]
    report = json.loads(failing.stdout)
    assert report["failed"] == SAMPLES * N // 2  # the wrong answers ("... is 2.")
    assert report["first_error"] == "RuntimeError: no verdict on 2"
    assert {r.reward for r in rescorings.load(traces, "slow_to_fail").rewards.values()} == {1.0, None}


def test_bad_reward_specs_are_one_clear_error(recorded, rewards_file):
    traces, _ = recorded
    for spec, fragment in (
        (f"{rewards_file}:nope", "cannot import it"),
        ("no_such_module:fn", "cannot import it"),
        ("operator:add", "takes (a, b)"),
        (f"{rewards_file.parent}/missing.py:fn", "no file"),
    ):
        result = rollscope("rescore", "--reward", spec, "--dir", str(traces))
        assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr, spec
    bad_name = rollscope("rescore", "--reward", f"{rewards_file}:inverted", "--name", "../x", "--dir", str(traces))
    assert bad_name.returncode == 2 and "rescoring name '../x'" in bad_name.stderr


def test_the_viewer_shows_a_rescoring_beside_the_run(recorded, rewards_file, browser):
    """Listed, reported per step with the flipped group, and on that group's page each rollout's
    rescored reward and advantage drawn in the same row as the run's, to its right."""
    from selenium.webdriver.common.by import By

    from rollscope.viewer.server import Viewer
    from tests.viewer.conftest import serve

    traces, _ = recorded
    with TraceStore(traces) as store:
        report = rescore(store, f"{rewards_file}:one_group_inverted", name="side-by-side", workers=1)
    [changed] = report.changed
    viewer = Viewer(str(traces))
    listing = viewer.handle("/rescorings")[2].decode()
    assert 'href="/rescorings?name=side-by-side"' in listing
    status, _, body = viewer.handle("/rescorings?name=side-by-side")
    page = body.decode()
    assert status == 200 and "advantage sign flipped" in page and all(m["id"] in page for m in changed.members)
    assert viewer.handle("/rescorings?name=nope")[0] == 404 and viewer.handle("/rescorings?name=../x")[0] == 400
    for url in serve(traces):
        browser.get(f"{url}/group?step={changed.step}&sample={changed.sample_index}&rescoring=side-by-side")
        header = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#group thead th")]
        run_col, rescored_col = header.index("reward") + 1, header.index("rescored reward") + 1
        by_id = {m["id"]: m for m in changed.members}
        rows = browser.find_elements(By.CSS_SELECTOR, "#group tbody tr")
        assert len(rows) == N
        for row in rows:
            rid = row.find_element(By.CSS_SELECTOR, "td:nth-child(2)").text
            run = row.find_element(By.CSS_SELECTOR, f"td:nth-child({run_col})")
            other = row.find_element(By.CSS_SELECTOR, f"td:nth-child({rescored_col})")
            assert float(run.text) == by_id[rid]["original"] and float(other.text) == by_id[rid]["reward"]
            assert run.rect["y"] == other.rect["y"] and other.rect["x"] > run.rect["x"] + run.rect["width"] - 1
            assert other.is_displayed() and other.rect["width"] > 0
