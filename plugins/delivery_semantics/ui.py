"""The FastAPI app behind the Airflow UI page (mounted by plugins/semantics_ui_plugin.py)."""

from __future__ import annotations

import html
from typing import Annotated

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from delivery_semantics import report

app = FastAPI(title="Delivery semantics", docs_url=None, redoc_url=None, openapi_url=None)
AuthenticatedUser = Annotated[object, Depends(get_user)]

_STYLE = """<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:4px 8px}th{background:#f0f0f0}.kept{background:#d8f5d8}
.broken{background:#f8d0d0}.na{background:#eee}.no{color:#b00;font-weight:bold}"""
_STYLE += report.GRID_STYLE + "</style>"


def _cell(v) -> str:
    return html.escape("-" if v is None else str(v))


@app.get("/", response_class=HTMLResponse)
def matrix_page(user: AuthenticatedUser) -> str:
    rows = report.matrix_rows()
    body = "".join(
        f"<tr class='{ {'kept': 'kept', 'broken': 'broken'}.get(r['verdict'], 'na') }'>"
        f"<td>{_cell(r['mode'])}</td><td>{_cell(r['scenario'])}</td>"
        f"<td><a href='runs/{html.escape(r['run_id'])}'>{_cell(r['run_id'])}</a></td>"
        f"<td>{_cell(r['lost_acked'])}</td><td>{_cell(r['lost_unacked'])}</td><td>{_cell(r['duplicate_events'])}</td>"
        f"<td>{_cell(r['aborted_visible'])}</td><td>{_cell(r['torn_events'])}</td><td>{_cell(r['inconsistent_offsets'])}</td><td>{_cell(r['poll_skips'])}</td><td>{_cell(r['nonmonotonic_polls'])}</td><td>{_cell(r['stale_overwrites'])}</td><td>{_cell(r['verdict'])}{' (' + _cell(r['broken_by']) + ')' if r['broken_by'] else ''}</td>"
        f"<td>{_cell(r['expectation'])}</td>"
        f"<td class='{'' if r['meets_expectation'] is not False else 'no'}'>"
        f"{ {True: 'yes', False: 'NO', None: '-'}[r['meets_expectation']] }</td></tr>"
        for r in rows
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Delivery semantics</title>{_STYLE}</head><body>"
        f"<h1>Delivery-semantics matrix</h1><p>The latest reconciled run of every mode x scenario pair "
        f"({len(rows)} pairs): producer modes, then consumer strategies (checked on what they wrote). A verdict "
        f"judges the promise; <em>as expected</em> compares what was observed with DESIGN.md §3.</p>"
        f"{report.matrix_grid_html(rows, run_link='runs/{run_id}')}"
        "<h2>Runs</h2><div class='scroll'><table id='matrix'><tr><th>mode / strategy</th><th>scenario</th><th>run</th><th>lost acked</th>"
        "<th>lost unacked</th><th>duplicated events</th><th>aborted visible</th><th>torn events</th><th>inconsistent offsets</th><th>poll skips</th><th>nonmonotonic polls</th><th>stale overwrites</th><th>verdict</th><th>expected</th><th>as expected</th></tr>"
        f"{body}</table></div>{report.trends_html()}</body></html>"
    )


@app.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, user: AuthenticatedUser) -> str:
    rows = report.query("SELECT * FROM v_run_results WHERE run_id = %s", (run_id,))
    if not rows:
        raise HTTPException(status_code=404, detail=f"no reconciled run {run_id}")
    r = rows[0]
    facts = "".join(f"<tr><th>{html.escape(k)}</th><td>{_cell(v)}</td></tr>" for k, v in r.items())
    violations = report.query(
        """SELECT kind, event_id, copies, "partitions", "offsets" FROM reconcile_discrepancies
                                  WHERE reconciliation_id = %s AND isolation = %s ORDER BY kind, event_id LIMIT 200""",
        (run_id, r["isolation"]),
    )
    disc = "".join(
        f"<tr><td>{_cell(d['kind'])}</td><td>{_cell(d['event_id'])}</td><td>{_cell(d['copies'])}</td>"
        f"<td>{_cell(d['partitions'])}</td><td>{_cell(d['offsets'])}</td></tr>"
        for d in violations
    )
    png = report.timeline_png(report.run_timeline(run_id))
    timeline = f"<h2>Timeline</h2><img id='timeline' alt='timeline' src='data:image/png;base64,{png}'>" if png else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Run {html.escape(run_id)}</title>{_STYLE}"
        f"</head><body><p><a href='../'>&larr; matrix</a></p><h1>Run {html.escape(run_id)}</h1>{timeline}"
        f"<table>{facts}</table><h2>Discrepancies (first 200, {html.escape(r['isolation'])})</h2>"
        f"<table><tr><th>kind</th><th>event id</th><th>copies</th><th>partitions</th><th>offsets</th></tr>{disc}"
        "</table></body></html>"
    )
