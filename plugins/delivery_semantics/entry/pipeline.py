"""A connector pipeline's run, wired: its workload (workload/connector_pipeline.py) makes, loads
and drains it, and then, unless the spec says not to, the audit it makes for itself
(audit/pipeline_audit.py) is run by the checker over its windows and its totals and verdict land
in `pipeline_runs`.
"""

from __future__ import annotations

import time

from delivery_semantics.audit import audits, pipeline_audit
from delivery_semantics.faults.nemesis import Nemesis
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.workload import connector_pipeline
from delivery_semantics.workload.connector_pipeline import Loaded, PipelineError, PipelineSpec, now


def run(spec: PipelineSpec, *, nemesis: Nemesis | None = None, master: str | None = None) -> dict:
    """A whole pipeline run, audited; returns its pipeline_runs row.
    Bad input and unreachable endpoints are refused (PipelineError, EndpointError) before anything
    is made."""

    def judge(ledger: Ledger, loaded: Loaded) -> None:
        _audit(ledger, loaded, master)

    return connector_pipeline.run(spec, nemesis=nemesis, judge=judge)


def _audit(ledger: Ledger, loaded: Loaded, master: str | None) -> None:
    """The checker over the run's windows once the last is due, then its totals and verdict."""
    from delivery_semantics.entry import spark_submit

    names = loaded.names
    ends = pipeline_audit.window_ends(loaded.load_started, loaded.load_ended)
    time.sleep(max(0.0, (ends[-1] - now()).total_seconds() + 1))
    audit = audits.load(pipeline_audit.write_audit(loaded.pipeline, loaded.scenario.name, names))
    result = spark_submit.run(audit=audit, window_ends=[e.isoformat() for e in ends], master=master)
    if result.returncode != 0:
        raise PipelineError(f"the audit of run {names.run_id} failed: {result.error}")
    fields = pipeline_audit.totals(ledger, loaded.pipeline, loaded.definition, names.audit)
    ledger.update_pipeline_run(names.run_id, status="reconciled", ended_at=now(), **fields)
    # The run's audit never runs again: its totals are recorded, its state would only stay.
    with ledger.conn, ledger.conn.cursor() as cur:
        audits.forget_state(cur, names.audit)


def summary_line(row: dict) -> str:
    return (
        f"{row['run_id']} {row['pipeline']} x {row['scenario']}: {row['outbox_rows']} outbox rows, "
        f"{row['records_read']} records, duplicates {row['duplicate_events']}, lost {row['lost']}, "
        f"sink rows {row['sink_rows']} (duplicates {row['sink_duplicates']}, lost {row['sink_lost']}), "
        f"end-to-end lost {row['end_to_end_lost']}; {row['throughput_eps']} events/s, "
        f"p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms; verdict {row['verdict']}, "
        f"expected {row['expectation']}: {'as expected' if row['meets_expectation'] else 'NOT as expected'}"
    )
