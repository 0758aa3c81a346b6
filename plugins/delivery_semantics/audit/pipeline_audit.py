"""The audit a connector pipeline's run makes for itself (workload/connector_pipeline.py): its
outbox, topic and sink checked three ways in windows (mid-load, and once everything is due), and
the run's totals and verdict from what those windows recorded.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import psycopg2.extras

from delivery_semantics import catalog
from delivery_semantics.audit.audits import pipelines_dir
from delivery_semantics.catalog import Pipeline
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.workload.connector_pipeline import Names, PipelineError

# The audit's grace: a row is due this long after it was written. The last window ends two graces
# after the load (end-to-end checks wait twice the grace), by when the pipeline has drained.
GRACE_SECONDS = 10


def audit_spec(pipeline: Pipeline, scenario: str, names: Names) -> dict:
    return {
        "description": f"{pipeline.name} under {scenario}: run {names.run_id}",
        "topic": names.topic,
        "pipeline": pipeline.name,
        "transactional": pipeline.transactional,
        "connections": {
            "kafka": catalog.PIPELINE_CONNECTIONS["kafka"],
            "outbox": catalog.PIPELINE_CONNECTIONS["outbox"],
            "sink": catalog.PIPELINE_CONNECTIONS["sink"],
        },
        "record": {"event_id": {"header": "id"}, "key": {"record_key": True}},
        "outbox": {
            "table": f"public.{names.outbox}",
            "columns": {"event_id": "id", "key": "aggregateid", "publish_at": "created_at"},
        },
        "window": {"grace": f"{GRACE_SECONDS}s"},
        "sink": {"table": f"public.{names.sink}", "columns": {"event_id": "event_id", "applied_at": "applied_at"}},
    }


def write_audit(pipeline: Pipeline, scenario: str, names: Names) -> Path:
    path = pipelines_dir() / f"{names.audit}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Made by the pipeline run {names.run_id}: its outbox, topic and sink, audited in windows.\n"
        + json.dumps(audit_spec(pipeline, scenario, names), indent=2)
        + "\n"
    )
    return path


def window_ends(load_started: datetime, load_ended: datetime) -> list[datetime]:
    """Mid-load, and two graces after the load (everything due, end to end too); one window when
    the load was too short to split."""
    last = (load_ended + timedelta(seconds=2 * GRACE_SECONDS + 1)).replace(microsecond=0)
    mid = (load_started + (load_ended - load_started) / 2).replace(microsecond=0)
    return [mid, last] if load_started < mid < last - timedelta(seconds=GRACE_SECONDS) else [last]


def totals(ledger: Ledger, pipeline: Pipeline, defined: catalog.Definition, audit: str) -> dict:
    """The run's counts over its windows (a loss a later window found late is no loss), judged by
    the definition the run recorded when it was made, and its sink as PIPELINE_SINK_STRATEGY."""
    with ledger.conn, ledger.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(
            """SELECT count(*) AS windows, coalesce(sum(records_read), 0) AS records_read,
                      coalesce(sum(duplicate_events), 0) AS duplicate_events,
                      -- each stage's losses net of the late copies that resolved them
                      greatest(0, coalesce(sum(lost_acked), 0) - coalesce(sum(late), 0)) AS lost_acked,
                      coalesce(sum(late), 0) AS late,
                      coalesce(sum(sink_rows), 0) AS sink_rows, coalesce(sum(sink_duplicates), 0) AS sink_duplicates,
                      greatest(0, coalesce(sum(sink_lost), 0) - coalesce(sum(sink_late), 0)) AS sink_lost,
                      greatest(0, coalesce(sum(end_to_end_lost), 0) - coalesce(sum(end_to_end_late), 0))
                        AS end_to_end_lost,
                      -- a window counts the copies it read: the extra copies are over all windows
                      (SELECT coalesce(sum(copies), 0) - count(DISTINCT event_id) FROM audit_sightings
                        WHERE audit = %(a)s AND side = 'topic') AS duplicate_copies,
                      (SELECT coalesce(sum(end_offset - start_offset), 0) FROM audit_window_offsets
                        WHERE audit = %(a)s) AS offsets
               FROM audit_windows WHERE audit = %(a)s""",
            {"a": audit},
        )
        r = cur.fetchone()
    if not r["windows"]:
        raise PipelineError(f"audit {audit} recorded no window")
    judged = catalog.Counts.from_window(r)
    counts = {
        "records_read": r["records_read"],
        "duplicate_events": judged.of("duplicate"),
        "duplicate_copies": r["duplicate_copies"],
        "lost": judged.losses(),
        "late": r["late"],
        "sink_rows": r["sink_rows"],
        "sink_duplicates": judged.of("duplicate", catalog.TOPIC_SINK),
        "sink_lost": judged.losses(catalog.TOPIC_SINK),
        "end_to_end_lost": judged.losses(catalog.OUTBOX_SINK),
        "transaction_markers": r["offsets"] - r["records_read"],
    }
    if pipeline.transactional != (counts["transaction_markers"] > 0):
        raise PipelineError(
            f"the topic of {audit} has {counts['transaction_markers']} offsets without a record (transaction "
            f"markers), and {pipeline.name} "
            + (
                "writes transactions: its Connect cluster does not run exactly-once source support"
                if pipeline.transactional
                else "writes none: its Connect cluster runs exactly-once source support"
            )
            + f" ({pipeline.connect_conn_id} must name a cluster with {dict(pipeline.worker_settings)})"
        )
    verdict, broken = defined.verdict(defined.isolation, judged)
    sink = catalog.get_strategy(catalog.PIPELINE_SINK_STRATEGY).definition(defined.scenario)
    sink_verdicts = {sink.verdict(sink.isolation, judged, s)[0] for s in catalog.SINK_STAGES}
    return {
        **counts,
        "promise": defined.promise,
        "verdict": verdict,
        "broken_by": ",".join(broken) or None,
        "expectation": defined.expectation_text,
        "meets_expectation": defined.meets(judged),
        "sink_verdict": "broken" if "broken" in sink_verdicts else "kept",
    }
