"""One DAG per audit file, `audit_<name>` for `audits/<name>.yaml` (Airflow's dynamic-DAG
pattern: the folder is read when this file is parsed). Each checks its endpoints, reconciles its
topic against its outbox with Spark on its own schedule, and fails its `check` task when the
promise of what the audit is judged as (a mode or a pipeline) is broken. See docs/RECONCILE.md.

A continuous audit (one with `window:`) reconciles one window per run: from the previous window's
end to this run's data interval end. Windows depend on the ones before them, so the reconcile
task waits for the previous run's (`depends_on_past`), and a backfill runs them in order. The
check also fails when more discrepancies are open than `alerts.max_open_discrepancies`; the
audit's notifier is called for any failed task.

An audit file that does not validate still gets its DAG, with one task that fails with the file's
error, so one bad file neither hides the others nor goes unnoticed."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import budgets
from delivery_semantics.audit import audits
from semantics_common import CHECK_TASK, SPARK_TASK, PlatformSparkSubmitOperator, budgeted, file_dags

DEFAULTS = {"retries": 1, "retry_delay": pendulum.duration(minutes=1)}
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def audit_dag(audit: audits.Audit):
    windowed = audit.windowed
    default_args = budgeted({**DEFAULTS, "on_failure_callback": audits.failure_callback(audit)}, SPARK_TASK)

    @dag(
        dag_id=audit.dag_id,
        schedule=audit.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=budgets.dag_run(CHECK_TASK, SPARK_TASK, CHECK_TASK),
        tags=["semantics", "audit"],
        description=audit.spec.get("description") or f"{audit.topic} against its outbox",
        doc_md=f"{__doc__}\n\nAudit file: `{audit.path.name}`, topic `{audit.topic}`, judged as `{audit.judged_as}`.",
        default_args=default_args,
    )
    def audit_run():
        def reconciled_as(a, run_id, data_interval_end, dag_run) -> str:
            """The run's reconciliation id, or a continuous audit's window end: made from the run
            alone, so each task finds it (and `airflow tasks test` runs any of them)."""
            if audit.windowed:
                return a.window_end(data_interval_end or dag_run.run_after).isoformat()
            return a.reconciliation_id(audit, run_id)

        @task(retries=0)
        def preflight(run_id=None, data_interval_end=None, dag_run=None) -> str:
            """Refuses with the file's field or the endpoint named before Spark starts."""
            from delivery_semantics.audit import audits as a
            from delivery_semantics.audit.preflight import preflight as check

            rid = reconciled_as(a, run_id, data_interval_end, dag_run)
            check(audit.path, [a.window_end(rid)] if audit.windowed else ())
            return rid

        rid = preflight()
        reconciled = PlatformSparkSubmitOperator(
            task_id="reconcile",
            app="reconcile.py",
            application_args=["--audit", str(audit.path), "--window-end" if windowed else "--reconciliation-id", rid],
            kafka_conn_id=audit.kafka_conn_id,
            source_conn_id=audit.outbox_conn_id,
            sink_conn_id=audit.sink_conn_id,
            audit_conf=audit.spark_conf,
            depends_on_past=windowed,
        )

        @task(retries=0)
        def check(run_id=None, data_interval_end=None, dag_run=None) -> dict:
            from delivery_semantics.audit import audits as a
            from delivery_semantics.reporting import report

            rid = reconciled_as(a, run_id, data_interval_end, dag_run)
            if windowed:
                return report.window_verdict(audit.name, rid, audit.alerts.get("max_open_discrepancies"))
            return report.audit_verdict(rid)

        reconciled >> check()

    return audit_run()


file_dags(
    audits.discover(),
    audit_dag,
    audits.AuditError,
    {
        "kind": "audit",
        "prefix": "audit_",
        "module": "delivery_semantics.audit.audits",
        "folder": "audits_dir",
        "doc": __doc__,
        "default_args": DEFAULTS,
    },
)
