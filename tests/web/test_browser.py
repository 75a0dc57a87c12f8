"""The dashboard in a real browser: Debian's headless Chromium driven by Playwright, against
``dbscheduler web`` (uvicorn) in its own process and a running node on PostgreSQL.

Screenshots land in ``tests/web/screenshots/`` (git-ignored) for people to look at; those of
the tasks, task and runs pages also replace the documentation's (``docs/assets/dashboard-*.png``,
shown by docs/guides/web.md), so the pictures there are of the dashboard as it is.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.web.conftest import Node, make_node, wait_for

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).parent / "screenshots"
ROOT = Path(__file__).resolve().parents[2]
DOC_SHOTS = ROOT / "docs" / "assets"

if not CHROMIUM.exists() and not os.environ.get("CI"):
    pytest.skip("no /usr/bin/chromium (apt-get install chromium; CI installs it)",
                allow_module_level=True)

from playwright.sync_api import (  # noqa: E402
    Browser,
    ConsoleMessage,
    Dialog,
    Page,
    Request,
    Response,
    sync_playwright,
)


@pytest.fixture
def backend() -> str:
    return "postgresql"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``dbscheduler web`` in a subprocess, answering on 127.0.0.1."""

    def __init__(self, url: str, table: str, *extra: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("DBSCHEDULER_")}
        env["PYTHONPATH"] = str(ROOT)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dbscheduler", "web", "--url", url, "--table", table,
             "--port", str(self.port), "--log-level", "warning", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.base = f"http://127.0.0.1:{self.port}/"
        deadline = time.monotonic() + 60  # a start of 1-2 s, on a machine 10x slower
        while True:
            try:
                with urllib.request.urlopen(self.base + "api/health", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"dbscheduler web did not come up: {self.proc.stdout.read()}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[Node]:
    url, table = migrated
    node = make_node(url, table)
    node.scheduler.start()
    node.start_slow()
    node.run_failing()
    yield node
    node.scheduler.shutdown(timeout=5)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM))
        yield chromium
        chromium.close()


class Watch:
    """Console errors, page errors, failed requests and error responses of a page."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.dialogs: list[str] = []

    def attach(self, page: Page) -> Page:
        def console(message: ConsoleMessage) -> None:
            if message.type == "error":
                self.problems.append(f"console: {message.text}")

        def response(answer: Response) -> None:
            if answer.status >= 400:
                self.problems.append(f"{answer.status} {answer.url}")

        def dialog(opened: Dialog) -> None:
            self.dialogs.append(opened.message)
            opened.dismiss()

        page.on("console", console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        def failed(request: Request) -> None:
            # A live refresh still in flight when the test navigates away is aborted by the
            # browser: that is the navigation, not a failure of the page. (A refresh reads, a
            # partial or the API; an aborted write would still count.)
            if request.failure == "net::ERR_ABORTED" and request.method == "GET" and (
                    "/partials/" in request.url or "/api/" in request.url):
                return
            self.problems.append(f"failed: {request.url} {request.failure}")

        page.on("requestfailed", failed)
        page.on("response", response)
        page.on("dialog", dialog)
        return page


def rows(page: Page) -> list[str]:
    return page.eval_on_selector_all(
        "table.tasks tbody tr", "rs => rs.map(r => r.dataset.name)")


def wait_rows(page: Page, expected: list[str]) -> None:
    wait_for(lambda: rows(page) == expected, what=f"rows {expected}")


def wait_for_refresh(page: Page) -> None:
    """Wait until the live region has been swapped in again."""
    before = page.get_attribute(".live-meta", "data-db-now")
    page.wait_for_function(
        "b => document.querySelector('.live-meta').dataset.dbNow !== b", arg=before,
        timeout=10_000)


def confirm(page: Page, title_part: str) -> None:
    dialog = page.locator("dialog#confirm")
    dialog.wait_for(state="visible")
    assert title_part in dialog.locator("h2").inner_text()
    dialog.locator("#confirm-ok").click()


@pytest.mark.slow
def test_the_dashboard_in_a_real_browser(node: Node, browser: Browser) -> None:
    SHOTS.mkdir(exist_ok=True)
    ops = node.scheduler
    server = Server(node.url, node.table)
    read_only = Server(node.url, node.table, "--host", "0.0.0.0", "--read-only")
    watch = Watch()
    try:
        context = browser.new_context(
            viewport={"width": 1280, "height": 860}, timezone_id="Europe/Berlin",
            locale="en-GB")
        page = watch.attach(context.new_page())

        # The list: every task, the running and failing ones marked.
        page.goto(server.base)
        all_names = sorted(i.name for i in ops.tasks())
        wait_rows(page, all_names)
        assert page.locator('tr[data-name="broken"]').get_attribute("class").count("is-failing")
        assert "running" in page.locator('tr[data-name="slow"]').inner_text()
        assert "every day at 03:00 Europe/Berlin" in page.locator(
            'tr[data-name="nightly-report"]').inner_text()
        page.screenshot(path=SHOTS / "tasks-desktop.png", full_page=True)
        page.screenshot(path=DOC_SHOTS / "dashboard-tasks.png")

        # Filter by state, then search.
        page.click('a.filter[data-state="failing"]')
        wait_rows(page, ["broken"])
        assert "state=failing" in page.url
        page.click('a.filter[data-state=""]')
        wait_rows(page, all_names)
        page.fill("#search", "report")
        wait_rows(page, ["nightly-report", "reports/daily/eu"])
        page.fill("#search", "no such thing")
        page.locator("text=No matching tasks").wait_for()
        page.screenshot(path=SHOTS / "search-empty.png")
        page.fill("#search", "")
        wait_rows(page, all_names)

        # Select two, the selection survives a refresh, pause both through the bulk bar.
        page.check('input.select[value="cleanup"]')
        page.check('input.select[value="every-5-minutes"]')
        wait_for_refresh(page)
        assert page.is_checked('input.select[value="cleanup"]')
        assert page.inner_text("#bulk-count") == "2 tasks selected"
        page.screenshot(path=SHOTS / "bulk-selected.png")
        page.click('#bulkbar [data-bulk="pause"]')
        page.screenshot(path=SHOTS / "bulk-confirm.png")
        confirm(page, "Pause 2 tasks?")
        page.locator("#toast", has_text="2 tasks paused.").wait_for()
        # The page shows the change as soon as it says so: rows marked, selection cleared.
        assert page.locator('tr[data-name="cleanup"] .chip-paused').is_visible()
        assert page.locator('tr[data-name="every-5-minutes"] .chip-paused').is_visible()
        assert page.locator("#bulkbar").is_hidden()
        assert page.locator("input.select:checked").count() == 0
        page.screenshot(path=SHOTS / "bulk-done.png")
        wait_for(lambda: ops.info("cleanup").paused and ops.info("every-5-minutes").paused,
                 what="both tasks paused in the database")
        assert not ops.info("nightly-report").paused

        # One task: the next fire times in the viewer's zone; pause through the confirmation.
        page.click('a.task-link:text-is("nightly-report")')
        page.wait_for_url("**/tasks/nightly-report")
        upcoming = page.locator("#upcoming li")
        assert upcoming.count() == 10
        # 03:00 in Berlin whatever the season (CET in winter, CEST in summer).
        assert all(re.search(r"03:00:00 CES?T", t) for t in upcoming.all_inner_texts())
        page.screenshot(path=SHOTS / "task-desktop.png", full_page=True)
        page.screenshot(path=DOC_SHOTS / "dashboard-task.png")
        page.click('[data-action="pause"]')
        confirm(page, "Pause nightly-report?")
        page.locator('[data-action="resume"]').wait_for()
        assert ops.info("nightly-report").paused

        # Reschedule with the picker, in the viewer's zone (Berlin summer time: UTC+2).
        page.click('[data-action="reschedule"]')
        page.fill("#reschedule-at", "2031-05-06T07:08")
        page.screenshot(path=SHOTS / "reschedule-dialog.png")
        confirm(page, "Reschedule nightly-report?")
        wait_for(lambda: ops.info("nightly-report").next_process_at
                 == datetime(2031, 5, 6, 5, 8, tzinfo=timezone.utc), what="the new due time")

        # A failing task, and a name made of markup that must stay text.
        page.goto(server.base + "tasks/broken")
        assert "upstream answered 503" in page.inner_text(".error-text")
        page.screenshot(path=SHOTS / "task-failing.png", full_page=True)
        # Its runs: the duration chart and the table, newest first.
        runs = ops.runs("broken", limit=60)
        assert runs and page.locator("#runs svg rect.bar").count() == len(runs)
        assert page.locator("#runs tbody tr").count() == min(len(runs), 25)
        newest = page.locator("#runs tbody tr").first.inner_text()
        assert "error" in newest and "upstream answered 503" in newest
        assert "web-test-node" in newest
        page.locator("#runs").screenshot(path=SHOTS / "task-runs.png")
        # The runs of every task, filtered by status; the live refresh keeps the filter.
        page.click('nav.nav a:text-is("Runs")')
        page.wait_for_url("**/runs")
        assert page.locator("table.runs tbody tr").count() == len(ops.runs(limit=200))
        page.click('a.filter:text-is("Error")')
        page.wait_for_url("**/runs?status=error")
        wait_for_refresh(page)
        failed = page.locator("table.runs tbody .task-link").all_inner_texts()
        assert failed == [r.name for r in ops.runs(status="error", limit=200)] == ["broken"]
        page.screenshot(path=SHOTS / "runs-desktop.png", full_page=True)
        page.screenshot(path=DOC_SHOTS / "dashboard-runs.png")
        page.goto(server.base)
        page.click('a.task-link:text-is("<script>alert(1)</script>")')
        assert page.inner_text("h1") == "<script>alert(1)</script>"

        # A phone: cards instead of a table; a refresh keeps the scroll position.
        phone = browser.new_context(
            viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
            has_touch=True, timezone_id="Europe/Berlin", locale="en-GB")
        mobile = watch.attach(phone.new_page())
        mobile.goto(server.base)
        wait_rows(mobile, all_names)
        mobile.screenshot(path=SHOTS / "tasks-phone.png")
        mobile.evaluate("window.scrollTo(0, 400)")
        wait_for_refresh(mobile)
        assert mobile.evaluate("window.scrollY") == 400
        mobile.goto(server.base + "tasks/nightly-report")
        mobile.screenshot(path=SHOTS / "task-phone.png", full_page=True)

        # Read-only: the same pages without a single control.
        viewer = watch.attach(context.new_page())
        viewer.goto(read_only.base)
        wait_rows(viewer, all_names)
        assert viewer.locator("#read-only-badge").is_visible()
        assert viewer.locator("input.select, #bulkbar").count() == 0
        viewer.screenshot(path=SHOTS / "readonly-desktop.png", full_page=True)
        viewer.goto(read_only.base + "tasks/cleanup")
        assert viewer.locator("[data-action]").count() == 0

        assert watch.problems == []
        assert watch.dialogs == [], "a name was run as script"
    finally:
        server.stop()
        read_only.stop()
