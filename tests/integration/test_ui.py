"""The results page in the Airflow UI: the real api-server, Debian's Chromium driven by
Playwright, a refused request without Airflow auth, and the README's screenshots, kept in
artifacts/screenshots/ (`make screenshots` copies them into docs/screenshots/)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from conftest import ARTIFACTS, REPO

import devstack
from delivery_semantics.entry import spark_submit
from delivery_semantics.reporting import report
from delivery_semantics.workload import load

PORT = 18080
BASE = f"http://127.0.0.1:{PORT}"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def api_server(stack_env):
    if not report.matrix_rows():
        s = load.start(load.LoadSpec(mode="idempotent", messages=500))
        assert spark_submit.run(run_id=s.run_id).returncode == 0
    SHOTS.mkdir(parents=True, exist_ok=True)
    with open(ARTIFACTS / "airflow-api-server.log", "w") as log:
        yield from _serve(log)


def _serve(log):
    proc = subprocess.Popen(
        [str(REPO / ".venv" / "bin" / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(PORT)],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **devstack.environment()},
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{BASE}/api/v2/version", timeout=2)
            break
        except (urllib.error.URLError, ConnectionError):
            assert proc.poll() is None, (ARTIFACTS / "airflow-api-server.log").read_text()[-3000:]
            time.sleep(1)
    else:
        raise AssertionError("the api-server did not start within 180 s")
    yield BASE
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


# `make screenshots` copies these into docs/screenshots/ for the README.
SHOTS = ARTIFACTS / "screenshots"


def _fault_run_with_loss() -> str:
    """The run whose timeline the README shows: acked events lost under a fault if the matrix
    has one, else its first run with a timeline."""
    rows = [r for r in report.matrix_rows() if r["scenario"] != "none" and report.run_timeline(r["run_id"])]
    rows.sort(key=lambda r: (r["lost_acked"] == 0, r["scenario"] != "partitioned_leader"))
    return (rows or report.matrix_rows())[0]["run_id"]


def _token() -> str:
    password = devstack.secret("AIRFLOW_ADMIN_PASSWORD")
    req = urllib.request.Request(
        f"{BASE}/auth/token",
        method="POST",
        data=json.dumps({"username": "admin", "password": password}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["access_token"]


def test_the_page_is_refused_without_airflow_auth(api_server):
    for path in ("/semantics/", "/semantics/runs/anything", "/semantics/audits/anything"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{BASE}{path}", timeout=10)
        assert e.value.code == 401, path
    forged = urllib.request.Request(f"{BASE}/semantics/", headers={"Authorization": "Bearer not-a-jwt"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(forged, timeout=10)
    assert e.value.code in (401, 403)


def test_the_api_server_listens_on_loopback_only(api_server):
    out = subprocess.run(["ss", "-Hltn", f"sport = :{PORT}"], capture_output=True, text=True, check=True).stdout
    addresses = [line.split()[3] for line in out.splitlines()]
    assert addresses and all(a.startswith(("127.", "[::ffff:127.")) for a in addresses), addresses


def test_the_plugin_registers_its_view_in_the_nav(api_server):
    req = urllib.request.Request(f"{BASE}/api/v2/plugins", headers={"Authorization": f"Bearer {_token()}"})
    plugins = json.loads(urllib.request.urlopen(req, timeout=10).read())["plugins"]
    ours = [p for p in plugins if p["name"] == "delivery_semantics"]
    assert ours and ours[0]["external_views"][0]["href"] == "/semantics/"
    assert ours[0]["fastapi_apps"][0]["url_prefix"] == "/semantics"


def _get(path: str, token: str) -> str:
    req = urllib.request.Request(f"{BASE}{path}", headers={"Authorization": f"Bearer {token}"})
    return urllib.request.urlopen(req, timeout=30).read().decode()


def test_each_audits_latest_check_links_to_the_events_behind_it(api_server):
    """The page's Audits section, and an audit's page listing its open discrepancies' event ids
    with their stage, kind and the window that raised them; the HTML report holds the same list.
    The audit tests before this one leave a continuous audit with open losses."""
    import html

    token = _token()
    latest = report.audits_view()
    with_events = [(a, report.audit_discrepancies(a["audit"])[1]) for a in latest]
    with_events = [(a, events) for a, events in with_events if events]
    assert with_events, "no audit with discrepancies: run the audit tests first"
    page = _get("/semantics/", token)
    assert "<h2 id='audits'>Audits</h2>" in page
    for a in latest:
        assert f"href='audits/{a['audit']}'" in page, a["audit"]

    def held_still(audit: str, render) -> tuple[list[dict], str] | None:
        """What `render` made beside the audit's events, when they held still while it ran: audit
        tests run beside this one and may judge a new window of the same audit meanwhile."""
        for _attempt in range(3):
            before = report.audit_discrepancies(audit)[1]
            made = render()
            if report.audit_discrepancies(audit)[1] == before:
                return before, made
        return None

    checked = []
    for a, _ in with_events:
        found = held_still(a["audit"], lambda a=a: _get(f"/semantics/audits/{a['audit']}", token))
        if found is None:
            continue
        events, listed = found
        for d in events:
            assert f"<td>{html.escape(d['event_id'])}</td>" in listed, (a["audit"], d)
        checked.append(a["audit"])
    assert checked, "every audit with discrepancies changed while its page was read, three times"
    with pytest.raises(urllib.error.HTTPError) as e:
        _get("/semantics/audits/no_such_audit", token)
    assert e.value.code == 404
    path = ARTIFACTS / "report-audits.html"
    found = held_still(checked[0], lambda: report.html_report(report.matrix_rows(), path).read_text())
    assert found, f"{checked[0]} changed while the report was written, three times"
    events, reported = found
    # The report is for whoever runs it: each audit's verdict, and a link to its own page, never its
    # event ids (those only the audit's DAG's readers see there).
    assert f"href='/semantics/audits/{checked[0]}'" in reported
    assert not [d["event_id"] for d in events if len(d["event_id"]) >= 8 and html.escape(d["event_id"]) in reported]


def test_headless_chromium_shows_the_matrix_and_keeps_a_screenshot(api_server):
    from playwright.sync_api import sync_playwright

    token = _token()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        try:
            anonymous = browser.new_page()
            resp = anonymous.goto(f"{BASE}/semantics/")
            assert resp.status == 401 and "Not authenticated" in anonymous.content()

            ctx = browser.new_context(viewport={"width": 1500, "height": 900})
            ctx.add_cookies([{"name": "_token", "value": token, "url": BASE}])
            page = ctx.new_page()
            resp = page.goto(f"{BASE}/semantics/")
            assert resp.status == 200
            rows = page.locator("#matrix tr")
            assert rows.count() >= 2, "a header and at least one mode x scenario row"
            cells = page.locator(".grid td[title]")
            assert cells.count() >= 1 and "expected:" in cells.first.get_attribute("title")
            assert cells.first.get_attribute("class").split()[0] in ("clean", "duplicates", "loss", "both")
            assert page.locator("h1").inner_text() == "Delivery-semantics matrix"
            assert page.locator("h2", has_text="Trends").count() == 1
            assert page.locator("img[alt='trends: runs']").count() == 1, "reconciled runs make a trend plot"
            first_run = page.locator("#matrix a").first
            run_id = first_run.inner_text()
            page.screenshot(path=str(SHOTS / "ui-matrix.png"), full_page=True)
            first_run.click()
            page.wait_for_load_state()
            assert run_id in page.locator("h1").inner_text()
            page.screenshot(path=str(ARTIFACTS / "ui-run.png"), full_page=True)

            # The README's pictures: a fault run's timeline on its page, and the report's grid.
            faulty = _fault_run_with_loss()
            page.goto(f"{BASE}/semantics/runs/{faulty}")
            page.locator("#timeline").screenshot(path=str(SHOTS / "timeline.png"))
            path = report.html_report(report.matrix_rows(), ARTIFACTS / "report.html")
            page.goto(path.as_uri())
            assert page.locator("h1").inner_text() == "Delivery-semantics matrix"
            page.locator(".grid").screenshot(path=str(SHOTS / "report-grid.png"))

            # The same page inside the Airflow UI, through the plugin's nav entry.
            # Airflow's React app mounts the view's iframe once it has loaded: seconds on a busy machine.
            page.goto(f"{BASE}/plugin/delivery-semantics")
            embedded = lambda: any(f.url.rstrip("/").endswith("/semantics") for f in page.frames)
            deadline = time.monotonic() + 60
            while not embedded() and time.monotonic() < deadline:
                page.wait_for_timeout(500)
            page.screenshot(path=str(ARTIFACTS / "ui-airflow-embedded.png"), full_page=True)
            assert embedded(), [f.url for f in page.frames]
        finally:
            browser.close()
