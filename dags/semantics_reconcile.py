"""Reconciles the runs that load tasks announce on the `semantics_runs` Asset: Spark
(SparkSubmitOperator on `spark_default`) per run, then the reports. A retry rewrites the same rows."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import budgets
from delivery_semantics.entry.dag_factory import RUNS_ASSET, SPARK_TASK, PlatformSparkSubmitOperator, budgeted


@dag(
    schedule=[RUNS_ASSET],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["semantics", "reconcile"],
    doc_md=__doc__,
    default_args=budgeted({"retries": 2, "retry_delay": pendulum.duration(seconds=30)}, SPARK_TASK),
    dagrun_timeout=budgets.dag_run(SPARK_TASK, SPARK_TASK),
)
def semantics_reconcile():
    @task
    def announced_runs(triggering_asset_events=None) -> list[str]:
        ids = []
        for event in triggering_asset_events[RUNS_ASSET]:
            ids.extend((event.extra or {}).get("run_ids", []))
        return sorted(set(ids))

    run_ids = announced_runs()
    reconciled = PlatformSparkSubmitOperator.partial(
        task_id="reconcile", app="reconcile.py", max_active_tis_per_dagrun=1
    ).expand(application_args=run_ids.map(lambda rid: ["--run-id", rid]))

    @task
    def report(run_ids: list[str]) -> str:
        from delivery_semantics import locations
        from delivery_semantics.reporting import report as rep

        rows = rep.matrix_rows(list(run_ids))
        print(rep.matrix_text(rows))
        return str(rep.html_report(rows, locations.reports_dir() / f"reconciled-{'-'.join(run_ids)[:80]}.html"))

    reconciled >> report(run_ids)


semantics_reconcile()
