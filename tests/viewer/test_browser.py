"""The viewer in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium):
load, filter, open, compare, group and the per-step charts, with a screenshot of each page saved
under test-artifacts/screenshots/. A tool result holding <script> must not run."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SHOTS = Path(__file__).parents[2] / "test-artifacts" / "screenshots"


def shot(driver, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 1000


def click_and_wait(driver, element, url_part):
    """Click a link or submit button and wait until the new page has loaded (a click returns before)."""
    from selenium.webdriver.support.ui import WebDriverWait

    element.click()
    WebDriverWait(driver, 20).until(
        lambda d: url_part in d.current_url and d.execute_script("return document.readyState") == "complete"
    )


def rows(driver):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#trajectories tbody tr")


def test_load_filter_open(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(server + "/")
    assert browser.title == "trajectories · rollscope" and len(rows(browser)) == 24
    shot(browser, "1-trajectories")
    browser.find_element(By.NAME, "step").send_keys("1")
    Select(browser.find_element(By.NAME, "tool_errors")).select_by_value("no")
    click_and_wait(browser, browser.find_element(By.ID, "apply"), "step=1")
    assert len(rows(browser)) == 6
    shot(browser, "2-filtered")
    click_and_wait(browser, rows(browser)[0].find_element(By.CSS_SELECTOR, "td:nth-child(2) a"), "/t/")
    assert browser.find_element(By.ID, "spans").is_displayed()
    assert "The answer is" in browser.find_element(By.ID, "spans").text
    shot(browser, "3-trajectory")


def test_hostile_tool_result_is_shown_as_text_and_never_runs(server, store_dir, browser):
    from selenium.webdriver.common.by import By

    from rollscope.store import TraceStore
    from tests.viewer.conftest import HOSTILE

    with TraceStore(store_dir) as store:
        t = store.trajectories(step=0, sample_index=0, rollout_n=1)[0]
    browser.get(f"{server}/t/{t.id}")
    results = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "pre.result")]
    assert HOSTILE in results  # the markup is there, as text
    assert browser.execute_script("return window.__xss === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "#spans script, #spans img")
    shot(browser, "4-escaped")


def test_compare_group_steps(server, browser):
    from selenium.webdriver.common.by import By

    browser.get(server + "/?step=2&sample=1")
    boxes = browser.find_elements(By.CSS_SELECTOR, "#trajectories input[type=checkbox]")
    for box in boxes[:3]:
        box.click()
    click_and_wait(browser, browser.find_element(By.ID, "compare"), "/compare")
    headers = browser.find_elements(By.CSS_SELECTOR, "#compare-table thead th")
    assert len(headers) == 4  # turn + 3 trajectories
    assert browser.find_elements(By.CSS_SELECTOR, "#compare-table td.differs")
    shot(browser, "5-compare")

    browser.get(server + "/?step=2&sample=1")
    click_and_wait(browser, rows(browser)[0].find_element(By.CSS_SELECTOR, "td:nth-child(5) a"), "/group")
    assert browser.find_element(By.ID, "mean").text == "0.7"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#group tbody tr")) == 4
    shot(browser, "6-group")
    click_and_wait(browser, browser.find_element(By.ID, "compare-group"), "/compare")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#compare-table thead th")) == 5

    browser.get(server + "/steps")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#charts svg polyline")) == 8  # 5 step metrics, 3 insight rates
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) == 3
    shot(browser, "7-steps")


def _first(rich_store, experiment="alpha"):
    from rollscope.store import TraceStore

    with TraceStore(rich_store) as store:
        return store.trajectories(experiment=experiment, rollout_n=0)[0].id


def test_timing_bars_are_drawn_as_long_as_their_spans(rich_server, rich_store, browser):
    """What Chromium draws, under the page's own style policy: a ~300 ms llm bar is several times
    as wide as a ~30 ms tool bar, and both are narrower than the run's."""
    from selenium.webdriver.common.by import By

    browser.get(f"{rich_server}/t/{_first(rich_store)}")
    spans = browser.find_elements(By.CSS_SELECTOR, "#spans li.span")
    widths = {}
    for li in spans:
        name = li.find_element(By.CSS_SELECTOR, ".span-head .name").text
        bar = li.find_element(By.CSS_SELECTOR, ".span-head svg.timeline rect.bar")
        widths.setdefault(name, bar.rect["width"])
    track = spans[0].find_element(By.CSS_SELECTOR, ".span-head svg.timeline").rect["width"]
    assert track > 300
    assert widths["ToolAgentLoop.run"] > 0.9 * track  # the run spans (almost) the whole trajectory
    assert widths["llm.generate"] > 4 * widths["calculator"] > 0  # 300 ms against 30 ms
    assert widths["calculator"] < 0.2 * track
    shot(browser, "8-timing-bars")


def test_chat_view_tokens_and_ground_truth(rich_server, rich_store, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{rich_server}/t/{_first(rich_store)}")
    assert browser.find_element(By.ID, "ground-truth").text == "42"
    chat = browser.find_elements(By.CSS_SELECTOR, ".chat")[0]
    roles = [e.text for e in chat.find_elements(By.CSS_SELECTOR, ".msg .role")]
    assert roles == ["SYSTEM", "USER", "ASSISTANT"]  # uppercased by the stylesheet: it is applied
    texts = [e.text for e in chat.find_elements(By.CSS_SELECTOR, ".msg pre")]
    assert texts == ["You are a calculator.", "What is 6 * 7?", "The answer is 42."]
    tokens = browser.find_elements(By.CSS_SELECTOR, "details.tokens")[0]
    assert not tokens.find_element(By.CSS_SELECTOR, ".tok").is_displayed()  # folded until asked
    tokens.find_element(By.TAG_NAME, "summary").click()
    spans = tokens.find_elements(By.CSS_SELECTOR, ".tok")
    assert [s.text for s in spans] == ["The", " answer", " is", " 42", "."]  # spaces kept (pre-wrap)
    assert [s.get_attribute("class") for s in spans] == ["tok b0", "tok b1", "tok b0", "tok b4", "tok b2"]
    colours = [s.value_of_css_property("background-color") for s in spans]
    assert colours[0] != colours[3] and colours[3] != colours[4]  # the bucket classes are drawn
    least = [r.text.split() for r in tokens.find_elements(By.CSS_SELECTOR, "table.least tbody tr")]
    assert [row[0] for row in least] == ["3", "4", "1", "2", "0"]  # positions, least likely first
    assert tokens.find_element(By.CSS_SELECTOR, ".mean-lp").text == "-0.892"
    assert "20% of its tokens sampled at a probability under 10%" in tokens.find_element(By.TAG_NAME, "summary").text
    second = browser.find_elements(By.CSS_SELECTOR, "details.tokens")[1]
    assert "no log-probs returned by the LLM" in second.find_element(By.TAG_NAME, "summary").text
    shot(browser, "9-chat-and-tokens")


def test_the_span_tree_beside_the_details_links_folds_and_finds(rich_server, rich_store, browser):
    """The trajectory page as Weave's call page reads: a span tree beside the spans' details,
    each tree node a link to its span (outlined when reached), a span folded by its head (its
    children with it), and a search that lists and marks the spans holding the text."""
    from selenium.webdriver.common.by import By

    browser.get(f"{rich_server}/t/{_first(rich_store)}")
    outline = browser.find_element(By.ID, "outline")
    links = outline.find_elements(By.TAG_NAME, "a")
    assert [a.text for a in links][:2] == ["ToolAgentLoop.run", "llm.generate"]
    assert outline.rect["x"] + outline.rect["width"] <= browser.find_element(By.ID, "spans").rect["x"]  # beside
    tool = next(a for a in links if a.text == "calculator")
    tool.click()
    target = browser.execute_script("return location.hash")
    head = browser.find_element(By.CSS_SELECTOR, f"{target} > details > summary.span-head")
    assert head.value_of_css_property("outline-style") == "solid"  # the linked span is marked
    shot(browser, "9b-span-tree-linked")
    run = browser.find_element(By.CSS_SELECTOR, "#spans > li.kind-agent")
    child = run.find_element(By.CSS_SELECTOR, "li.kind-llm summary.span-head")
    assert child.is_displayed()
    run.find_element(By.CSS_SELECTOR, ":scope > details > summary.span-head").click()
    assert not child.is_displayed()  # folded with its parent
    browser.get(f"{rich_server}/t/{_first(rich_store)}?q=answer+is+42")
    found = browser.find_element(By.ID, "matches")
    assert found.text.startswith("1 span matches") and "llm.generate" in found.text
    marked = browser.find_elements(By.CSS_SELECTOR, "#spans li.span.match")
    assert len(marked) == 1 and "The answer is 42." in marked[0].text
    shot(browser, "9c-span-search")


def test_sorting_the_experiment_selector_and_groups_per_experiment(rich_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(rich_server + "/")
    click_and_wait(browser, browser.find_element(By.ID, "sort-reward"), "sort=reward")
    rewards = [r.find_elements(By.TAG_NAME, "td")[9].text for r in rows(browser)]
    assert rewards == ["0", "1", "1", "1"]
    click_and_wait(browser, browser.find_element(By.ID, "sort-reward"), "desc=1")
    assert [r.find_elements(By.TAG_NAME, "td")[9].text for r in rows(browser)] == ["1", "1", "1", "0"]
    select = Select(browser.find_element(By.ID, "experiment"))
    assert [o.text for o in select.options] == ["any", "alpha", "beta"]
    select.select_by_value("beta")
    click_and_wait(browser, browser.find_element(By.ID, "apply"), "experiment=beta")
    assert len(rows(browser)) == 2 and "2 of 4 match" in browser.find_element(By.ID, "matching").text
    shot(browser, "10-sorted-and-selected")

    browser.get(rich_server + "/group?step=5&sample=0")
    sections = browser.find_elements(By.CSS_SELECTOR, "section.group")
    assert [s.find_element(By.TAG_NAME, "h2").text for s in sections] == ["proj / alpha", "proj / beta"]
    assert [s.find_element(By.CSS_SELECTOR, ".mean").text for s in sections] == ["0.5", "1"]
    shot(browser, "11-groups-per-experiment")
    browser.get(rich_server + "/steps")
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.run")) == 2


def test_trained_on_tokens_and_advantage_boxes_as_drawn(trained_server, trained_store, browser):
    """The training record as Chromium draws it: the masked tool response greyed apart, the planted
    1.5-nat token in the strongest colour the others lack; one advantage box per step, left to right."""
    from selenium.webdriver.common.by import By

    from rollscope.store import TraceStore

    [planted] = TraceStore(trained_store).trajectories(step=1, sample_index=0, rollout_n=2)
    browser.get(f"{trained_server}/t/{planted.id}")
    strip = browser.find_element(By.ID, "training-tokens")
    tokens = strip.find_elements(By.CSS_SELECTOR, ".dtok")
    colours = [t.value_of_css_property("background-color") for t in tokens]
    assert len(tokens) == 6 and all(t.rect["width"] > 0 for t in tokens)
    assert colours[2] == colours[3] != colours[0]  # masked: their own grey
    assert colours[4] not in (colours[0], colours[2]) and colours[0] == colours[1] == colours[5]
    assert browser.find_element(By.ID, "advantage").text.strip()
    shot(browser, "10-trained-on-tokens")
    # switched to entropy: the planted collapse (0.01 nats at position 5) in the strongest colour, the
    # rest (1 nat) alike, the masked tool response dimmed; its legend shown, the delta's hidden
    browser.find_element(By.CSS_SELECTOR, "label[for=ov-entropy]").click()
    colours = [t.value_of_css_property("background-color") for t in tokens]
    assert colours[5] not in (colours[0], colours[2]) and colours[0] == colours[1] == colours[4]
    assert float(tokens[2].value_of_css_property("opacity")) < 1 == float(tokens[0].value_of_css_property("opacity"))
    assert strip.find_element(By.CSS_SELECTOR, ".legend-entropy").is_displayed()
    assert not strip.find_element(By.CSS_SELECTOR, ".legend-delta").is_displayed()
    shot(browser, "10b-token-overlay-entropy")
    browser.find_element(By.CSS_SELECTOR, "label[for=ov-advantage]").click()
    advantage = [t.value_of_css_property("background-color") for t in tokens]
    assert advantage[0] == advantage[5] != advantage[2] and advantage[0] != colours[0]
    shot(browser, "10c-token-overlay-advantage")
    browser.get(f"{trained_server}/steps")
    boxes = browser.find_elements(By.CSS_SELECTOR, "g.step-box rect.box")
    xs = [b.rect["x"] for b in boxes]
    assert len(boxes) == 3 and xs == sorted(xs) and xs[0] < xs[-1]
    assert all(b.rect["height"] > 0 and b.rect["width"] > 0 for b in boxes)
    shot(browser, "11-advantage-boxes")


def test_a_spans_attributes_and_the_compared_task_as_chromium_draws_them(rich_server, rich_store, browser):
    """The attributes panel of an llm turn opens to a table (constrained or not, token counts,
    latency); the compare page of a reward of 1 beside one of 0 shows what both were asked and
    the right answer above the turns."""
    from selenium.webdriver.common.by import By

    from rollscope.store import TraceStore

    browser.get(f"{rich_server}/t/{_first(rich_store)}")
    panel = browser.find_element(By.CSS_SELECTOR, "li.kind-llm details.facts-panel")
    panel.find_element(By.TAG_NAME, "summary").click()
    table = panel.find_element(By.CSS_SELECTOR, "table.attributes")
    assert table.is_displayed() and "tool calls constrained" in table.text and "latency_s" in table.text
    browser.execute_script("arguments[0].scrollIntoView()", panel)
    shot(browser, "9-span-attributes")
    with TraceStore(rich_store) as store:
        pair = store.trajectories(experiment="alpha")
    browser.get(f"{rich_server}/compare?id={pair[0].id}&id={pair[1].id}")
    task = browser.find_element(By.CSS_SELECTOR, "#compare-table tr.task")
    assert task.text.count("What is 6 * 7?") == 2 and task.text.count("42") >= 2, task.text
    shot(browser, "10-compare-task")


def test_the_wandb_runs_metrics_each_step_linked_to_its_trajectories(store_dir, browser, tmp_path):
    """``rollscope ui --wandb-run DIR``: the curves an offline W&B run logged (as verl's trainer logs
    them, at the steps the store's trajectories carry), one chart a metric; a step's dot opens that
    step's trajectories."""
    import threading

    from selenium.webdriver.common.by import By

    from rollscope.viewer.server import make_server
    from tests.sources.wandb_runs import offline_run

    kl = [0.01, 0.01, 0.3, 0.31, 0.32]  # jumps at step 2 (29x its usual change of 0.01)
    offline_run(
        tmp_path,
        [
            (step, {"critic/score/mean": 0.2 + 0.1 * step, "actor/entropy": 1.5 - 0.3 * step, "actor/ppo_kl": kl[step]})
            for step in range(5)
        ],
    )
    httpd = make_server(str(store_dir), port=0, wandb_run=str(tmp_path))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        browser.get(url + "/metrics")
        figures = browser.find_elements(By.CSS_SELECTOR, "#charts figure")
        assert [f.find_element(By.TAG_NAME, "figcaption").text for f in figures] == [
            "actor/entropy",
            "actor/ppo_kl",
            "critic/score/mean",
        ]
        dots = figures[0].find_elements(By.CSS_SELECTOR, "a.step-link circle")
        assert len(dots) == 5 and all(d.size["width"] > 0 for d in dots)  # drawn, one a step
        shot(browser, "9-wandb-metrics")
        browser.find_element(By.ID, "nav-metrics")
        click_and_wait(browser, dots[1], "step=1")
        assert len(rows(browser)) == 8  # step 1's trajectories: 2 samples x 4 rollouts
        browser.get(url + "/insights")  # the jump, at the step where the store's signals flag too
        [jump] = browser.find_elements(By.CSS_SELECTOR, "tr.metric-change")
        cells = [c.text for c in jump.find_elements(By.TAG_NAME, "td")]
        assert cells[:2] == ["2", "actor/ppo_kl"] and cells[4] == "29.0" and "tool_errors" in cells[5], cells
        browser.execute_script("arguments[0].scrollIntoView()", jump)
        shot(browser, "9b-insights-wandb-jump")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_hacked_runs_page_its_insights_with_a_rescoring_and_a_trajectorys_rescored_reward(tmp_path, browser):
    """The reward-hacking story as Chromium draws it: the run's page has its reward beside the
    rescoring's per step, the onset marked on that curve and named in order with its examples; a
    click on an example opens a hack whose rescored reward sits beside the run's; /insights checks
    with the rescoring chosen in its picker, and links back to the run's page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tests.analysis.test_hacking import HACK_FROM, answer, mentions, record, rescore
    from tests.viewer.conftest import serving

    trace_dir = tmp_path / "traces"
    record(trace_dir, "loophole", lambda s, p, r: answer(s, p, r, True), mentions)
    rescore(trace_dir)
    with serving(trace_dir) as url:
        browser.get(url + "/run?experiment=loophole")
        headline = browser.find_element(By.ID, "headline").text
        assert headline.startswith("reward hacking: ") and f"reward_vs_check from step {HACK_FROM}" in headline
        [chart] = browser.find_elements(By.CSS_SELECTOR, "figure.chart")
        keys = [k.text for k in chart.find_elements(By.CSS_SELECTOR, ".legend .key")]
        assert keys == ["reward (the run's)", "exact (rescoring)"]
        lines = chart.find_elements(By.CSS_SELECTOR, "polyline.line")
        assert len(lines) == 2 and all(line.size["width"] > 100 for line in lines)  # both curves drawn
        marks = chart.find_elements(By.CSS_SELECTOR, "a.onset-link line.onset")
        assert marks and all(m.size["height"] > 50 for m in marks)  # the onsets, drawn across the chart
        labels = [t.text for t in chart.find_elements(By.CSS_SELECTOR, "text.onset-label")]
        assert "reward_vs_check" in labels
        shot(browser, "11-run-page-hacking-onsets")
        example = browser.find_element(By.CSS_SELECTOR, "#signal-reward_vs_check a.example")
        click_and_wait(browser, example, "/t/")
        assert browser.find_element(By.ID, "reward").text.startswith("1 · exact (rescoring) 0")
        shot(browser, "11b-trajectory-rescored-reward")
        browser.get(url + "/insights?experiment=loophole")
        Select(browser.find_element(By.ID, "check")).select_by_value("exact")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"), "check=exact")
        assert f"reward_vs_check from step {HACK_FROM}" in browser.find_element(By.ID, "headline-0").text
        flagged = browser.find_element(By.ID, "signal-reward_vs_check").get_attribute("class")
        assert "flagged" in flagged
        shot(browser, "11c-insights-checked-with-a-rescoring")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "a.run-link"), "/run?")
        assert "check=exact" in browser.current_url and browser.find_element(By.ID, "headline")


def test_the_index_lists_the_runs_by_experiment_as_chromium_draws_it(tmp_path, browser):
    """Two runs in one store: a table of runs above the trajectories, one row each with its steps,
    its trajectories, those with an error span and its reward at the first and last step, each a
    link to its trajectories; one step's runs get their figures and no empty charts."""
    from selenium.webdriver.common.by import By

    from tests.viewer.conftest import record, serving

    store = tmp_path / "traces"
    record(store, steps=3, samples=2, rollouts=2, experiment="grpo-a")
    record(store, steps=1, samples=2, rollouts=2, experiment="grpo-b")
    with serving(store) as url:
        browser.get(url + "/")
        runs = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
        assert [r.find_element(By.TAG_NAME, "a").text for r in runs] == ["proj / grpo-a", "proj / grpo-b"]
        cells = [c.text for c in runs[0].find_elements(By.TAG_NAME, "td")]
        assert cells[1].startswith("3") and cells[2] == "12" and "→" in cells[4]
        shot(browser, "1b-runs-by-experiment")
        click_and_wait(browser, runs[1].find_element(By.TAG_NAME, "a"), "experiment=grpo-b")
        assert len(rows(browser)) == 4
        browser.get(url + "/steps?experiment=grpo-b")
        assert browser.find_elements(By.CSS_SELECTOR, ".one-step") and not browser.find_elements(By.ID, "charts")
