"""The viewer in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium):
load, filter, open, compare, group and the per-step charts, with a screenshot of each page saved
under test-artifacts/screenshots/. A tool result holding <script> must not run."""

import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SHOTS = Path(__file__).parents[2] / "test-artifacts" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def shot(driver, name):
    path = SHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 1000


def click_and_wait(driver, element, url_part):
    """Click a link or submit button and wait until the new page has loaded (a click returns before)."""
    from selenium.webdriver.support.ui import WebDriverWait

    element.click()
    WebDriverWait(driver, 20).until(lambda d: url_part in d.current_url
                                    and d.execute_script("return document.readyState") == "complete")  # fmt: skip


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
    assert len(browser.find_elements(By.CSS_SELECTOR, "#charts svg polyline")) == 5
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) == 3
    shot(browser, "7-steps")
