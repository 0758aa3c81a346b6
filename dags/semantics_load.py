"""Scheduled producer load, one DAG per delivery mode (scenario `none` unless triggered with
another), its producers one mapped task each. Each run's id is emitted on the `semantics_runs`
Asset; `semantics_reconcile` picks it up."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import catalog, forms
from delivery_semantics.entry.dag_factory import ONE_RUN, budgeted, mapped_load, params


def load_dag(mode: str):
    @dag(
        dag_id=f"semantics_load_{mode}",
        schedule="@daily",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        tags=["semantics", "load", mode],
        doc_md=f"Producer load in mode **{mode}**: {catalog.MODES[mode].description}.\n\n{__doc__}",
        default_args=budgeted({"retries": 2, "retry_delay": pendulum.duration(seconds=30)}),
        dagrun_timeout=ONE_RUN,
        params=params(forms.scheduled_load_form(mode)),
    )
    def semantics_load():
        @task
        def conf(params=None) -> dict:
            return {**params, "mode": mode}

        mapped_load(conf())

    return semantics_load()


for _mode in catalog.MODES:
    load_dag(_mode)
