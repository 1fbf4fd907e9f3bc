"""The page in a real browser: Debian's chromium, headless, driven by selenium through
chromedriver, against the real `runner ui` server (a subprocess) on SQLite and PostgreSQL.

A person clicks from the runs into a run and on to the stop reasons with scripts off (the
pages need none; with scripts on, an unfinished run's page follows it live), cancels a run
with the form, and opens a run whose task, tool result and answer are full of scripts and
script links: with scripts on, nothing of it runs. RUNNER_REQUIRE_BROWSER=1 (as in CI) makes
a missing browser a failure, not a skip. RUNNER_UI_SCREENSHOTS=FOLDER saves a screenshot of
each page there (docs/screenshots).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Agent, Runner, RunNotFound, tool
from runner.core.deltas import current_stream
from tests.conditions import GENEROUS, wait_until

from .seed import Seeded

RUNNER = Path(sys.executable).parent / "runner"
REQUIRE_BROWSER = os.environ.get("RUNNER_REQUIRE_BROWSER") == "1"
SCREENSHOTS = os.environ.get("RUNNER_UI_SCREENSHOTS")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
TOKEN = "tok-3b1f9c"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    """`runner ui` in a subprocess, its log in a file, up once it answers."""

    def __init__(self, url: str, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [str(RUNNER), "ui", "--db", url, "--port", str(self.port), *extra],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.base + "/static/style.css", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # it answers (a token server answers 401)
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise AssertionError(f"runner ui did not start:\n{log.read_text()}") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@pytest.fixture(scope="module")
def server(seeded: Seeded, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = Server(seeded.url, tmp_path_factory.mktemp("ui-server") / "server.log")
    yield started
    started.close()
    assert "Traceback" not in started.log_path.read_text()


def _chrome(*, scripts: bool) -> Any:
    if CHROMIUM is None or CHROMEDRIVER is None:
        message = (
            "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"
        )
        if REQUIRE_BROWSER:
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    if not scripts:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)  # a find waits for a page still loading after a click
    return driver


@pytest.fixture(scope="module")
def noscript() -> Iterator[Any]:
    """A browser with JavaScript turned off: the pages work without it."""
    driver = _chrome(scripts=False)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def scripted() -> Iterator[Any]:
    """A browser with JavaScript on: to show that nothing a model wrote runs."""
    driver = _chrome(scripts=True)
    yield driver
    driver.quit()


def screenshot(driver: Any, seeded: Seeded, name: str) -> None:
    if SCREENSHOTS and seeded.url.startswith("sqlite"):
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(SCREENSHOTS) / f"{name}.png"))


def by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def arrive(driver: Any, url: str) -> None:
    """Wait (bounded) until a click's navigation lands on `url` (a prefix of it with `*`)."""
    from selenium.webdriver.support.ui import WebDriverWait

    def there(d: Any) -> bool:
        now = str(d.current_url)
        return now.startswith(url[:-1]) if url.endswith("*") else now == url

    WebDriverWait(driver, 15).until(there)


def link(driver: Any, text: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.LINK_TEXT, text)


def test_click_from_the_runs_into_a_run_and_to_the_stop_reasons(
    server: Server, noscript: Any, seeded: Seeded
) -> None:
    noscript.get(server.base + "/")
    assert noscript.title == "Runs · runner"
    ids = [a.text for a in by_css(noscript, "a.run-link")]
    assert ids[0] == seeded.running and "r1-00" in ids
    screenshot(noscript, seeded, "runs")

    link(noscript, "r1-00").click()
    arrive(noscript, server.base + "/runs/r1-00")
    body = noscript.find_element("tag name", "body").text
    assert by_css(noscript, "h1")[0].text.split()[:2] == ["Run", "r1-00"]
    assert "the sum is 5" in body and "key r1-00-1" in body
    assert [m.get_attribute("class") for m in by_css(noscript, ".msg")] == [
        "msg user",
        "msg assistant call",
        "msg tool ",
        "msg assistant final",
    ]
    noscript.set_window_size(1280, 1200)  # the run's header and its first steps
    screenshot(noscript, seeded, "run")
    noscript.set_window_size(1280, 900)

    link(noscript, "Stop reasons").click()
    arrive(noscript, server.base + "/stats")
    assert by_css(noscript, "svg.stops rect.flagged"), "the regression is marked in the chart"
    assert "shop r2: max_steps 0.0% → 45.5%" in noscript.find_element("tag name", "body").text
    screenshot(noscript, seeded, "stats")

    link(noscript, "Runs").click()
    arrive(noscript, server.base + "/")


def test_filters_and_pages_work_with_scripts_off(server: Server, noscript: Any) -> None:
    from selenium.webdriver.support.ui import Select

    noscript.get(server.base + "/")
    Select(by_css(noscript, "select[name=status]")[0]).select_by_value("finished")
    Select(by_css(noscript, "select[name=stop_reason]")[0]).select_by_value("max_steps")
    by_css(noscript, "input[name=release]")[0].send_keys("r2")
    by_css(noscript, "form.filters button")[0].click()
    arrive(noscript, server.base + "/?status=finished*")
    assert "stop_reason=max_steps" in noscript.current_url and "release=r2" in noscript.current_url
    shown = {a.text for a in by_css(noscript, "a.run-link")}
    assert shown == {"r2-00", "r2-02", "r2-04", "r2-06", "r2-08", "long-1"}

    noscript.get(server.base + "/runs/long-1")
    by_css(noscript, "a[rel=next]")[0].click()
    arrive(noscript, server.base + "/runs/long-1?from=51")
    heads = [h.text.split()[1] for h in by_css(noscript, ".step-head")]
    assert heads[0] == "51" and heads[-1] == "100"


def test_nothing_a_model_wrote_runs_in_the_browser(
    server: Server, scripted: Any, seeded: Seeded
) -> None:
    from runner.ui.security import HEADERS

    assert scripted.execute_script("return 1 + 1") == 2  # scripts do run in this browser
    for path in ("/", "/stats", "/stats?by=agent", f"/runs/{seeded.hostile}"):
        scripted.get(server.base + path)
        assert scripted.execute_script("return typeof window.pwned") == "undefined", path
        assert scripted.title != "pwned"
        assert scripted.execute_script("return document.scripts.length") == 0
        assert scripted.execute_script("return document.images.length") == 0
        hrefs = scripted.execute_script(
            "return Array.from(document.links, a => a.getAttribute('href'))"
        )
        assert not [h for h in hrefs if not h.startswith(("/", "?"))], hrefs
        # Neither the agent's name (<u>), its release (<i>) nor the hostile link is an element.
        assert (
            scripted.execute_script(
                "return document.querySelectorAll('u, i, #hostile-link').length"
            )
            == 0
        )
    body = scripted.find_element("tag name", "body").text  # the hostile run's page
    # The task, the call's arguments, the tool's result and the answer, each as text.
    assert body.count("<script>window.pwned = 'script'") == 4
    assert 'href="javascript:' in body  # shown as text
    # Clicking where the hostile link would be does nothing either.
    by_css(scripted, ".msg.final pre")[0].click()
    assert scripted.execute_script("return typeof window.pwned") == "undefined"
    policy = HEADERS["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe" not in policy  # own files, no inline


def test_cancel_a_run_with_the_form(server: Server, noscript: Any, seeded: Seeded) -> None:
    noscript.get(f"{server.base}/runs/{seeded.queued}")
    by_css(noscript, "form.action button")[0].click()
    arrive(noscript, f"{server.base}/runs/{seeded.queued}?notice=cancelled")
    assert "The run is cancelled." in noscript.find_element("tag name", "body").text
    assert 'class="action"' not in noscript.page_source  # finished: no cancel form
    with Runner(seeded.url) as runner:
        assert str(runner.get(seeded.queued).stop_reason) == "cancelled"


def test_a_token_server_asks_for_its_token(seeded: Seeded, noscript: Any, tmp_path: Path) -> None:
    guarded = Server(seeded.url, tmp_path / "server.log", "--token", TOKEN)
    try:
        noscript.delete_all_cookies()
        noscript.get(guarded.base + "/stats")
        assert "needs its token" in noscript.find_element("tag name", "body").text
        noscript.get(f"{guarded.base}/stats?token={TOKEN}")
        arrive(noscript, guarded.base + "/stats")  # the token left the URL
        link(noscript, "Runs").click()
        arrive(noscript, guarded.base + "/")
        assert by_css(noscript, "a.run-link"), "the cookie opened the other pages"
    finally:
        guarded.close()
    logged = guarded.log_path.read_text()
    assert '"GET /stats?token=***' in logged and TOKEN not in logged  # access lines hide it


# -- a live run, followed by its page ---------------------------------------------------------

SPEAK = threading.Event()  # the model call in flight answers once the test has seen it stream


@tool(idempotent=True)
def add_up(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def streaming_model(transcript: list[dict[str, Any]]) -> dict[str, Any]:
    """Streams its first response in pieces and holds it until SPEAK; then answers."""
    if not [m for m in transcript if m["role"] == "tool"]:
        stream = current_stream()
        assert stream is not None, "the durable runner streams every model call's pieces"
        for piece in ("Let me add ", "<b>2</b> and 3", " first."):
            stream.emit(piece)
        SPEAK.wait(GENEROUS)
        return {"type": "tool", "name": "add_up", "args": {"a": 2, "b": 3}}
    return {"type": "final", "content": "the sum is <i>5</i>"}


LIVE = Agent(streaming_model, {"add_up": add_up}, name="live")


def _journaled(runner: Runner, run_id: str) -> int:
    try:
        return len(runner.journal(run_id))
    except RunNotFound:
        return 0  # not created yet


def test_a_live_runs_page_follows_it_to_its_end(
    server: Server, scripted: Any, seeded: Seeded
) -> None:
    run_id = f"live-{seeded.url[:6]}"
    SPEAK.clear()
    with Runner(seeded.url) as runner:
        done: list[Any] = []
        worker = threading.Thread(target=lambda: done.append(runner.run(LIVE, "add", id=run_id)))
        worker.start()
        try:
            wait_until(lambda: _journaled(runner, run_id) >= 1, timeout=GENEROUS,
                       what="the run's task")  # fmt: skip
            scripted.get(f"{server.base}/runs/{run_id}")
            assert scripted.execute_script("return document.scripts.length") == 1
            # The call in flight, as it streams, shown as text.
            streamed = "Let me add <b>2</b> and 3 first."
            wait_until(
                lambda: by_css(scripted, "#live-text")[0].text == streamed,
                timeout=GENEROUS, what="the streamed text on the page",
            )  # fmt: skip
            assert by_css(scripted, "#live-streaming")[0].is_displayed()
        finally:
            SPEAK.set()
            worker.join(GENEROUS)
    assert done and done[0].output == "the sum is <i>5</i>"
    wait_until(
        lambda: "the run stopped: final" in by_css(scripted, "#live-state")[0].text,
        timeout=GENEROUS, what="the page to say the run stopped",
    )  # fmt: skip
    # Each entry after the one the server drew, once, in order; the streamed text gone.
    positions = [
        int(box.get_attribute("data-position"))
        for box in by_css(scripted, "#live-entries [data-position]")
    ]
    with Runner(seeded.url) as runner:
        total = len(runner.journal(run_id))
    assert positions == list(range(1, total))
    shown = by_css(scripted, "#live-entries")[0].text
    assert "model calls add_up" in shown and "the sum is <i>5</i>" in shown
    assert not by_css(scripted, "#live-streaming")[0].is_displayed()
    markup = "return document.querySelectorAll('#live-entries i, #live-text b').length"
    assert scripted.execute_script(markup) == 0  # what the model wrote is text
