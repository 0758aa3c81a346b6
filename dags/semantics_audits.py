"""Airflow DAGs, one per audit file: `audit_<name>` for `audits/<name>.yaml` (SEMANTICS_AUDITS_DIR),
made by the platform's DAG factory (delivery_semantics.entry.dag_factory) over the folder. A team's
own DAG file is the same lines with its folder."""

from delivery_semantics.entry.dag_factory import audit_dags

globals().update(audit_dags())
