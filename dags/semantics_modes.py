"""Airflow DAGs, one per mode file: `semantics_mode_<name>` for `modes/<name>.yaml`
(SEMANTICS_MODES_DIR), made by the platform's DAG factory (delivery_semantics.entry.dag_factory)."""

from delivery_semantics.entry.dag_factory import mode_dags

globals().update(mode_dags())
