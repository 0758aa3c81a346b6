"""Pieces the DAG files share: the Asset between load and reconcile, the cluster pool, task
identities for safe retries, and the reconcile operator."""

from __future__ import annotations

from airflow.sdk import Asset

from delivery_semantics.endpoints import spark_apps_dir

# Load tasks emit the ids of the runs they made; the reconcile DAG is scheduled on it.
RUNS_ASSET = Asset("semantics_runs")
# One slot: fault scenarios kill and pause the shared brokers, so loads never overlap.
CLUSTER_POOL = "kafka_cluster"


def task_key(ti) -> str:
    """Stable across retries of the same task instance (no try number): a retry finds its run."""
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}"


def reconcile_operator(task_id: str = "reconcile", **kwargs):
    from delivery_semantics.spark_submit import PlatformSparkSubmitOperator

    return PlatformSparkSubmitOperator(task_id=task_id, application=str(spark_apps_dir() / "reconcile.py"),
                                       name="reconcile", **kwargs)


def reconcile_operator_partial(task_id: str = "reconcile", **kwargs):
    from delivery_semantics.spark_submit import PlatformSparkSubmitOperator

    return PlatformSparkSubmitOperator.partial(task_id=task_id, application=str(spark_apps_dir() / "reconcile.py"),
                                               name="reconcile", **kwargs)
