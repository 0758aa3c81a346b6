"""SparkSubmitOperator wired to the platform: cached jars, and the ledger database and Kafka
handed to the application as environment at execute time (never as arguments, never rendered)."""

from __future__ import annotations

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from delivery_semantics.endpoints import (KAFKA_CONN_ID, LEDGER_CONN_ID, SPARK_CONN_ID, SPARK_CONF,
                                          spark_application_env, spark_jars)



class PlatformSparkSubmitOperator(SparkSubmitOperator):
    def __init__(self, *, ledger_conn_id: str = LEDGER_CONN_ID, kafka_conn_id: str = KAFKA_CONN_ID,
                 conn_id: str = SPARK_CONN_ID, conf: dict | None = None, **kwargs):
        super().__init__(conn_id=conn_id, conf={**SPARK_CONF, **(conf or {})}, **kwargs)
        self.ledger_conn_id = ledger_conn_id
        self.kafka_conn_id = kafka_conn_id

    def execute(self, context):
        self.jars = self.jars or spark_jars()
        self.env_vars = {**(self.env_vars or {}), **spark_application_env(self.ledger_conn_id, self.kafka_conn_id)}
        return super().execute(context)
