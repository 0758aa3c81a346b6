"""The matrix as a person reads it: each cell coloured by what its run showed, the verdict as a
mark, the expectation as a tooltip, a surprise outlined. No database: rows are made here."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta

from delivery_semantics import catalog
from delivery_semantics.reporting.report import OBSERVED_COLOURS, matrix_grid_html, observed, trend_series, trends_png


def row(mode, scenario, lost=0, dup=0, verdict="kept", meets=True, expectation="lost = 0", client="librdkafka"):
    return {
        "mode": mode,
        "client": client,
        "settings": {},
        "broken_settings": None,
        "scenario": scenario,
        "run_id": f"r-{mode}-{scenario}",
        "lost_acked": 0,
        "lost_unacked": lost,
        "duplicate_events": dup,
        "verdict": verdict,
        "broken_by": "duplicate" if verdict == "broken" else None,
        "expectation": expectation,
        "meets_expectation": meets,
    }


def test_one_modes_clients_sit_side_by_side_and_a_verdict_names_its_settings():
    from delivery_semantics.reporting.report import grid_view, matrix_text

    rows = [
        row("idempotent", "lost_ack", client="java"),
        row("at_least_once", "none"),
        row("idempotent", "lost_ack"),
        {
            **row("team", "isolated_leader", verdict="broken", client="java"),
            "broken_by": "lost_acked",
            "broken_settings": "acks=1",
        },
    ]
    assert [label for label, _ in grid_view(rows)["rows"]] == [
        "at_least_once",
        "idempotent",
        "idempotent (java)",
        "team (java)",
    ]
    text = matrix_text(
        [
            {
                **dict.fromkeys(
                    (
                        "lost_acked",
                        "aborted_visible",
                        "torn_events",
                        "inconsistent_offsets",
                        "poll_skips",
                        "nonmonotonic_polls",
                        "stale_overwrites",
                    ),
                    0,
                ),
                **r,
            }
            for r in rows
        ]
    )
    assert "broken (lost_acked) by acks=1" in text


def test_each_run_is_clean_duplicated_lost_or_both():
    assert [observed(row("m", "s", lost, dup)) for lost, dup in ((0, 0), (0, 3), (2, 0), (2, 3))] == [
        "clean",
        "duplicates",
        "loss",
        "both",
    ]


def test_the_grid_colours_by_observation_marks_the_verdict_and_explains_in_a_tooltip():
    rows = [
        row("at_most_once", "leader_kill", lost=439, expectation="lost > 0, duplicate_events = 0"),
        row("at_least_once", "lost_ack", dup=110),
        row("idempotent", "none"),
        row("idempotent", "lost_ack", dup=4, verdict="broken", meets=False, expectation="duplicate_events = 0"),
    ]
    page = matrix_grid_html(rows, run_link="runs/{run_id}")
    cells = re.findall(r"<td class='([a-z ]+)' style='background:(#\w+)' title='([^']*)'>(.*?)</td>", page)
    by_class = {c.split()[0]: (colour, tip, body, c) for c, colour, tip, body in cells}
    assert len(cells) == 4
    assert by_class["loss"][0] == OBSERVED_COLOURS["loss"] and "lost 439" in by_class["loss"][2]
    assert "expected: lost &gt; 0, duplicate_events = 0; observed: loss; verdict: kept" in by_class["loss"][1]
    assert "\u2713 kept" in by_class["clean"][2] and "href='runs/r-idempotent-none'" in by_class["clean"][2]
    broken = next(c for c in cells if "\u2717 broken" in c[3])
    assert broken[0] == "duplicates unexpected", "a run that did not show what was expected is outlined"
    # Modes in the catalog's order down, scenarios across, an empty cell where no run was made.
    assert page.index(">at_most_once<") < page.index(">at_least_once<") < page.index(">idempotent<")
    assert page.count("<td></td>") == 3 * 3 - 4


def test_trends_group_points_by_subject_and_series_in_time_order():
    t0 = datetime(2026, 11, 1, tzinfo=UTC)

    def p(subject, series, day, loss, dup=0.0):
        return {
            "subject": subject,
            "series": series,
            "at": t0 + timedelta(days=day),
            "loss_rate": loss,
            "duplicate_rate": dup,
        }

    points = [
        p("orders", "window", 2, 0.0),
        p("transactional", "none", 1, 0.0),
        p("at_most_once", "leader_kill", 3, 0.08),
        p("at_most_once", "leader_kill", 1, 0.05),
        p("at_most_once", "none", 2, 0.0),
        p("orders", "batch", 1, 0.01, 0.02),
    ]
    series = trend_series(points)
    assert list(series) == ["at_most_once", "transactional", "orders"], "the catalog's order, then audits"
    assert list(series["at_most_once"]) == ["none", "leader_kill"], "the scenarios' order"
    assert [loss for _, loss, _ in series["at_most_once"]["leader_kill"]] == [0.05, 0.08], "oldest first"
    assert series["orders"]["batch"] == [(t0 + timedelta(days=1), 0.01, 0.02)]
    png = base64.b64decode(trends_png(points))
    assert png.startswith(b"\x89PNG")
    assert trends_png([]) is None


def test_the_report_and_the_ui_page_render_one_template_and_escape_what_they_show():
    from delivery_semantics.reporting.report import MATRIX_COLUMNS, grid_view, render

    bad = {
        **row("idempotent", "none"),
        "run_id": "<script>alert(1)</script>",
        **dict.fromkeys(("aborted_visible", "torn_events", "inconsistent_offsets", "poll_skips"), 0),
        **dict.fromkeys(("nonmonotonic_polls", "stale_overwrites", "messages", "records_per_sec"), 0),
    }
    page = render(
        "matrix.html",
        title="T <b>",
        intro="i",
        rows=[bad],
        grid=grid_view([bad], run_link="runs/{run_id}"),
        columns=MATRIX_COLUMNS,
        run_link="runs/{run_id}",
        images=[],
        timelines=[],
        trends={"days": 30, "plots": [("Runs", "runs", None)]},
    )
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<title>T &lt;b&gt;</title>" in page and "<h2>Trends</h2>" in page and "None yet." in page
    assert "href='runs/&lt;script&gt;" in page, "the run link in the grid and the table, escaped"
    assert page.count("<tr class='kept'>") == 1 and ".grid td{" in page, "one row; the page's style inlined"


def test_the_audits_section_lists_each_audits_latest_check_and_the_events_behind_it():
    from datetime import UTC, datetime

    from delivery_semantics.reporting.report import render

    t = datetime(2026, 11, 23, 14, 0, tzinfo=UTC)
    stream = {
        "audit": "orders_stream",
        "at": t,
        "windowed": True,
        "verdict": "broken",
        "broken_by": "lost_acked",
        "sink_verdict": "kept",
        "sink_broken_by": None,
        "open_discrepancies": 2,
        "pending_outbox": 1,
        "pending_records": 0,
        "outbox_due": 13,
        "delivered": 12,
    }
    events = [
        {
            "window_end": t,
            "stage": "outbox_topic",
            "kind": "lost_acked",
            "event_id": "<b>z</b>",
            "copies": 0,
            "partitions": [],
            "offsets": [],
            "occurred_at": t,
        }
    ]
    empty = {"title": "T", "intro": "i", "rows": [], "images": [], "timelines": [], "trends": {"days": 30, "plots": []}}
    page = render("matrix.html", **empty, audits=[(stream, events)], audit_link="#audit-{audit}")
    assert "<h2 id='audits'>Audits</h2>" in page and "href='#audit-orders_stream'" in page
    assert "broken (lost_acked)" in page and "<td>1 / 0</td>" in page
    assert "&lt;b&gt;z&lt;/b&gt;" in page and "<b>z</b>" not in page, "event ids escaped"
    ui = render("matrix.html", **empty, audits=[(stream, None)], audit_link="audits/{audit}")
    assert "href='audits/orders_stream'" in ui and "lost_acked</td>" not in ui, "the UI page links to the list"
    assert "No audit has run yet." in render("matrix.html", **empty, audits=[])


def test_the_proofs_table_shows_each_finding_red_when_its_run_did_not_confirm_it():
    from delivery_semantics.reporting.report import render

    def proof(rule, observed, confirmed, run_id="r1", why=""):
        return {
            "subject": "at_least_once_all",
            "client": "librdkafka",
            "given_text": "topic.min.insync.replicas=1",
            "rule": rule,
            "settings_text": "producer.acks=all",
            "predicted": "lost_acked",
            "isolation": "read_uncommitted",
            "scenario": "shrunk_isr_leader_kill" if run_id else None,
            "run_id": run_id,
            "reused": False,
            "observed": observed,
            "confirmed": confirmed,
            "why": why,
        }

    empty = {"title": "T", "intro": "i", "rows": [], "images": [], "timelines": [], "trends": {"days": 30, "plots": []}}
    proofs = [
        proof("min_insync_one", 1575, True),
        proof("<i>x</i>", 0, False, run_id="r2"),
        proof("auto_offset_reset_latest", None, None, run_id=None, why="no consumer strategy"),
    ]
    page = render("matrix.html", **empty, proofs=proofs, run_link="runs/{run_id}")
    table = page[page.index("<table id='proofs'>") :]
    assert re.findall(r"<tr class='(\w+)'>", table) == ["kept", "broken", "na"]
    assert "NO: r2 should have shown lost_acked" in table and "href='runs/r2'" in table
    assert "not put to a run: no consumer strategy" in table
    assert "&lt;i&gt;x&lt;/i&gt;" in table and "<i>x</i>" not in table, "escaped"
    assert "<table id='proofs'>" not in render("matrix.html", **empty, proofs=[]), "no proof, no table"


def test_the_matrix_shows_each_matrix_kind_of_the_catalog_once_and_dashes_what_was_not_checked():
    from delivery_semantics.reporting.report import matrix_text

    counts = dict.fromkeys(catalog.summary_columns(in_matrix=True), 0)
    consumer = {**row("process_then_commit", "consumer_crash", 0, 500), **counts, "duplicate_events": 500}
    consumer |= {"torn_events": None, "inconsistent_offsets": None, "poll_skips": 2, "nonmonotonic_polls": 1}
    header, _, line = matrix_text([consumer]).splitlines()
    kinds = [k.column for k in catalog.KINDS.values() if k.column]
    assert re.split(r"\s{2,}", header)[2:10] == list(dict.fromkeys(kinds))
    cells = re.split(r"\s{2,}", line)
    assert cells[:2] == ["process_then_commit", "consumer_crash"]
    # dup events, lost acked, lost unacked, aborted vis, torn, incons. offs, poll skip/back, stale
    assert cells[2:10] == ["500", "0", "0", "0", "-", "-", "2/1", "0"]
