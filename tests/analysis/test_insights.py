"""`rollscope insights` over a run designed to trigger each signal a known number of times
(tests/analysis/scenario.py), and a clean run that triggers none: exact counts, and example ids that
match what the spans themselves show."""

import json
import subprocess
import sys

import pytest

from rollscope.analysis.insights import Thresholds, insights
from rollscope.store import TraceStore
from tests.analysis.scenario import CLEAN, SCRIPTS, record


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    from rollscope.testing import make_model_dir

    root = tmp_path_factory.mktemp("insights")
    model = make_model_dir(root / "model")
    traces = root / "traces"
    record(traces, model, experiment="scenario", scripts=SCRIPTS, steps=(0, 1))
    record(traces, model, experiment="clean", scripts=CLEAN, steps=(0,))
    return traces


def by_name(found, step=0):
    return {s.name: s for s in found.signals if s.step == step}


def ids_where(store, experiment, step, test):
    return sorted(t.id for t in store.trajectories(experiment=experiment, step=step) if test(store.get(t.id)))


def test_each_signal_is_counted_exactly(store_dir):
    with TraceStore(store_dir) as store:
        [scenario] = insights(store, experiment="scenario")
        s = by_name(scenario)
        assert scenario.steps == [0, 1] and scenario.trajectories == 20
        assert (s["zero_variance"].count, s["zero_variance"].total) == (1, 5)
        assert (s["truncated"].count, s["turn_limit"].count, s["repeated_calls"].count) == (1, 1, 1)
        assert (s["reward_without_tools"].count, s["reward_without_tools"].total) == (2, 6)
        assert (s["rewarded_empty"].count, s["rewarded_empty"].total) == (1, 6)
        assert (s["tool_errors"].count, s["tool_errors"].total) == (2, 8)
        kinds = s["tool_errors"].detail["by_tool_and_kind"]
        assert {k: v["count"] for k, v in kinds.items()} == {"calculator|tool_error": 1, "weather|unknown_tool": 1}

        def spans_say(name, test):
            return ids_where(store, "scenario", 0, test), s[name].examples

        llm = lambda t: [x for x in t.spans if x.kind == "llm"]  # noqa: E731
        tools = lambda t: [x for x in t.spans if x.kind == "tool"]  # noqa: E731
        for name, test in (
            ("truncated", lambda t: any(x.outputs["stop_reason"] == "length" for x in llm(t))),
            ("turn_limit", lambda t: len(llm(t)) == 3),
            (
                "repeated_calls",
                lambda t: len(tools(t)) == 2 and len({str(x.inputs["parameters"]) for x in tools(t)}) == 1,
            ),
            ("reward_without_tools", lambda t: t.reward > 0 and not tools(t)),
            ("rewarded_empty", lambda t: t.reward > 0 and llm(t)[-1].outputs["response_text"].startswith("<answer>")),
            ("tool_errors", lambda t: any(x.status == "error" for x in tools(t))),
        ):
            expected, examples = spans_say(name, test)
            assert examples == expected, name
        [zv_group] = [
            g for g in [store.group(0, i, experiment="scenario") for i in range(5)] if len({t.reward for t in g}) == 1
        ]
        assert s["zero_variance"].examples == [min(t.id for t in zv_group)]


def test_drift_is_measured_against_the_first_steps(store_dir):
    with TraceStore(store_dir) as store:
        [scenario] = insights(store, experiment="scenario", thresholds=Thresholds(baseline_steps=1))
        records = [store.get(t.id) for t in store.trajectories(experiment="scenario", step=1)]
    step1 = by_name(scenario, step=1)
    tokens = sum(t.num_tokens for t in records) / len(records)
    log_probs = [lp for t in records for s in t.spans if s.kind == "llm" for lp in s.outputs["log_probs"]]
    assert step1["length_drift"].detail["mean_tokens"] == pytest.approx(tokens)
    assert step1["length_drift"].detail["change"] == pytest.approx(0.0)  # step 1 replays step 0's scripts
    assert step1["logprob_drift"].detail["mean_logprob"] == pytest.approx(sum(log_probs) / len(log_probs))
    assert step1["logprob_drift"].flagged is False and step1["length_drift"].flagged is False


def test_a_clean_run_triggers_nothing(store_dir):
    """Nothing wrong in the rollouts, and the test tokenizer's chat template writes each tool call
    back where the model wrote it: no signal, retokenization drift included."""
    with TraceStore(store_dir) as store:
        [clean] = insights(store, experiment="clean")
        assert any(t.num_tool_calls for t in store.trajectories(experiment="clean", replays=False, limit=None))
    drifts = ("length_drift", "logprob_drift", "answer_length_with_reward", "repetition")  # (counts: all measured)
    counted = {s.name: s.count for s in clean.signals if s.name not in drifts}
    assert counted == dict.fromkeys(counted, 0) and len(counted) == 9  # no trainer's signals: no trainer ran
    assert not any(s.flagged for s in clean.signals)


def test_the_command_prints_and_its_json_is_stable(store_dir):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "rollscope.cli", "insights", "--dir", str(store_dir), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    out = run("--experiment", "scenario", "--steps", "0:0", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["experiment"] == "scenario" and {s["step"] for s in data["signals"]} == {0}
    zero = next(s for s in data["signals"] if s["name"] == "zero_variance")
    assert {"name", "step", "count", "share", "examples"} <= set(zero) and zero["count"] == 1
    assert len(json.loads(run("--json").stdout)) == 2  # two experiments: one object each
    text = run("--experiment", "scenario", "--zero-variance", "0.1").stdout
    assert "zero_variance" in text and "GRPO groups whose rollouts all got the same reward" in text
    assert "rollscope traces show" in text and "FLAGGED" in text


def test_the_insights_page_in_chromium(store_dir, browser):
    """/insights as Chromium draws it: one section per experiment, every signal with its
    definition, the scenario's counts, flagged rows, example links that open the trajectory."""
    import threading

    from selenium.webdriver.common.by import By

    from rollscope.viewer.server import make_server
    from tests.viewer.test_browser import click_and_wait, shot

    httpd = make_server(str(store_dir), port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        browser.get(url + "/")
        click_and_wait(browser, browser.find_element(By.ID, "nav-insights"), "/insights")
        sections = browser.find_elements(By.CSS_SELECTOR, "section.insights")
        assert [s.find_element(By.TAG_NAME, "h2").text.split(" ")[2] for s in sections] == ["clean", "scenario"]
        rows = {r.get_attribute("id"): r for r in sections[1].find_elements(By.CSS_SELECTOR, "tr.signal")}
        # the rollouts' signals, two of reward hacking among them (no trainer ran: none of the trainer's)
        assert len(rows) == 12 and {"signal-answer_length_with_reward", "signal-answer_collapse"} <= set(rows)
        overall = {
            k.removeprefix("signal-"): r.find_element(By.CSS_SELECTOR, "td.overall").text for k, r in rows.items()
        }
        assert overall["zero_variance"] == "2/10 (20%)" and overall["tool_errors"] == "4/16 (25%)"
        assert overall["truncated"] == "2/20 (10%)" and overall["rewarded_empty"] == "2/12 (17%)"
        assert "flagged" in rows["signal-rewarded_empty"].get_attribute("class")
        assert "flagged" not in rows["signal-truncated"].get_attribute("class")
        assert rows["signal-zero_variance"].find_element(By.CSS_SELECTOR, "svg.spark").rect["width"] > 100
        assert "GRPO groups whose rollouts all got the same reward" in rows["signal-zero_variance"].text
        assert not any(
            "flagged" in r.get_attribute("class")
            for r in sections[0].find_elements(By.CSS_SELECTOR, "tr.signal")
            if r.get_attribute("id") != "signal-retokenization_drift"
        )  # the clean run (its template drifts)
        shot(browser, "12-insights")
        example = rows["signal-turn_limit"].find_element(By.CSS_SELECTOR, "td.examples a")
        tid = example.text
        click_and_wait(browser, example, f"/t/{tid}")
        assert tid in browser.find_element(By.TAG_NAME, "h1").text
        browser.get(url + "/group?step=0&sample=0&experiment=scenario")  # the zv row: a zero-variance group
        assert "Zero variance" in browser.find_element(By.CSS_SELECTOR, ".banner.zero-variance").text
    finally:
        httpd.shutdown()
        httpd.server_close()
