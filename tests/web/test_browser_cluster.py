"""The nodes and groups pages in a real browser (Debian's headless Chromium through
Playwright), against ``dbscheduler web`` in its own process and a node on PostgreSQL: which
nodes are alive and what each runs, why a task waits, why one failed (its traceback) and what
ran on a node between two times, from the dashboard alone.

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
from dbscheduler.table import make_nodes_table, make_runs_table
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
        # What ran around 10:00 UTC on 2 March: two runs of worker-old within 10:00–10:05.
        t10 = datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc)
        conn.execute(sa.insert(make_runs_table(table)), [
            {"task_name": task, "token": i + 1, "attempt": 1, "node_id": node_id,
             "scheduled_at": t10 + timedelta(minutes=m), "started_at": t10 + timedelta(minutes=m),
             "finished_at": t10 + timedelta(minutes=m, seconds=4), "status": status,
             "error": "ConnectionError: smtp refused" if status == "error" else None}
            for i, (m, task, node_id, status) in enumerate((
                (-3, "send-digest", "worker-old", "success"),
                (1, "send-digest", "worker-old", "error"),
                (2, "reports/daily", "worker-eu-1", "success"),
                (3, "cleanup", "worker-old", "success"),
                (7, "send-digest", "worker-old", "success")))])
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


@pytest.mark.slow
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
        # The last hour's runs per minute: import-orders' failure among them.
        assert page.locator("#throughput rect.bar-failed").count() == 1
        assert "1 failed" in page.locator("#throughput figcaption").inner_text()
        page.screenshot(path=SHOTS / "tasks-throughput.png")
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
        # "Run now" shows its run as the node writes it, the traceback with it.
        page.click('[data-action="trigger"]')
        page.click("#confirm-ok")
        page.wait_for_function(
            "() => document.querySelectorAll('#runs tbody tr details.traceback').length === 2",
            timeout=10_000)

        # What ran on node worker-old between 10:00 and 10:05 UTC (11:00–11:05 in Berlin)?
        page.click('nav.nav a:text-is("Runs")')
        page.wait_for_url("**/runs")
        page.fill('#run-filters input[name="node"]', "worker-old")
        page.fill('#run-filters input[name="since"]', "2026-03-02T11:00:00")
        page.fill('#run-filters input[name="until"]', "2026-03-02T11:05:00")
        page.click('#run-filters button[type="submit"]')
        page.wait_for_url("**/runs?node=worker-old&since=2026-03-02T10%3A00%3A00.000Z"
                          "&until=2026-03-02T10%3A05%3A00.000Z")
        shown = page.eval_on_selector_all(
            "table.runs tbody tr .task-link", "links => links.map(a => a.textContent)")
        assert shown == ["cleanup", "send-digest"]
        assert "2 runs on worker-old" in page.locator("#runs-summary").inner_text()
        # The form shows the times back in the browser's zone.
        assert page.input_value('#run-filters input[name="since"]').startswith("2026-03-02T11:00")
        wait_for_refresh(page)  # the live refresh keeps the filters
        assert page.locator("table.runs tbody tr").count() == 2
        page.screenshot(path=SHOTS / "runs-filtered.png", full_page=True)

        # A runtime task created and changed from the dashboard, without a deploy.
        page.goto(server.base)
        page.click("#new-task")
        page.wait_for_url("**/edit")
        page.fill("#f-name", "mail/customer-42")
        page.fill("#f-handler", "send-mail")
        page.fill("#f-schedule", "every hour")
        page.locator("#schedule-preview .field-error", has_text="unknown kind 'every'").wait_for()
        page.fill("#f-schedule", "fixed-rate 3600s")
        page.locator("#schedule-preview .preview-words", has_text="every hour").wait_for()
        assert page.locator("#schedule-preview li").count() == 5
        page.fill("#f-data", '{"customer": 42,')
        assert "Not JSON" in page.locator("#data-error").inner_text()
        page.fill("#f-data", '{"customer": 42}')
        assert page.locator("#data-error").is_hidden()
        page.screenshot(path=SHOTS / "task-new.png", full_page=True)
        page.click("#save")
        page.wait_for_url("**/tasks/mail%2Fcustomer-42")
        page.locator("#toast", has_text="Saved.").wait_for()
        created = node.info("mail/customer-42")
        assert (created.handler, created.schedule, created.data) == (
            "send-mail", "fixed-rate 3600s", {"customer": 42})
        page.click("#edit-task")
        page.wait_for_url("**/edit?name=mail%2Fcustomer-42")
        assert page.input_value("#f-schedule") == "fixed-rate 3600s"
        page.fill("#f-schedule", "cron 0 8 * * 1-5 Europe/Berlin")
        page.locator("#schedule-preview .preview-words",
                     has_text="08:00 Europe/Berlin").wait_for()
        page.fill("#f-handler", "send-mial")
        page.click("#save")
        page.wait_for_url("**/tasks/mail%2Fcustomer-42")
        page.locator("#toast", has_text="did you mean 'send-mail'?").wait_for()
        changed = node.info("mail/customer-42")
        assert (changed.handler, changed.schedule) == (
            "send-mial", "cron 0 8 * * 1-5 Europe/Berlin")
        assert created.total_attempt == changed.total_attempt
        page.screenshot(path=SHOTS / "task-edited.png")
        # The bad schedule typed on purpose was answered 422; nothing else may have failed.
        expected = ("/api/schedules/preview", "status of 422 (Unprocessable Entity)")
        watch.problems = [p for p in watch.problems if not any(e in p for e in expected)]

        # The interactive API docs, served by the app itself (no CDN, under its CSP).
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))
        page.goto(server.base + "api/docs")
        page.locator(".opblock-summary-path", has_text="/api/nodes").first.wait_for()
        assert page.locator(".opblock").count() >= 20
        page.screenshot(path=SHOTS / "api-docs.png")
        off_site = [u for u in requested if not u.startswith((server.base, "data:"))]
        assert off_site == []

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
        mobile.goto(server.base + "runs?node=worker-old")
        mobile.screenshot(path=SHOTS / "runs-phone.png", full_page=True)
        # Dark mode follows the browser.
        dark = browser.new_context(viewport={"width": 1280, "height": 800},
                                   color_scheme="dark", timezone_id="Europe/Berlin",
                                   locale="en-GB")
        night = watch.attach(dark.new_page())
        night.goto(server.base + "tasks/import-orders")
        night.locator("#runs details.traceback summary").first.click()
        background = night.evaluate("getComputedStyle(document.documentElement).backgroundColor")
        assert background == "rgb(15, 18, 23)", background
        night.screenshot(path=SHOTS / "task-dark.png", full_page=True)
        night.goto(server.base)
        night.screenshot(path=SHOTS / "tasks-dark.png")
        assert watch.problems == []
    finally:
        server.stop()
