"""One run from the UI form, reconciled with Spark (SparkSubmitOperator on `spark_default`) and
reported:
- `semantics_single_run`: a producer load in one mode under one fault scenario, its producers one
  mapped task each;
- `semantics_consumer_run`: a consumer run, one consumer strategy, with or without crashes, over a
  given producer run or a fresh fault-free one; checked on what it wrote (sink table or output
  topic) against that producer run's ledger.

Each field is checked against its JSON schema when the run is triggered. The request as a whole is
checked by `validate`, the first task, which has no side effects. Examples of what it refuses:
txn_abort with a non-transactional mode, lost_ack with acks=0, a consumer input run that does not
exist or did not complete."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import forms
from delivery_semantics.entry.dag_factory import (
    CLUSTER_POOL,
    CLUSTER_POOL_SLOTS,
    ONE_RUN,
    RUNS_ASSET,
    PlatformSparkSubmitOperator,
    budgeted,
    mapped_load,
    params,
)


def one_run_dag(dag_id: str, form: dict, tags: list[str], producer_run: bool):
    @dag(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["semantics", "ui", *tags],
        doc_md=__doc__,
        default_args=budgeted({"retries": 2, "retry_delay": pendulum.duration(seconds=30)}),
        dagrun_timeout=ONE_RUN,
        params=params(form),
    )
    def one_run():
        @task(retries=0)
        def validate(params=None) -> dict:
            from delivery_semantics.entry import orchestration

            return orchestration.validate_conf(dict(params))

        if producer_run:
            ledger_run = mapped_load(validate())
        else:

            @task(outlets=[RUNS_ASSET], pool=CLUSTER_POOL, pool_slots=CLUSTER_POOL_SLOTS)
            def run_load(conf: dict, ti=None, outlet_events=None) -> str:
                from delivery_semantics.entry import orchestration

                result = orchestration.run_pair(conf, orchestration.task_key(ti))
                outlet_events[RUNS_ASSET].extra = {"run_ids": [result["run_id"]]}
                return result["run_id"]

            ledger_run = run_load(validate())

        @task(retries=0)
        def checker_args(ledger_run: str, params=None) -> list[str]:
            # A consumer run's form has no switch: it writes no copy.
            from delivery_semantics.entry.spark_submit import reconcile_args

            return reconcile_args([ledger_run], params.get("dedup_copy"))

        reconciled = PlatformSparkSubmitOperator(
            task_id="reconcile", app="reconcile.py", application_args=checker_args(ledger_run)
        )

        @task
        def report(ledger_run: str) -> str:
            from delivery_semantics import locations
            from delivery_semantics.reporting import report as rep

            rows = rep.matrix_rows([ledger_run])
            print(rep.matrix_text(rows))
            return str(rep.html_report(rows, locations.reports_dir() / f"run-{ledger_run}.html", f"Run {ledger_run}"))

        reconciled >> report(ledger_run)

    return one_run()


one_run_dag("semantics_single_run", forms.single_run_form(), ["single-run"], producer_run=True)
one_run_dag("semantics_consumer_run", forms.consumer_run_form(), ["consumer"], producer_run=False)
