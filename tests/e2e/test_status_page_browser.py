"""The status page end to end, in a real headless Chromium against a real `invmon run`: the
demo data's planted violations are shown with their exact counts and charts; the detail
page (its chart over a week, wide and on a phone) and the incident page follow; an
acknowledgement made through `invmon ack` appears without a reload; fixing the data turns
every row green on the next tick, scroll position kept; each page passes axe-core's
accessibility rules; screenshots are kept as artefacts.

Needs Playwright for Python (a dev dependency) and a Chromium on the machine: Debian's
`chromium` package, which .ci/run installs when it is missing (Playwright's own browser
download is not used: it needs a CDN this host may not reach). INVMON_CHROMIUM names
another binary. Skipped, saying why, only where neither can be found.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import process_config
from helpers import cli, listening_url, start_daemon, wait_for

from monitor.authoring.pgtemp import apply_sql

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed: pip install -e '.[dev]'"
)
axe_api = pytest.importorskip(
    "axe_playwright_python.sync_playwright",
    reason="axe-playwright-python is not installed: pip install -e '.[dev]'",
)

ROOT = Path(__file__).resolve().parents[2]
INVARIANTS = ROOT / "invariants"
DEMO = ROOT / "deploy" / "demo"
SHIPPED = {  # deploy/demo/planted.yaml: the four shipped invariants' planted counts
    "balance_ledger_drift": 3,
    "duplicate_settled_refunds": 2,
    "expired_lease_jobs": 2,
    "orphaned_receipts": 4,
}
# A file name no one should choose, and a row value that would run if it were not escaped.
HOSTILE = '<img src=x onerror="window.pwned=1"> & co'
HOSTILE_SQL = """\
-- description: Hostile <b>names</b> & "values" are shown as text; emails are masked.
-- severity: info
-- key: [refund_id]
-- schedule: every 1s
SELECT r.refund_id, a.email, '<img src=x onerror="window.pwned=2">' AS note
FROM refunds AS r
JOIN disputes AS d ON d.dispute_id = r.dispute_id
JOIN accounts AS a ON a.account_id = d.account_id
WHERE r.refund_id = 3005 AND r.status = 'settled'
"""
# Repairs every planted violation (deploy/demo/seed.sql says what each one is).
FIX = """
UPDATE refunds SET status = 'failed', settled_at = NULL WHERE refund_id IN (3005, 3009, 3010);
UPDATE accounts AS a SET credit_balance_eur =
    coalesce((SELECT sum(l.amount_eur) FROM credit_log AS l WHERE l.account_id = a.account_id), 0);
UPDATE jobs SET state = 'done' WHERE state = 'in_progress';
DELETE FROM receipt_objects;
UPDATE invoices SET receipt_key = NULL, receipt_uploaded_at = NULL;
"""


@pytest.fixture
def chromium() -> str:
    """The browser's path, looked for before anything else is set up."""
    for candidate in (os.environ.get("INVMON_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(candidate) if candidate else None
        if found:
            return found
    pytest.skip(
        "no Chromium here: install Debian's chromium (apt-get install -y chromium; .ci/run "
        "does) or set INVMON_CHROMIUM to a Chromium binary"
    )


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("INVMON_ARTEFACTS") or tmp_path) / "status-page"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"status page screenshots: {folder}")
    return folder


@pytest.fixture
def daemon(database: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`invmon run` on the demo data, the shipped invariants every second; (url, config)."""
    apply_sql(database, (DEMO / "schema.sql").read_text())
    apply_sql(database, (DEMO / "seed.sql").read_text())
    folder = tmp_path / "invariants"
    folder.mkdir()
    for name in SHIPPED:
        text = (INVARIANTS / f"{name}.sql").read_text()
        text, replaced = re.subn(r"(?m)^-- schedule: .*$", "-- schedule: every 1s", text)
        assert replaced == 1
        (folder / f"{name}.sql").write_text(text)
    (folder / f"{HOSTILE}.sql").write_text(HOSTILE_SQL)
    config = process_config(
        tmp_path,
        folder,
        http={"listen": "127.0.0.1:0", "page_refresh": "1s"},
        log={"format": "json"},
        daemon={"shutdown_grace": "5s"},
    )
    log = tmp_path / "daemon.log"
    process = start_daemon(config, log, database)
    try:
        yield listening_url(log), config
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def assert_accessible(page: Any, what: str) -> None:
    results = axe_api.Axe().run(page)
    assert results.violations_count == 0, f"{what}:\n{results.generate_report()}"


PHONE = 390  # px: a phone held upright


def on_a_phone(page: Any, screenshot: Path) -> None:
    """The page at a phone's width: nothing wider than the screen (the tables scroll in
    their own regions), a screenshot kept, and back to the desktop width."""
    page.set_viewport_size({"width": PHONE, "height": 844})
    width = page.evaluate("document.documentElement.scrollWidth")
    page.screenshot(path=screenshot, full_page=True)
    assert width <= PHONE, f"{screenshot.name}: the page is {width}px wide on a {PHONE}px screen"
    page.set_viewport_size({"width": 1400, "height": 900})


def test_the_status_page_shows_violations_acks_and_the_fix_in_a_real_browser(
    chromium: str, daemon: tuple[str, Path], database: str, artefacts: Path
) -> None:
    url, config = daemon
    expect = playwright_api.expect
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/")
            # The page refreshes itself every second: no reload from here on.
            for name, count in {**SHIPPED, HOSTILE: 1}.items():
                row = page.locator("#invariants tbody tr").filter(
                    has=page.get_by_role("link", name=name, exact=True)
                )
                expect(row.locator("td").first).to_have_text("✖ Violated", timeout=20_000)
                expect(row.locator("td.count")).to_have_text(str(count))
            spark = page.locator('tr[data-name="duplicate_settled_refunds"] svg.spark')
            expect(spark).to_have_attribute(
                "aria-label",
                re.compile(r"over the last ([3-9]|\d\d) runs: 2 at first, 2 now"),
                timeout=20_000,
            )
            assert page.evaluate("window.pwned") is None
            assert_accessible(page, "the overview")
            page.screenshot(path=artefacts / "1-overview-violated.png", full_page=True)
            on_a_phone(page, artefacts / "1-overview-phone.png")

            page.get_by_role("link", name="duplicate_settled_refunds", exact=True).click()
            expect(page.locator("h1")).to_have_text("duplicate_settled_refunds")
            expect(page.locator("table.sample tbody tr")).to_have_count(2)
            expect(page.locator(".count-line .count")).to_have_text("2")
            expect(page.locator("pre.sql .sql-kw").first).to_have_text("SELECT")
            incident_link = page.locator('dd a[href^="/incidents/"]')
            expect(incident_link).to_have_count(1, timeout=10_000)
            href = incident_link.get_attribute("href")
            assert href is not None
            incident_id = href.rsplit("/", 1)[1]
            assert_accessible(page, "an invariant's page")
            page.screenshot(path=artefacts / "2-invariant.png", full_page=True)
            on_a_phone(page, artefacts / "2-invariant-phone.png")

            # The chart over a week: placed by time, a date under each midnight, its scale.
            page.get_by_role("link", name="7 days", exact=True).click()
            expect(page.locator("#history-h")).to_have_text("Offending rows over the last 7 days")
            wide = page.locator("svg.chart-wide")
            expect(wide).to_be_visible()
            expect(wide).to_have_attribute(
                "aria-label", re.compile(r"over the last 7 days: \d+ runs, 2 at first, 2 now")
            )
            expect(wide.locator("text.chart-text")).to_have_count(9)  # 2, 0 and 7 dates
            # Every run of the test is seconds old: one slice of the week, one point, at its end.
            expect(wide.locator("circle.mark-violated")).to_have_count(1)
            expect(page.locator("svg.chart-narrow")).to_be_hidden()
            assert_accessible(page, "an invariant's page, the chart over 7 days")
            page.screenshot(path=artefacts / "2-invariant-chart-7d.png", full_page=True)
            page.set_viewport_size({"width": PHONE, "height": 844})
            expect(page.locator("svg.chart-narrow")).to_be_visible()
            expect(wide).to_be_hidden()
            # The page swaps its live region every second; paused, nothing moves under the
            # scroll (a swap between finding the heading and scrolling to it detached it).
            pause = page.get_by_role("button", name="Pause updates")
            pause.click()
            expect(page.get_by_role("button", name="Resume updates")).to_have_attribute(
                "aria-pressed", "true"
            )
            page.evaluate("document.getElementById('live').dataset.kept = 'yes'")
            page.locator("#history-h").scroll_into_view_if_needed()
            on_a_phone(page, artefacts / "2-invariant-chart-7d-phone.png")
            # Still the same region: no answer in flight when the button was pressed swapped it.
            assert page.evaluate("document.getElementById('live').dataset.kept") == "yes"
            page.get_by_role("button", name="Resume updates").click()

            acked = cli("ack", incident_id, "--config", str(config))
            assert acked.returncode == 0, acked.stdout + acked.stderr
            user = getpass.getuser()
            expect(page.locator("dl.facts")).to_contain_text(
                f"Acknowledged by {user} (command line), until resolved", timeout=15_000
            )

            page.locator('dd a[href^="/incidents/"]').click()
            expect(page.locator("h1")).to_have_text(
                f"Incident #{incident_id}: Violation of duplicate_settled_refunds"
            )
            timeline = page.locator("ol.timeline")
            expect(timeline).to_contain_text("Opened (2 offending rows in total): [2003], [2005]")
            expect(timeline).to_contain_text(
                f"Acknowledged by {user} (command line), until resolved"
            )
            assert_accessible(page, "an incident's page")
            page.screenshot(path=artefacts / "3-incident-acknowledged.png", full_page=True)
            on_a_phone(page, artefacts / "3-incident-phone.png")

            page.get_by_role("link", name="invmon status").click()
            page.get_by_role("link", name=HOSTILE, exact=True).click()
            expect(page.locator("h1")).to_have_text(HOSTILE)
            sample = page.locator("table.sample tbody")
            expect(sample).to_contain_text('<img src=x onerror="window.pwned=2">')
            expect(sample).to_contain_text("[masked:")
            expect(sample).not_to_contain_text("@example")
            assert page.evaluate("window.pwned") is None

            page.set_viewport_size({"width": 1400, "height": 420})
            page.goto(f"{url}/")
            # invmon's own checks (invmon-self/…) may be listed too once the watchdog ran.
            planted = page.locator('#invariants tbody tr:not([data-name^="invmon-self/"])')
            expect(planted).to_have_count(5)
            page.evaluate("window.scrollTo(0, 120)")
            wait_for(lambda: page.evaluate("window.scrollY") == 120, 5, "the scroll")
            apply_sql(database, FIX)
            for name in {**SHIPPED, HOSTILE: 1}:
                row = page.locator("#invariants tbody tr").filter(
                    has=page.get_by_role("link", name=name, exact=True)
                )
                expect(row.locator("td").first).to_have_text("✔ Holds", timeout=20_000)
                expect(row.locator("td.count")).to_have_text("0")
            assert page.evaluate("window.scrollY") == 120  # the refresh kept the position
            assert_accessible(page, "the overview, all green")
            page.set_viewport_size({"width": 1400, "height": 900})
            page.screenshot(path=artefacts / "4-overview-fixed.png", full_page=True)
        finally:
            browser.close()
    assert sorted(p.name for p in artefacts.iterdir()) == [
        "1-overview-phone.png",
        "1-overview-violated.png",
        "2-invariant-chart-7d-phone.png",
        "2-invariant-chart-7d.png",
        "2-invariant-phone.png",
        "2-invariant.png",
        "3-incident-acknowledged.png",
        "3-incident-phone.png",
        "4-overview-fixed.png",
    ]
