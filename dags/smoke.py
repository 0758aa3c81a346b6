"""Smoke test of the whole stack: produce N records to a new RF=3 topic, count them with Spark
through the Kafka source, and check PostgreSQL holds the same count."""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from delivery_semantics.entry.dag_factory import ONE_RUN, PlatformSparkSubmitOperator, budgeted


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smoke", "stack"],
    doc_md=__doc__,
    default_args=budgeted({"retries": 1, "retry_delay": pendulum.duration(seconds=10)}),
    dagrun_timeout=ONE_RUN,
    params={"messages": Param(1000, type="integer", minimum=1, maximum=1_000_000, description="records to produce")},
)
def smoke():
    @task
    def produce(params=None, run_id=None) -> dict:
        from delivery_semantics.workload import smoke_load

        return smoke_load.produce(int(params["messages"]), run_id)

    produced = produce()
    count = PlatformSparkSubmitOperator(
        task_id="count_with_spark",
        app="smoke_count.py",
        application_args=["--topic", "{{ ti.xcom_pull(task_ids='produce')['topic'] }}"],
    )

    @task
    def verify(produced: dict) -> int:
        from delivery_semantics.workload import smoke_load

        return smoke_load.verify(produced)

    produced >> count >> verify(produced)


smoke()
