"""The delivery-semantics matrix: every valid mode x scenario pair, then every consumer strategy
under consumer_crash, one after another (the faults share one cluster), all reconciled by one Spark
application; and the connector-pipeline block, every chosen pipeline x scenario pair, each audited
three ways (outbox, topic, sink) as it ends. Then the matrix report: tables in the log and an HTML
page with plots under var/reports/."""

from __future__ import annotations

import pendulum
from airflow.sdk import TriggerRule, dag, task

from delivery_semantics import forms
from delivery_semantics.entry.dag_factory import (
    CLUSTER_POOL,
    CLUSTER_POOL_SLOTS,
    MANY_RUNS,
    PlatformSparkSubmitOperator,
    budgeted,
    params,
)


@dag(
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["semantics", "matrix"],
    doc_md=__doc__,
    default_args=budgeted({"retries": 2, "retry_delay": pendulum.duration(seconds=30)}),
    dagrun_timeout=MANY_RUNS,
    params=params(forms.matrix_form()),
)
def semantics_matrix():
    @task(retries=0)
    def pairs(params=None) -> list[dict]:
        from delivery_semantics import matrix

        return matrix.matrix_confs(dict(params))

    @task(
        pool=CLUSTER_POOL,
        pool_slots=CLUSTER_POOL_SLOTS,
        max_active_tis_per_dagrun=1,
        map_index_template="{{ pair_label }}",
    )
    def run_pair(conf: dict, ti=None) -> str:
        from airflow.sdk import get_current_context

        from delivery_semantics.entry import orchestration

        subject = f"{conf['mode']} ({conf['client']})" if "mode" in conf else conf["strategy"]
        get_current_context()["pair_label"] = f"{subject} x {conf['scenario']}"
        return orchestration.run_pair(conf, orchestration.task_key(ti))["run_id"]

    @task(retries=0)
    def every_run(run_ids: list[str], params=None) -> list[str]:
        from delivery_semantics.entry.spark_submit import reconcile_args

        return reconcile_args(list(run_ids), params.get("dedup_copy"), params["messages"])

    @task(retries=0)
    def pipeline_pairs(params=None) -> list[dict]:
        from delivery_semantics import matrix

        return matrix.pipeline_confs(dict(params))

    @task(
        pool=CLUSTER_POOL,
        pool_slots=CLUSTER_POOL_SLOTS,
        max_active_tis_per_dagrun=1,
        map_index_template="{{ pair_label }}",
    )
    def run_pipeline(conf: dict, ti=None) -> str:
        from airflow.sdk import get_current_context

        from delivery_semantics.entry import orchestration

        get_current_context()["pair_label"] = f"{conf['pipeline']} x {conf['scenario']}"
        return orchestration.run_pipeline(conf, orchestration.task_key(ti))["run_id"]

    run_ids = run_pair.expand(conf=pairs())
    # One application for every run: the JVM starts once, not once a run.
    reconciled = PlatformSparkSubmitOperator(
        task_id="reconcile", app="reconcile.py", application_args=every_run(run_ids)
    )
    pipeline_run_ids = run_pipeline.expand(conf=pipeline_pairs())

    # Either block may be empty (its mapped task skipped): the report shows what ran.
    @task(trigger_rule=TriggerRule.NONE_FAILED)
    def report(run_ids, pipeline_run_ids, run_id=None) -> str:
        from delivery_semantics import locations
        from delivery_semantics.reporting import report as rep

        rows = rep.matrix_rows(list(run_ids or [])) if run_ids else []
        pipelines = rep.pipeline_rows(list(pipeline_run_ids or []))
        if rows:
            print("\n" + rep.matrix_text(rows))
        if pipelines:
            print("\nConnector pipelines\n" + rep.pipeline_text(pipelines))
        safe = "".join(c if c.isalnum() else "_" for c in run_id)
        return str(rep.html_report(rows, locations.reports_dir() / f"matrix-{safe}.html", pipelines=pipelines))

    [reconciled, pipeline_run_ids] >> report(run_ids, pipeline_run_ids)


semantics_matrix()
