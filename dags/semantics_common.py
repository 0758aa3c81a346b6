"""What the DAG files share. At parse time it imports Airflow and the platform's catalog, nothing
else of the platform: the endpoints, the jars and the secrets are resolved when a task runs.
(Listed in .airflowignore: it defines no DAG.)"""

from __future__ import annotations

import pendulum
from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param, dag, task

from delivery_semantics import budgets, catalog

# Load tasks emit the ids of the runs they made; the reconcile DAG is scheduled on it.
RUNS_ASSET = Asset(catalog.RUNS_ASSET)
CLUSTER_POOL = catalog.CLUSTER_POOL
# A task that runs a whole run (all its producers) takes every slot: fault runs never overlap.
CLUSTER_POOL_SLOTS = catalog.CLUSTER_POOL_SLOTS


# Every task has a timeout and every DAG run one (docs/SECURITY.md, budgets): a task that runs loads
# the longest load's deadline and its flush, a Spark application the operator's maximum, any other
# task a check's; a DAG run its tasks one after the other, and time queued for the cluster's pool.
LOAD_TASK = budgets.load_task(catalog.LIMITS["messages"][1])
SPARK_TASK = budgets.spark_task()
CHECK_TASK = budgets.CHECK_TASK
ONE_RUN = budgets.dag_run(CHECK_TASK, LOAD_TASK, SPARK_TASK, CHECK_TASK)
# A DAG run of many runs (the matrix, a proof) is bounded by a day.
MANY_RUNS = pendulum.duration(days=1)


def budgeted(default_args: dict, task=LOAD_TASK) -> dict:
    """A DAG's default args with every task's timeout."""
    return {**default_args, "execution_timeout": task}


def mapped_load(conf):
    """A producer run as tasks: `start_run` makes it (a retry finds it), one `produce` task per
    producer slice in the cluster pool (a retry resumes that slice; a Celery or Kubernetes executor
    spreads them over workers), and `finish_run` totals it and announces it on RUNS_ASSET.
    Returns finish_run's result: the run's id."""

    @task
    def start_run(conf: dict, ti=None) -> list[dict]:
        from delivery_semantics.entry import orchestration

        return orchestration.start_run(conf, orchestration.task_key(ti))

    @task(pool=CLUSTER_POOL)  # map index = producer number
    def produce(ledger_run: str, producer: int) -> dict:
        from delivery_semantics.entry import orchestration

        return orchestration.produce(ledger_run, producer)

    @task(outlets=[RUNS_ASSET])
    def finish_run(slices: list[dict], outlet_events=None) -> str:
        from delivery_semantics.entry import orchestration

        ledger_run = slices[0]["ledger_run"]
        print(orchestration.finish_run(ledger_run))
        outlet_events[RUNS_ASSET].extra = {"run_ids": [ledger_run]}
        return ledger_run

    slices = start_run(conf)
    produced = produce.expand_kwargs(slices)
    finished = finish_run(slices)
    produced >> finished
    return finished


def file_dags(found: list, file_dag, error_type: type[Exception], invalid: dict) -> None:
    """One DAG per file of a folder (audit files, mode files): `file_dag(f)` for a file that
    loaded, and for one that did not (or whose DAG Airflow refuses, a bad schedule say) a DAG whose
    one task fails with the file's error, so that a bad file neither hides the others nor goes
    unnoticed. `invalid`: the kind of file, its DAG id prefix, the module whose `load(path)` raises
    the error again, the doc and the default args."""
    for name, f in found:
        if not isinstance(f, Exception):
            try:
                file_dag(f)
                continue
            except Exception as e:
                f = error_type(f"{f.path}: schedule: {e}")
        _invalid_file_dag(name, f, **invalid)


def _invalid_file_dag(
    name: str, error: Exception, *, kind: str, prefix: str, module: str, folder: str, doc: str, default_args: dict
):
    @dag(
        dag_id=f"{prefix}{name}",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["semantics", kind, "invalid"],
        description=f"invalid {kind} file: {error}"[:200],
        dagrun_timeout=budgets.dag_run(CHECK_TASK),
        doc_md=f"{doc}\n\n**This {kind} file does not validate:** {error}",
        default_args=budgeted(default_args, CHECK_TASK),
    )
    def invalid_file():
        @task(retries=0)
        def validate() -> None:
            import importlib

            loader = importlib.import_module(module)
            loader.load(getattr(loader, folder)() / f"{name}.yaml")  # raises the file's error

        validate()

    return invalid_file()


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
        audit_conf: dict | None = None,
        **kwargs,
    ):
        kwargs.setdefault("execution_timeout", SPARK_TASK)
        super().__init__(application=app, conn_id=conn_id, name=app.removesuffix(".py"), **kwargs)
        self.ledger_conn_id, self.kafka_conn_id = ledger_conn_id, kafka_conn_id
        self.source_conn_id, self.sink_conn_id = source_conn_id, sink_conn_id
        self.audit_conf = audit_conf  # an audit's `spark:` section, under the connection's settings

    def execute(self, context):
        from delivery_semantics.entry import spark_submit

        spark_submit.prepare_spark_submit(self)
        try:
            return super().execute(context)
        except AirflowException as e:
            raise spark_failure(e) from None


def spark_failure(e: Exception) -> Exception:
    """A failed application as the task's failure: bad input (exit 2) fails at once, without the
    retries a transient failure (exit 75: Kafka still unavailable past its bound) or a crash gets."""
    import re

    from airflow.exceptions import AirflowFailException

    from delivery_semantics.plumbing.kafka_retry import EXIT_BAD_INPUT

    code = re.search(r"Error code is: (-?\d+)", str(e))
    if code and int(code.group(1)) == EXIT_BAD_INPUT:
        return AirflowFailException(f"bad input, not retried: {e}")
    return e
