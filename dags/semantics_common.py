"""What the DAG files share. At parse time it imports Airflow and the platform's catalog, nothing
else of the platform: the endpoints, the jars and the secrets are resolved when a task runs.
(Listed in .airflowignore: it defines no DAG.)"""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param

from delivery_semantics import catalog

# Load tasks emit the ids of the runs they made; the reconcile DAG is scheduled on it.
RUNS_ASSET = Asset(catalog.RUNS_ASSET)
CLUSTER_POOL = catalog.CLUSTER_POOL


def params(form: dict[str, dict]) -> dict[str, Param]:
    """A catalog form (JSON schema per field) as the DAG's Params."""
    return {name: Param(**spec) for name, spec in form.items()}


class PlatformSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for an application of spark_apps/. At execute time it is given the
    cached jars, the platform's Spark settings, and the ledger database, Kafka (with its SASL
    credentials) and an audit's source database as environment: never as arguments, never
    rendered."""

    def __init__(
        self,
        *,
        app: str,
        conn_id: str = "spark_default",
        ledger_conn_id: str = "ledger_db",
        kafka_conn_id: str = "kafka_default",
        source_conn_id: str | None = None,
        sink_conn_id: str | None = None,
        **kwargs,
    ):
        super().__init__(application=app, conn_id=conn_id, name=app.removesuffix(".py"), **kwargs)
        self.ledger_conn_id, self.kafka_conn_id = ledger_conn_id, kafka_conn_id
        self.source_conn_id, self.sink_conn_id = source_conn_id, sink_conn_id

    def execute(self, context):
        from delivery_semantics import endpoints

        endpoints.prepare_spark_submit(self)
        return super().execute(context)
