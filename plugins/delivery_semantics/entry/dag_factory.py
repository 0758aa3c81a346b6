"""The platform's DAGs as a factory a DAG file calls: `audit_dags(folder)` makes one DAG per audit
file of a folder, `mode_dags(folder)` one per mode file, and the platform's own DAG files (matrix,
load, prove, reconcile) build theirs from the same pieces: the cluster's pool, the mapped load, the
Spark submission that hands secrets over by environment, every task's budget. A team's DAG file is
a few lines:

    # Airflow DAGs of the orders team's audits
    from delivery_semantics.entry.dag_factory import audit_dags

    globals().update(audit_dags("/opt/airflow/dags/audits"))

(Airflow's safe mode reads only a file that says both "airflow" and "dag", and finds the DAGs in its
globals.)

At parse time it imports Airflow and the platform's catalog, nothing else of the platform: the
endpoints, the jars and the secrets are resolved when a task runs, and an audit's or a mode's
module is imported only by the factory that reads its files."""

from __future__ import annotations

import json
from pathlib import Path

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


def file_dags(found: list, file_dag, error_type: type[Exception], invalid: dict) -> dict:
    """One DAG per file of a folder (audit files, mode files): `file_dag(f)` for a file that
    loaded, and for one that did not (or whose DAG Airflow refuses, a bad schedule say) a DAG whose
    one task fails with the file's error, so that a bad file neither hides the others nor goes
    unnoticed. `invalid`: the file type (audit, mode), its DAG id prefix, the module whose `load(path)` raises
    the error again, the folder, the doc and the default args."""
    made = {}
    for name, f in found:
        if not isinstance(f, Exception):
            try:
                made_dag = file_dag(f)
                made[made_dag.dag_id] = made_dag
                continue
            except Exception as e:
                f = error_type(f"{f.path}: schedule: {e}")
        made_dag = _invalid_file_dag(name, f, **invalid)
        made[made_dag.dag_id] = made_dag
    return made


def _invalid_file_dag(
    name: str,
    error: Exception,
    *,
    file_type: str,
    prefix: str,
    module: str,
    folder: str,
    doc: str,
    default_args: dict,
):
    @dag(
        dag_id=f"{prefix}{name}",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        tags=["semantics", file_type, "invalid"],
        description=f"invalid {file_type} file: {error}"[:200],
        dagrun_timeout=budgets.dag_run(CHECK_TASK),
        doc_md=f"{doc}\n\n**This {file_type} file does not validate:** {error}",
        default_args=budgeted(default_args, CHECK_TASK),
    )
    def invalid_file():
        @task(retries=0)
        def validate() -> None:
            import importlib

            loader = importlib.import_module(module)
            loader.load(Path(folder) / f"{name}.yaml")  # raises the file's error

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
        audit_file: str | None = None,
        **kwargs,
    ):
        kwargs.setdefault("execution_timeout", SPARK_TASK)
        super().__init__(application=app, conn_id=conn_id, name=app.removesuffix(".py"), **kwargs)
        self.ledger_conn_id, self.kafka_conn_id = ledger_conn_id, kafka_conn_id
        self.source_conn_id, self.sink_conn_id = source_conn_id, sink_conn_id
        self.audit_conf = audit_conf  # an audit's `spark:` section, under the connection's settings
        self.audit_file = audit_file  # an audit's file: its lineage (get_openlineage_facets_on_complete)

    def execute(self, context):
        from delivery_semantics.entry import spark_submit
        from delivery_semantics.plumbing import spark_clusters

        sub = spark_submit.prepare_spark_submit(self)
        if sub.connect:
            timeout = self.execution_timeout.total_seconds() if self.execution_timeout else budgets.spark_max_seconds()
            done = spark_submit.run_connect(self.application, sub, timeout, self.log)
            if done.returncode != 0:
                # The provider's wording, which spark_failure reads the exit code from.
                raise spark_failure(AirflowException(f"{done.error}. Error code is: {done.returncode}."))
            return None
        try:
            with spark_clusters.submitted(sub):
                return super().execute(context)
        except AirflowException as e:
            raise spark_failure(e) from None

    def get_openlineage_facets_on_complete(self, task_instance):
        """An audit's inputs and outputs, and its promise's guarantees as assertions on the topic, for
        apache-airflow-providers-openlineage (which alone calls this; reporting/lineage.py)."""
        if not self.audit_file:
            return None
        from delivery_semantics import locations
        from delivery_semantics.audit import audits
        from delivery_semantics.plumbing.endpoints import get_connection
        from delivery_semantics.reporting import lineage, report, results_file

        audit = audits.load(self.audit_file)
        row = report.judged_row(audit, self.application_args[-1])  # the reconciliation id, or the window's end
        result = results_file.result(row, results_file.subject_of(row)) if row else None
        inputs, outputs = lineage.audit_datasets(audit, get_connection, locations.lakehouse(), result)
        return lineage.operator_lineage(inputs, outputs)


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


# --------------------------------------------------------------------------- audit files

AUDITS_DOC = """One DAG per audit file, `audit_<name>` for `audits/<name>.yaml` (Airflow's dynamic-DAG
pattern: the folder is read when this file is parsed). Each checks its endpoints, reconciles its
topic against its outbox with Spark on its own schedule, and fails its `check` task when the
promise of what the audit is judged as (a mode or a pipeline) is broken. See docs/RECONCILE.md.

A continuous audit (one with `window:`) reconciles one window per run: from the previous window's
end to this run's data interval end. Windows depend on the ones before them, so the reconcile
task waits for the previous run's (`depends_on_past`), and a backfill runs them in order. The
check also fails when more discrepancies are open than `alerts.max_open_discrepancies`; the
audit's notifier is called for any failed task.

An audit file that does not validate still gets its DAG, with one task that fails with the file's
error, so one bad file neither hides the others nor goes unnoticed."""
AUDIT_DEFAULTS = {"retries": 1, "retry_delay": pendulum.duration(minutes=1)}
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def audit_dags(folder: str | Path | None = None) -> dict:
    """One DAG per audit file of `folder` (SEMANTICS_AUDITS_DIR unless given), `audit_<name>`; a
    file that does not validate gets a DAG whose one task fails with the file's one-line error.
    Returns them by DAG id, for the calling DAG file's globals (where Airflow finds DAGs)."""
    from delivery_semantics.audit import audits

    where = Path(folder) if folder else audits.audits_dir()
    return file_dags(
        audits.discover(where),
        audit_dag,
        audits.AuditError,
        {
            "file_type": "audit",
            "prefix": "audit_",
            "module": audits.__name__,
            "folder": str(where),
            "doc": AUDITS_DOC,
            "default_args": AUDIT_DEFAULTS,
        },
    )


def audit_dag(audit):
    from delivery_semantics.audit import audits

    windowed = audit.windowed
    default_args = budgeted({**AUDIT_DEFAULTS, "on_failure_callback": audits.failure_callback(audit)}, SPARK_TASK)

    @dag(
        dag_id=audit.dag_id,
        schedule=audit.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        dagrun_timeout=budgets.dag_run(CHECK_TASK, SPARK_TASK, CHECK_TASK),
        tags=["semantics", "audit"],
        description=audit.spec.get("description") or f"{audit.topic} against its outbox",
        doc_md=f"{AUDITS_DOC}\n\nAudit file: `{audit.path.name}`, topic `{audit.topic}`, judged as `{audit.judged_as}`.",
        default_args=default_args,
    )
    def audit_run():
        def reconciled_as(a, run_id, data_interval_end, dag_run) -> str:
            """The run's reconciliation id, or a continuous audit's window end: made from the run
            alone, so each task finds it (and `airflow tasks test` runs any of them)."""
            if audit.windowed:
                return a.window_end(data_interval_end or dag_run.run_after).isoformat()
            return a.reconciliation_id(audit, run_id)

        @task(retries=0)
        def preflight(run_id=None, data_interval_end=None, dag_run=None) -> str:
            """Refuses with the file's field or the endpoint named before Spark starts."""
            from delivery_semantics.audit import audits as a
            from delivery_semantics.audit.preflight import preflight as check

            rid = reconciled_as(a, run_id, data_interval_end, dag_run)
            check(audit.path, [a.window_end(rid)] if audit.windowed else ())
            return rid

        rid = preflight()
        reconciled = PlatformSparkSubmitOperator(
            task_id="reconcile",
            app="reconcile.py",
            application_args=["--audit", str(audit.path), "--window-end" if windowed else "--reconciliation-id", rid],
            kafka_conn_id=audit.kafka_conn_id,
            source_conn_id=audit.outbox_conn_id,
            sink_conn_id=audit.sink_conn_id,
            audit_conf=audit.spark_conf,
            audit_file=str(audit.path),
            depends_on_past=windowed,
        )

        verified = verified_asset(audit)

        @task(retries=0, outlets=[verified])
        def check(run_id=None, data_interval_end=None, dag_run=None, ti=None, outlet_events=None) -> dict:
            """The verdict; the results file's document as the XCom `results` and its metrics, both
            before a broken promise fails the task; and, when every promise is kept, an event on the
            topic's Asset with the verdict in its extra."""
            from delivery_semantics.audit import audits as a
            from delivery_semantics.reporting import metrics, report, results_file

            def record(row: dict) -> None:
                doc = results_file.document(
                    f"{ti.dag_id} check", [results_file.result(row, results_file.subject_of(row))]
                )
                doc = json.loads(json.dumps(doc, default=str))
                ti.xcom_push(key="results", value=doc)
                metrics.emit(doc, report.window_delays if windowed else lambda r: None)
                [judged] = doc["results"]
                outlet_events[verified].extra = {
                    "verdict": doc["verdict"],
                    "audit": audit.name,
                    "reconciliation_id": judged["reconciliation_id"],
                    "window_end": (judged["window"] or {}).get("end"),
                    "counts": judged["counts"],
                }

            rid = reconciled_as(a, run_id, data_interval_end, dag_run)
            if windowed:
                return report.window_verdict(audit.name, rid, audit.alerts.get("max_open_discrepancies"), record)
            return report.audit_verdict(rid, record)

        reconciled >> check()

    return audit_run()


def verified_asset(audit) -> Asset:
    """What an audit's check verifies: its topic, named as OpenLineage names a Kafka topic and Airflow's
    lineage with it (`kafka://<first bootstrap server>/<topic>`). Where the connection cannot be read
    while the file is parsed, its id stands for the cluster (`kafka://<conn_id>/<topic>`)."""
    from delivery_semantics.plumbing.endpoints import get_connection

    try:
        servers = str(get_connection(audit.kafka_conn_id).extra.get("bootstrap.servers") or "")
    except Exception:  # a name must never fail the DAG: the preflight task reports the connection
        servers = ""
    cluster = servers.split(",")[0].strip() or audit.kafka_conn_id
    return Asset(f"kafka://{cluster}/{audit.topic}", group="delivery-semantics")


# --------------------------------------------------------------------------- mode files

MODES_DOC = """One DAG per mode file, `semantics_mode_<name>` for `modes/<name>.yaml` (the folder is read when
this file is parsed, as for audit files): a team's producer, its client and its settings, under
each of the file's scenarios against the file's Kafka connection, on the file's schedule. The runs
take turns on the cluster, are reconciled by one Spark application, and the `check` task fails
when a verdict is broken, naming the settings that contradict the broken guarantee.

The form takes `producer_settings` over the file's (recorded with each run, runs.settings) and the
load's size. A mode file that does not validate still gets its DAG, with one task that fails with
the file's error."""
MODE_DEFAULTS = {"retries": 1, "retry_delay": pendulum.duration(seconds=30)}


def mode_dags(folder: str | Path | None = None) -> dict:
    """One DAG per mode file of `folder` (SEMANTICS_MODES_DIR unless given), `semantics_mode_<name>`;
    a file that does not validate gets a DAG whose one task fails with the file's error. Returns
    them by DAG id, for the calling DAG file's globals."""
    from delivery_semantics import mode_files

    where = Path(folder) if folder else mode_files.modes_dir()
    return file_dags(
        mode_files.discover(where),
        mode_dag,
        mode_files.ModeFileError,
        {
            "file_type": "mode",
            "prefix": "semantics_mode_",
            "module": mode_files.__name__,
            "folder": str(where),
            "doc": MODES_DOC,
            "default_args": MODE_DEFAULTS,
        },
    )


def mode_form(f) -> dict[str, dict]:
    from delivery_semantics import forms

    load = forms.load_form(f.load.get("messages", 20_000))
    for name, value in f.load.items():
        load[name] = {**load[name], "default": value}
    return {"producer_settings": forms.producer_form(f.mode)["producer_settings"], **load}


def mode_dag(f):
    @dag(
        dag_id=f.dag_id,
        schedule=f.schedule,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["semantics", "mode", f.mode.client],
        description=(f.spec.get("description") or f"{f.mode.client} producer, promise {f.mode.promise.name}")[:200],
        doc_md=f"{MODES_DOC}\n\nMode file: `{f.path.name}`, client `{f.mode.client}`, promise "
        f"`{f.mode.promise.name}`, scenarios {', '.join(f.scenarios)}.",
        default_args=budgeted(MODE_DEFAULTS),
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
        def check(run_ids: list[str], ti=None) -> list[dict]:
            """The verdicts; the results file's document as the XCom `results`, pushed before a broken
            promise fails the task."""
            from delivery_semantics.reporting import report, results_file

            def record(rows: list[dict]) -> None:
                doc = results_file.document(f"{ti.dag_id} check", [results_file.result(r, "run") for r in rows])
                ti.xcom_push(key="results", value=json.loads(json.dumps(doc, default=str)))

            return report.mode_verdict(list(run_ids), record)

        reconciled >> check(run_ids)

    return mode_run()
