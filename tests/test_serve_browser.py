"""The inspector in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by selenium).

The server runs with uvicorn on a free loopback port over a store of the demo sessions (extracted
from recorded replies). Screenshots land in the test's tmp dir. Skips where Chromium or its driver
is missing, fails under ``CI=true`` (``.ci/run`` installs them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from needs import skip_or_fail
from tortoise_sdk.cli import main as cli_main

#: Debian's paths; the variables point the test elsewhere (``test_without_chromium_...`` points them at nothing).
CHROMIUM = os.environ.get("TORTOISE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("TORTOISE_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
HOSTILE = '<script>window.__pwned = 1; alert("pwned")</script><img src=x onerror="window.__pwned=2">'

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1", "localhost", "::1"])


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_or_fail("needs selenium (pip install -e '.[dev]' installs it)")
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).is_file():
            skip_or_fail(f"needs {path}: apt-get install -y chromium chromium-driver (Debian package {package})")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """``tortoise serve`` on a free loopback port over the demo store plus a session holding hostile text."""
    import uvicorn

    from tortoise_sdk import Memory
    from tortoise_sdk.adapters.serve import ServeSettings, build_app
    from tortoise_sdk.store.plan import Fence

    db = tmp_path / "demo.db"
    assert cli_main(["--db", str(db), "demo"]) == 0
    with Memory(str(db), namespace="demo") as mem:
        mem.capture("hostile", [{"role": "user", "content": HOSTILE},
                                {"role": "assistant", "content": "[tool_use Read path=/etc/hosts]"}])
        for twin in ("twin\r1", "twin\n1"):  # an HTML attribute would read the first as the second
            mem.capture(twin, [{"role": "user", "content": f"I am {twin!r}"}])
    with Memory(str(db), namespace="demo", model="openai/stub-model") as mem:  # a job that failed for good
        mem.capture("stuck", [{"role": "user", "content": "My sister Ana lives in Porto"}], extract="background")
        job = mem.store.lease_job("demo", lease_s=30, max_attempts=1, session_id="stuck", due_only=False)
        mem.store.fail_job(Fence(job.job_id, job.revision), "s1: AuthenticationError: bad key", max_attempts=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = build_app(ServeSettings(db=str(db), namespaces=["demo"]))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started:
        assert time.monotonic() < deadline, "the server did not start within 30 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=30)


def test_walk_the_inspector_try_a_prompt_and_forget_a_session_and_a_memory(browser: Any, server: str,
                                                                          tmp_path: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)
    shots = tmp_path / "screenshots"
    shots.mkdir()

    # namespace → session → turn
    browser.get(server + "/")
    browser.find_element(By.LINK_TEXT, "demo").click()
    wait.until(ec.presence_of_element_located((By.ID, "sessions")))
    browser.save_screenshot(str(shots / "1-namespace.png"))
    browser.find_element(By.LINK_TEXT, "demo-1").click()
    turns = wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, "#turns .turn")))
    assert any("Northwind Labs" in t.text for t in turns)
    browser.save_screenshot(str(shots / "2-session.png"))

    # memories → a memory's source turn, highlighted on the session page
    browser.find_element(By.LINK_TEXT, "memories").click()
    source = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#memories a.source")))
    target = source.get_attribute("href").split("#", 1)[1]
    source.click()
    wait.until(ec.url_contains("#" + target))
    assert browser.find_element(By.ID, target).is_displayed()

    # the search box finds the turn
    browser.get(server + "/ns/demo")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("Northwind")
    box.submit()
    hits = wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, "#hits .turn")))
    assert hits and "Northwind" in hits[0].text

    # a prompt, and the block with each pointer's reason
    browser.find_element(By.LINK_TEXT, "try a prompt").click()
    prompt = wait.until(ec.presence_of_element_located((By.ID, "prompt")))
    prompt.send_keys("Remind me, where do I work now?")
    browser.find_element(By.CSS_SELECTOR, "#try button").click()
    block = wait.until(ec.presence_of_element_located((By.ID, "block")))
    assert "Helix Health" in block.find_element(By.TAG_NAME, "pre").text
    reasons = [w.text for w in block.find_elements(By.CSS_SELECTOR, ".why")]
    assert reasons and all(r.startswith("why: ") and len(r) > len("why: ") for r in reasons)
    browser.save_screenshot(str(shots / "3-try-a-prompt.png"))

    # stored hostile text is shown as text, never run; the tool turn is folded
    browser.get(server + "/ns/demo/session?id=hostile")
    turn = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#turns article.turn")))
    assert "<script>" in turn.text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no alert is open
    assert browser.execute_script("return window.__pwned === undefined")
    folded = browser.find_element(By.CSS_SELECTOR, "#turns details.tool")
    assert folded.get_attribute("open") is None

    # forget a session: asked first (dismiss keeps it), then the tombstone
    browser.get(server + "/ns/demo/session?id=demo-2")
    forget = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[data-forget=session]")))
    forget.click()
    wait.until(ec.alert_is_present())
    assert "Forget the session demo-2" in browser.switch_to.alert.text
    browser.switch_to.alert.dismiss()
    assert browser.find_element(By.CSS_SELECTOR, ".tombstone").get_attribute("hidden") is not None
    forget.click()
    wait.until(ec.alert_is_present())
    browser.switch_to.alert.accept()
    tombstone = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".tombstone")))
    wait.until(lambda _: tombstone.text.startswith("Forgotten."))
    assert "Tombstone (none" not in tombstone.text and "turns 5" in tombstone.text
    browser.save_screenshot(str(shots / "4-forgotten.png"))
    browser.get(server + "/ns/demo")
    assert "demo-2" not in browser.find_element(By.ID, "sessions").text

    # a session id with a carriage return: that session is forgotten, not the one with a line feed
    browser.get(server + "/ns/demo/session?id=twin%0D1")
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[data-forget=session]"))).click()
    wait.until(ec.alert_is_present())
    browser.switch_to.alert.accept()
    stone = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".tombstone")))
    wait.until(lambda _: stone.text.startswith("Forgotten."))
    browser.get(server + "/ns/demo/session?id=twin%0A1")
    assert "I am 'twin\\n1'" in wait.until(ec.presence_of_element_located((By.ID, "turns"))).text
    # a session forgotten meanwhile (here through the API): the button says nothing was there, not "Forgotten."
    gone = urllib.request.Request(server + "/v1/ns/demo/sessions?session_id=twin%0A1", method="DELETE")
    with urllib.request.urlopen(gone, timeout=30) as answer:
        assert json.load(answer)["removed"]["turns"] == 1
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[data-forget=session]"))).click()
    wait.until(ec.alert_is_present())
    browser.switch_to.alert.accept()
    stone = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".tombstone")))
    wait.until(lambda _: stone.text.startswith("Nothing forgotten: the session twin"))
    assert "gone" not in browser.find_element(By.TAG_NAME, "main").get_attribute("class")

    # forget a memory from the memories page: its own card shows the tombstone
    browser.get(server + "/ns/demo/memories")
    card = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#memories article.memory.live")))
    content = card.find_element(By.CSS_SELECTOR, ".content").text
    card.find_element(By.CSS_SELECTOR, "button[data-forget=memory]").click()
    wait.until(ec.alert_is_present())
    assert browser.switch_to.alert.text.startswith("Forget the memory m_")
    browser.switch_to.alert.accept()
    stone = card.find_element(By.CSS_SELECTOR, ".tombstone")
    wait.until(lambda _: stone.text.startswith("Forgotten."))
    assert "memories 1" in stone.text and "gone" in card.get_attribute("class")
    browser.get(server + "/ns/demo/memories")
    assert content not in browser.find_element(By.ID, "memories").text

    # a failed extraction job: retried from the jobs page, asked first
    browser.find_element(By.LINK_TEXT, "jobs").click()
    retry = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#jobs button[data-retry]")))
    assert "AuthenticationError: bad key" in browser.find_element(By.ID, "jobs").text
    retry.click()
    wait.until(ec.alert_is_present())
    assert browser.switch_to.alert.text.startswith("Queue the failed extraction of stuck again?")
    browser.switch_to.alert.accept()
    note = wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#jobs .note")))
    wait.until(lambda _: note.text == "Queued again (pending)")
    browser.save_screenshot(str(shots / "5-jobs.png"))
    browser.refresh()
    assert "pending" in browser.find_element(By.ID, "jobs").text and not browser.find_elements(
        By.CSS_SELECTOR, "button[data-retry]")

    # a phone-sized window: the session page still fits its width
    browser.set_window_size(390, 844)
    browser.get(server + "/ns/demo/session?id=demo-1")
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= 390 + 1
    browser.save_screenshot(str(shots / "6-phone.png"))
    assert len(list(shots.glob("*.png"))) == 6


def test_without_chromium_the_browser_test_skips_saying_why_and_fails_in_ci(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env |= {"TORTOISE_TEST_CHROMIUM": str(tmp_path / "no-chromium"), "TORTOISE_TEST_CHROMEDRIVER": str(tmp_path / "x")}
    test = f"{__file__}::test_walk_the_inspector_try_a_prompt_and_forget_a_session_and_a_memory"
    for ci, outcome in ((None, "1 skipped"), ("true", "1 error")):
        run_env = env if ci is None else {**env, "CI": ci}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", test],
                              cwd=Path(__file__).parents[1], env=run_env, capture_output=True, text=True, timeout=300)
        assert outcome in proc.stdout and proc.returncode == (0 if ci is None else 1), proc.stdout
        assert f"needs {tmp_path / 'no-chromium'}: apt-get install -y chromium chromium-driver" in proc.stdout
