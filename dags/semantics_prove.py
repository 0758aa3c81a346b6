"""Predict, then prove, from the UI form: the rule catalog reads a mode's settings with the ones
given over it (producer, topic, consumer), or a connector pipeline's, and puts each finding to the
fewest runs that can show it; the checker (SparkSubmitOperator on `spark_default`) judges the runs
made, and each finding's observed count is set beside its prediction, kept in `proofs` and shown
by the report and the UI page. The DAG fails when a run does not confirm its finding: a rule, or
the checker, is wrong, and the task log names the run to read.

`validate` checks the request before anything is made (the families' allowlists, as the command
does); `make_runs` finds or makes the runs and is not retried (a run is not idempotent)."""

from __future__ import annotations

import pendulum
from airflow.sdk import dag, task

from delivery_semantics import catalog, forms
from delivery_semantics.entry.dag_factory import (
    CLUSTER_POOL,
    CLUSTER_POOL_SLOTS,
    MANY_RUNS,
    RUNS_ASSET,
    PlatformSparkSubmitOperator,
    budgeted,
    params,
)


@dag(
    dag_id="semantics_prove",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["semantics", "ui", "prove"],
    doc_md=__doc__,
    default_args=budgeted({"retries": 2, "retry_delay": pendulum.duration(seconds=30)}),
    dagrun_timeout=MANY_RUNS,
    params=params(forms.prove_form()),
)
def semantics_prove():
    @task(retries=0)
    def validate(params=None) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        from delivery_semantics.entry import prove

        try:
            req, _ = prove.request_of_form(dict(params))
            planned, left = prove.plan(prove.predictions(req), req)
        except (prove.ProveError, catalog.CatalogError) as e:
            raise AirflowFailException(f"bad input: {e}") from None
        outcomes = [prove.Outcome(p, pl.label) for pl in planned for p in pl.predictions] + left
        print(prove.table(outcomes))
        return req.name

    @task(retries=0, pool=CLUSTER_POOL, pool_slots=CLUSTER_POOL_SLOTS, outlets=[RUNS_ASSET])
    def make_runs(subject: str, params=None) -> dict:
        from delivery_semantics.entry import prove

        req, reuse = prove.request_of_form(dict(params))
        made = prove.make_runs(req, params["messages"], reuse=reuse)
        return {"made": made.to_json(), "fresh": made.fresh(req)}

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def anything_new(made: dict) -> bool:
        return bool(made["fresh"])

    @task
    def checker_args(made: dict) -> list[str]:
        from delivery_semantics.entry.spark_submit import reconcile_args

        return reconcile_args(made["fresh"])

    @task(trigger_rule="none_failed")
    def judge(made: dict, params=None) -> list[dict]:
        from airflow.sdk.exceptions import AirflowFailException

        from delivery_semantics.entry import prove

        req, _ = prove.request_of_form(dict(params))
        outcomes = prove.judge(req, prove.Made.from_json(req, made["made"]))
        print(prove.table(outcomes))
        refuted = [f"{o.prediction.rule.name} (run {o.run_id})" for o in outcomes if o.confirmed is False]
        if refuted:
            raise AirflowFailException(f"not confirmed, a rule or the checker is wrong: {', '.join(refuted)}")
        return [o.row() for o in outcomes]

    made = make_runs(validate())
    args = checker_args(made)
    anything_new(made) >> args
    reconcile = PlatformSparkSubmitOperator(task_id="reconcile", app="reconcile.py", application_args=args)
    reconcile >> judge(made)


semantics_prove()
