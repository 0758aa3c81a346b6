"""The FastAPI app behind the Airflow UI page (mounted by delivery_semantics.entry.airflow_plugin).

Every route needs an Airflow login (`get_user`). Verdicts and counts are for every viewer; an
audit's event ids (a team's own records) only for a user whom Airflow's auth manager lets read the
audit's DAG (docs/SECURITY.md): the page says they are hidden otherwise."""

from __future__ import annotations

from typing import Annotated

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from delivery_semantics.catalog import PLATFORM_AUDIT_PREFIX
from delivery_semantics.reporting import report

app = FastAPI(title="Delivery semantics", docs_url=None, redoc_url=None, openapi_url=None)
AuthenticatedUser = Annotated[object, Depends(get_user)]


@app.get("/", response_class=HTMLResponse)
def matrix_page(user: AuthenticatedUser) -> str:
    rows = report.matrix_rows()
    return report.render(
        "matrix.html",
        title="Delivery-semantics matrix",
        intro=f"The latest reconciled run of every mode x scenario pair ({len(rows)} pairs): producer modes, then "
        "consumer strategies (checked on what they wrote). A verdict judges the promise; as expected compares what "
        "was observed with DESIGN.md §3.",
        rows=rows,
        grid=report.grid_view(rows, run_link="runs/{run_id}"),
        columns=report.MATRIX_COLUMNS,
        run_link="runs/{run_id}",
        images=[],
        timelines=[],
        trends=report.trends_view(),
        audits=[(a, None) for a in report.audits_view()],
        audit_link="audits/{audit}",
        pipelines=report.pipeline_rows(),
        pipeline_columns=report.PIPELINE_COLUMNS,
        pipeline_timelines=[],
        proofs=report.proof_rows(),
    )


def audit_dag_id(audit: str) -> str:
    """The DAG an audit's results belong to: its file's (audit_<name>), or for the audit a
    connector pipeline's run makes (pipeline_<run>), the matrix's."""
    return "semantics_matrix" if audit.startswith(PLATFORM_AUDIT_PREFIX) else f"audit_{audit}"


def may_read_dag(user, dag_id: str) -> bool:
    """Whether Airflow's auth manager lets `user` read the runs of `dag_id`."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    return get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, details=DagDetails(id=dag_id), user=user
    )


@app.get("/audits/{audit}", response_class=HTMLResponse)
def audit_page(audit: str, user: AuthenticatedUser) -> str:
    latest, events = report.audit_discrepancies(audit)
    if latest is None:
        raise HTTPException(status_code=404, detail=f"no audit {audit} has run")
    dag_id = audit_dag_id(audit)
    hidden = None if may_read_dag(user, dag_id) else dag_id
    return report.render(
        "audit.html",
        title=f"Audit {audit}",
        a=latest,
        events=[] if hidden else events,
        hidden=hidden,
        suspect=report.mapping_line(audit, latest),
        limit=report.MAX_LISTED,
    )


@app.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, user: AuthenticatedUser) -> str:
    rows = report.query("SELECT * FROM v_run_results WHERE run_id = %s", (run_id,))
    if not rows:
        raise HTTPException(status_code=404, detail=f"no reconciled run {run_id}")
    r = rows[0]
    discrepancies = report.query(
        """SELECT kind, event_id, copies, "partitions", "offsets" FROM reconcile_discrepancies
           WHERE reconciliation_id = %s AND isolation = %s ORDER BY kind, event_id LIMIT 200""",
        (run_id, r["isolation"]),
    )
    return report.render(
        "run.html",
        title=f"Run {run_id}",
        run=r,
        timeline=report.timeline_png(report.run_timeline(run_id)),
        discrepancies=discrepancies,
    )
