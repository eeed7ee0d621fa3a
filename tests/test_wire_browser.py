"""The --html page in a real browser: headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium) opens a page made from a scripted run, follows a tool_call_id link both
ways, opens a folded part of a response, and finds that none of the hostile text in it ran; a
screenshot is kept with the test's files. Without the browser, the tests are skipped with one
line saying how to install it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_wire import EVIL_ID, hostile_page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
HOW = (
    "needs headless Chromium and Selenium: apt-get install chromium chromium-driver, and "
    'pip install -e ".[dev]"'
)


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason=HOW)
    if not (CHROMIUM and DRIVER):
        pytest.skip(HOW)
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-background-networking", "--disable-component-update", "--no-first-run",
        "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,1600",
    ):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_learner_clicks_through_the_page_and_nothing_hostile_runs(browser, workdir, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    page, _ = hostile_page(workdir, tmp_path)
    browser.get(Path(page).as_uri())
    assert browser.title == "Conversation evil: requests and responses"
    run = browser.execute_script
    assert run("return document.scripts.length") == 0
    assert run("return document.querySelectorAll('img, iframe, textarea').length") == 0
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.exchange")) == 3
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 (reading it is the check)

    # The first response's call: its arguments, the dict, the call, the link to its result.
    call = browser.find_element(By.ID, "c1-0")
    assert "tool_calls[0].function.arguments" in call.text
    assert "TOOL_MAP[\"read_file\"](ws, path='evil.html')" in call.text
    call.find_element(By.LINK_TEXT, "the tool message").click()
    assert run("return location.hash") == "#m2-3"
    result = browser.find_element(By.ID, "m2-3")
    assert run("return document.querySelector(':target') === arguments[0]", result)
    assert json.dumps(EVIL_ID) in result.text and "<script>alert(2)</script>" in result.text
    # ... and from the tool message back to the call that its tool_call_id answers.
    result.find_element(By.PARTIAL_LINK_TEXT, "tool call 1 of response 1").click()
    assert run("return location.hash") == "#c1-0"

    # The response's path to tool_calls is open and marked; its usage is folded until opened.
    response = browser.find_element(By.CSS_SELECTOR, "#x1 .response")
    marked = response.find_element(By.CSS_SELECTOR, "li.marked > .leaf")
    assert marked.is_displayed() and marked.text.startswith('"arguments": ')
    usage = next(
        d for d in response.find_elements(By.TAG_NAME, "details")
        if d.find_element(By.TAG_NAME, "summary").text.startswith('"usage"')
    )  # fmt: skip
    assert usage.get_attribute("open") is None
    hits = usage.find_element(By.XPATH, ".//li[contains(., 'prompt_cache_miss_tokens')]")
    assert not hits.is_displayed()
    usage.find_element(By.TAG_NAME, "summary").click()
    assert usage.get_attribute("open") is not None and hits.is_displayed()
    assert hits.text == '"prompt_cache_miss_tokens": 900'
    folded = browser.find_element(By.CSS_SELECTOR, "#x2 details.prefix")
    assert folded.get_attribute("open") is None
    inside = folded.find_element(By.TAG_NAME, "p")
    assert not inside.is_displayed()
    folded.find_element(By.TAG_NAME, "summary").click()  # the prefix the request shares
    assert folded.get_attribute("open") is not None and inside.is_displayed()
    assert inside.text == "messages 1–2 (new in request 1)"

    # The hostile answer is text on the page, and still nothing ran.
    assert "<script>alert(6)</script>" in browser.find_element(By.ID, "x3").text
    assert run("return document.scripts.length") == 0
    shot = tmp_path / "wire-page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_a_script_put_in_the_page_by_hand_is_refused_by_its_policy(browser, workdir, tmp_path):
    """Issue 40: what if a piece of model text got past the escaping? The page's own policy
    stops it: an inline script and an event handler added by hand do not run."""
    page, _ = hostile_page(workdir, tmp_path)
    text = Path(page).read_text(encoding="utf-8")
    added = "<script>document.title = 'it ran'</script><img src=x onerror=\"document.title='x'\">"
    Path(page).write_text(text.replace("</body>", added + "</body>", 1), encoding="utf-8")
    browser.get(Path(page).as_uri())
    assert browser.execute_script("return document.scripts.length") == 1  # there, refused
    assert browser.title == "Conversation evil: requests and responses"


def test_the_page_reads_at_a_phones_width_and_at_a_desktops(browser, workdir, tmp_path):
    """Issue 39: at 390x844 the page is as wide as the phone (its viewport tag), nothing
    scrolls sideways, the timeline sits above the steps and the text has the width; at 1280 px
    the timeline stays beside them."""
    from selenium.webdriver.common.by import By

    page, _ = hostile_page(workdir, tmp_path)
    run = browser.execute_script
    for width, height, phone in ((1280, 1600, False), (390, 844, True)):
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": phone},
        )
        browser.get(Path(page).as_uri())
        shown = run("return document.documentElement.clientWidth")  # less a desktop's scrollbar
        assert shown == width if phone else width - 20 <= shown <= width  # no 980 px layout
        assert run("return document.documentElement.scrollWidth") <= shown  # no sideways scroll
        nav, main = (browser.find_element(By.TAG_NAME, name).rect for name in ("nav", "main"))
        title = browser.find_element(By.TAG_NAME, "h1")
        assert run("return arguments[0].scrollWidth <= arguments[0].clientWidth", title)
        if phone:
            assert nav["y"] + nav["height"] <= main["y"] + 1  # above the steps
            assert main["width"] >= width - 20  # the text has the phone's width
        else:
            assert nav["x"] + nav["width"] <= main["x"] + 1  # beside them
        shot = tmp_path / f"wire-page-{width}.png"
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
