"""The batches page in a real browser (Debian's headless Chromium through Playwright), against
``dbscheduler web`` in its own process and a node on PostgreSQL with keys in every state.

Screenshots land in ``tests/web/screenshots/`` (git-ignored) for people to look at.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from dbscheduler import LinearBackoff, Scheduler, TaskContext
from tests.web.conftest import wait_for
from tests.web.test_browser import SHOTS, Server, Watch, confirm, wait_for_refresh


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path="/usr/bin/chromium")
        yield chromium
        chromium.close()


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[Scheduler]:
    url, table = migrated
    scheduler = Scheduler(url, table=table, lease=3, poll_interval=0.2, node_id="batch-web-1")
    gate = threading.Event()
    entered = threading.Event()

    @scheduler.batch_handler("digest", on_failure=LinearBackoff(3600))
    def digest(ctx: TaskContext, items: list[object]) -> None:
        if ctx.name.endswith("slow@example.com"):
            entered.set()
            gate.wait(300)  # until the test ends (it sets the gate): a slow machine takes a minute
            return
        raise ConnectionError("smtp.example.com refused the connection")

    scheduler.start()
    # An hour from now, taken here, not at import: xdist may collect this file minutes earlier.
    later = time.time() + 3600
    for i in range(3):
        scheduler.push("ann@example.com", {"n": i}, handler="digest", ontime=later,
                       update="once")
    scheduler.push("bob@example.com", {"n": 1}, handler="digest", ontime=later + 600)
    scheduler.push("fails@example.com", {"n": 1}, handler="digest")
    scheduler.push("slow@example.com", {"n": 1}, handler="digest")
    for i in range(2):
        scheduler.push("-reset", {"n": i}, handler="password", ontime=later)
    scheduler.push("cross-42 POST 0123456789abcdef", ["x"], handler="dbscheduler.http",
                   ontime=later, data={"method": "POST",
                                       "url": "http://mail.internal:8025/digest?to=ann"})
    assert entered.wait(10)
    wait_for(lambda: any(b.attempt for b in scheduler.batches()), what="the failed delivery")
    yield scheduler
    gate.set()
    scheduler.shutdown(timeout=5)


def keys(page: Page) -> list[str]:
    return page.eval_on_selector_all("table.batches tbody tr", "rs => rs.map(r => r.dataset.key)")


@pytest.mark.slow
def test_the_batches_page_in_a_real_browser(node: Scheduler, browser: Browser) -> None:
    SHOTS.mkdir(exist_ok=True)
    url, table = str(node.engine.url.render_as_string(hide_password=False)), node.table
    server = Server(url, table)
    read_only = Server(url, table, "--host", "0.0.0.0", "--read-only")
    watch = Watch()
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 760},
                                      timezone_id="Europe/Berlin", locale="en-GB")
        page = watch.attach(context.new_page())
        page.goto(server.base + "batches")
        expected = [b.key for b in node.batches()]  # soonest due first
        assert sorted(expected) == sorted([
            "slow@example.com", "fails@example.com", "ann@example.com", "-reset", "-reset",
            "cross-42 POST 0123456789abcdef", "bob@example.com"])
        assert expected[0] == "slow@example.com" and expected[-1] == "bob@example.com"
        wait_for(lambda: keys(page) == expected, what=f"rows {expected}")
        assert page.locator('nav.nav a[aria-current="page"]').inner_text() == "Batches"
        ann = page.locator('tr[data-key="ann@example.com"]')
        assert ann.locator("td.items").inner_text() == "3"
        assert re.search(r"\bin (5\dm|1h)\b", ann.inner_text()), ann.inner_text()  # ~later
        fails = page.locator('tr[data-key="fails@example.com"]')
        assert "failing" in fails.inner_text()
        assert "smtp.example.com refused" in fails.locator(".error-line").inner_text()
        slow = page.locator('tr[data-key="slow@example.com"]')
        assert "delivering now\non batch-web-1" in slow.inner_text()
        assert "failing" not in slow.inner_text(), "a delivery under way has not failed"
        http = page.locator('tr[data-key="cross-42 POST 0123456789abcdef"]')
        assert http.locator(".task-link").inner_text() == "cross-42"  # the merge key
        assert "POST http://mail.internal:8025/digest?to=ann" in http.locator(
            ".target").inner_text()
        assert page.locator("#batch-summary").inner_text() == "7 keys · 9 items waiting"
        page.screenshot(path=SHOTS / "batches-desktop.png", full_page=True)

        # Filter by handler; the filter survives the live refresh.
        page.click('a.filter[data-handler="password"]')
        wait_for(lambda: keys(page) == ["-reset", "-reset"], what="the password keys")
        assert "handler=password" in page.url
        wait_for_refresh(page)
        assert keys(page) == ["-reset", "-reset"]
        page.click('a.filter[data-handler=""]')
        wait_for(lambda: keys(page) == expected, what="every key again")

        # Drop behind a confirmation; cancelling changes nothing.
        page.click('tr[data-key="ann@example.com"] button[data-drop]')
        dialog = page.locator("dialog#confirm")
        dialog.wait_for(state="visible")
        assert "3 pending items are removed" in dialog.inner_text()
        page.screenshot(path=SHOTS / "batches-drop-confirm.png")
        dialog.locator('button[value="cancel"]').click()
        wait_for_refresh(page)
        assert "ann@example.com" in keys(page)
        page.click('tr[data-key="ann@example.com"] button[data-drop]')
        confirm(page, "Drop ann@example.com?")
        page.locator("#toast", has_text="Dropped 3 items of ann@example.com.").wait_for()
        assert "ann@example.com" not in keys(page)
        assert not [b for b in node.batches() if b.key == "ann@example.com"]
        page.screenshot(path=SHOTS / "batches-dropped.png", full_page=True)

        # A phone: cards.
        phone = browser.new_context(viewport={"width": 390, "height": 844},
                                    device_scale_factor=2, is_mobile=True, has_touch=True,
                                    timezone_id="Europe/Berlin", locale="en-GB")
        mobile = watch.attach(phone.new_page())
        mobile.goto(server.base + "batches")
        wait_for(lambda: len(keys(mobile)) == 6, what="the keys on the phone")
        mobile.screenshot(path=SHOTS / "batches-phone.png", full_page=True)

        # Read-only: no drop button.
        viewer = watch.attach(context.new_page())
        viewer.goto(read_only.base + "batches")
        wait_for(lambda: len(keys(viewer)) == 6, what="the keys, read-only")
        assert viewer.locator("button[data-drop]").count() == 0
        viewer.screenshot(path=SHOTS / "batches-readonly.png", full_page=True)

        # Nothing pending: the empty page says how keys get there.
        for b in node.batches():
            node.drop(b.key, handler=b.handler)
        page.goto(server.base + "batches")
        page.locator("text=No pending batches").wait_for()
        page.screenshot(path=SHOTS / "batches-empty.png")

        assert watch.problems == []
        assert watch.dialogs == []
    finally:
        server.stop()
        read_only.stop()
