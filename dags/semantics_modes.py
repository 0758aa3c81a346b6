"""One DAG per mode file, `semantics_mode_<name>` for `modes/<name>.yaml` (the folder is read when
this file is parsed, as for audit files): a team's producer, its client and its settings, under
each of the file's scenarios against the file's Kafka connection, on the file's schedule. The runs
take turns on the cluster, are reconciled by one Spark application, and the `check` task fails
when a verdict is broken, naming the settings that contradict the broken guarantee.

The form takes `producer_settings` over the file's (recorded with each run, runs.settings) and the
load's size. A mode file that does not validate still gets its DAG, with one task that fails with
the file's error."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import forms, mode_files
from semantics_common import (
    CLUSTER_POOL,
    CLUSTER_POOL_SLOTS,
    MANY_RUNS,
    PlatformSparkSubmitOperator,
    budgeted,
    file_dags,
    params,
)

DEFAULTS = {"retries": 1, "retry_delay": pendulum.duration(seconds=30)}
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def mode_form(f: mode_files.ModeFile) -> dict[str, dict]:
    load = forms.load_form(f.load.get("messages", 20_000))
    for name, value in f.load.items():
        load[name] = {**load[name], "default": value}
    return {"producer_settings": forms.producer_form(f.mode)["producer_settings"], **load}


def mode_dag(f: mode_files.ModeFile):
    @dag(
        dag_id=f.dag_id,
        schedule=f.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["semantics", "mode", f.mode.client],
        description=(f.spec.get("description") or f"{f.mode.client} producer, promise {f.mode.promise.name}")[:200],
        doc_md=f"{__doc__}\n\nMode file: `{f.path.name}`, client `{f.mode.client}`, promise "
        f"`{f.mode.promise.name}`, scenarios {', '.join(f.scenarios)}.",
        default_args=budgeted(DEFAULTS),
        dagrun_timeout=MANY_RUNS,
        params=params(mode_form(f)),
    )
    def mode_run():
        @task(retries=0)
        def runs(params=None) -> list[dict]:
            """Every scenario's run, checked as a whole (the settings by the client) before any runs."""
            from delivery_semantics.entry import orchestration

            confs = [{**dict(params), "mode": f.name, "scenario": s} for s in f.scenarios]
            return [orchestration.validate_conf(c) for c in confs]

        @task(
            pool=CLUSTER_POOL,
            pool_slots=CLUSTER_POOL_SLOTS,
            max_active_tis_per_dagrun=1,
            map_index_template="{{ scenario_label }}",
        )
        def run_scenario(conf: dict, ti=None) -> str:
            from airflow.sdk import get_current_context

            from delivery_semantics.entry import orchestration

            get_current_context()["scenario_label"] = conf["scenario"]
            return orchestration.run_pair(conf, orchestration.task_key(ti))["run_id"]

        @task(retries=0)
        def checker_args(run_ids: list[str]) -> list[str]:
            from delivery_semantics.entry.spark_submit import reconcile_args

            return reconcile_args(list(run_ids))

        run_ids = run_scenario.expand(conf=runs())
        reconciled = PlatformSparkSubmitOperator(
            task_id="reconcile",
            app="reconcile.py",
            application_args=checker_args(run_ids),
            kafka_conn_id=f.connection or "kafka_default",
        )

        @task(retries=0)
        def check(run_ids: list[str]) -> list[dict]:
            from delivery_semantics.reporting import report

            return report.mode_verdict(list(run_ids))

        reconciled >> check(run_ids)

    return mode_run()


file_dags(
    mode_files.discover(),
    mode_dag,
    mode_files.ModeFileError,
    {
        "kind": "mode",
        "prefix": "semantics_mode_",
        "module": "delivery_semantics.mode_files",
        "folder": "modes_dir",
        "doc": __doc__,
        "default_args": DEFAULTS,
    },
)
