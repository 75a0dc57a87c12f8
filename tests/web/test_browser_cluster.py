"""The nodes and groups pages in a real browser (Debian's headless Chromium through
Playwright), against ``dbscheduler web`` in its own process and a node on PostgreSQL: which
nodes are alive and what each runs, why a task waits and why one failed (its traceback), from
the dashboard alone.

Screenshots land in ``tests/web/screenshots/`` (git-ignored) for people to look at.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, sync_playwright

from dbscheduler import FixedRate, Scheduler, TaskContext
from dbscheduler.companion_tables import make_nodes_table
from tests.web.conftest import wait_for
from tests.web.test_browser import SHOTS, Server, Watch, wait_for_refresh


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path="/usr/bin/chromium")
        yield chromium
        chromium.close()


def parse_total(order: dict[str, object]) -> float:
    return float(str(order["total"]))


def import_orders(ctx: TaskContext) -> None:
    parse_total({"id": 42, "total": "12,50 €"})


@pytest.fixture
def node(migrated: tuple[str, str]) -> Iterator[Scheduler]:
    """``worker-eu-1`` runs ``reports/daily`` of the full group ``reports`` (limit 1) while
    ``reports/weekly`` waits for it; ``worker-old`` stopped two minutes ago."""
    url, table = migrated
    seen = datetime.now(timezone.utc) - timedelta(minutes=2)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.insert(make_nodes_table(table)).values(
            node_id="worker-old", host="build-7", pid=311, version="0.0.9", tags="[]",
            handlers='["send-mail"]', started_at=seen - timedelta(hours=3), last_seen=seen,
            running=0))
    engine.dispose()
    release = threading.Event()
    scheduler = Scheduler(url, table=table, node_id="worker-eu-1", tags=["eu", "gpu"], lease=3,
                          poll_interval=0.2)

    def hold(ctx: TaskContext) -> None:
        release.wait(60)

    scheduler.add("reports/daily", hold, schedule=FixedRate(3600), group="reports")
    scheduler.add("reports/weekly", lambda ctx: None, schedule=FixedRate(3600), group="reports")
    scheduler.add("cleanup", lambda ctx: None, schedule=FixedRate(3600), group="maintenance")
    scheduler.add("import-orders", import_orders, schedule=FixedRate(3600))
    scheduler.handler("send-mail")(lambda ctx: None)
    scheduler.handler("digest")(lambda ctx: None)
    scheduler.start()
    scheduler.client.set_group_limit("reports", 1)
    scheduler.client.set_group_limit("maintenance", 3)
    scheduler.trigger("reports/daily")
    wait_for(lambda: scheduler.info("reports/daily").running, what="reports/daily to run")
    scheduler.trigger("reports/weekly")
    scheduler.trigger("import-orders")
    wait_for(lambda: any(r.traceback for r in scheduler.runs("import-orders")),
             what="import-orders to fail")
    yield scheduler
    release.set()
    scheduler.shutdown(timeout=5)


def test_nodes_and_groups_pages_in_a_real_browser(node: Scheduler, browser: Browser) -> None:
    SHOTS.mkdir(exist_ok=True)
    url = node.engine.url.render_as_string(hide_password=False)
    server = Server(url, node.table)
    watch = Watch()
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 800},
                                      timezone_id="Europe/Berlin", locale="en-GB")
        page = watch.attach(context.new_page())
        page.goto(server.base)
        page.click('nav.nav a:text-is("Nodes")')
        page.wait_for_url("**/nodes")
        # Which nodes are alive, and what each runs now (the row refreshes on its own).
        live = page.locator('tr[data-node="worker-eu-1"]')
        live.locator('a.task-link:text-is("reports/daily")').wait_for(timeout=15_000)
        assert live.locator(".status").inner_text() == "alive"
        assert "eu" in live.inner_text() and "send-mail" in live.inner_text()
        gone = page.locator('tr[data-node="worker-old"]')
        assert gone.locator(".status").inner_text() == "gone"
        assert page.locator("#node-summary").inner_text() == "2 nodes · 1 alive"
        wait_for_refresh(page)
        page.screenshot(path=SHOTS / "nodes-desktop.png", full_page=True)

        # Why a task waits: its group is full.
        page.click('nav.nav a:text-is("Groups")')
        page.wait_for_url("**/groups")
        full = page.locator('tr[data-group="reports"]')
        assert full.locator(".usage").inner_text() == "1 / 1"
        assert "is-full" in (full.get_attribute("class") or "")
        page.screenshot(path=SHOTS / "groups-desktop.png", full_page=True)
        full.locator('a.task-link:text-is("reports/weekly")').click()
        page.wait_for_url("**/tasks/reports%2Fweekly")
        chip = page.locator("#group-wait")
        assert chip.inner_text() == "waiting for group reports (1/1 running)"
        assert "the group is full" in page.locator("#group-reason").inner_text()
        page.screenshot(path=SHOTS / "task-waiting-for-group.png")

        # Why it failed, with its traceback.
        page.goto(server.base + "tasks/import-orders")
        run = page.locator("#runs tbody tr").first
        assert "ValueError: could not convert string to float" in run.inner_text()
        run.locator("details.traceback summary").click()
        trace = run.locator("details.traceback pre")
        trace.wait_for()
        assert "in parse_total" in trace.inner_text() and "in import_orders" in trace.inner_text()
        page.locator("#runs").screenshot(path=SHOTS / "task-traceback.png")

        phone = browser.new_context(viewport={"width": 390, "height": 844},
                                    device_scale_factor=2, is_mobile=True,
                                    timezone_id="Europe/Berlin", locale="en-GB")
        mobile = watch.attach(phone.new_page())
        mobile.goto(server.base + "nodes")
        mobile.locator('tr[data-node="worker-eu-1"] a.task-link').wait_for()
        mobile.screenshot(path=SHOTS / "nodes-phone.png", full_page=True)
        mobile.goto(server.base + "groups")
        mobile.screenshot(path=SHOTS / "groups-phone.png", full_page=True)
        mobile.goto(server.base + "tasks/import-orders")
        mobile.locator("#runs details.traceback summary").first.click()
        mobile.locator("#runs").screenshot(path=SHOTS / "task-traceback-phone.png")
        assert watch.problems == []
    finally:
        server.stop()
