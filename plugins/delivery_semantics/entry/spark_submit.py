"""The Spark checker's submission: the environment a platform application reads (never its
arguments), the completion of Airflow's SparkSubmitOperator for it, and spark-submit run outside
Airflow: the CLI (`local/semantics reconcile`), the tests and the benchmarks."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from delivery_semantics import catalog
from delivery_semantics.audit import stores
from delivery_semantics.plumbing import spark_clusters
from delivery_semantics.plumbing.endpoints import (
    KAFKA_CONN_ID,
    LEDGER_CONN_ID,
    SPARK_CONN_ID,
    kafka_config,
    ledger_database,
    oauth_java_options,
    pythonpath_with_package,
    spark_kafka_options,
)
from delivery_semantics.plumbing.spark import (
    lakehouse,
    reads_platform_topics,
    spark_apps_dir,
    spark_auth_env,
    spark_class_archive,
    spark_conf,
    spark_jars,
    spark_master,
    spark_py_files,
)

# One checker application reconciles a matrix's runs two at a time: a run's many small stages
# leave a core idle (34 runs of 100k events: 320 s one at a time, 291 s two at a time; three were
# no faster). Runs above SIDE_BY_SIDE_MAX_EVENTS go one at a time, each with all of the driver's
# memory for its cached reads.
RECONCILE_SIDE_BY_SIDE = 2
SIDE_BY_SIDE_MAX_EVENTS = 1_000_000


def reconcile_args(
    run_ids: list[str], dedup_copy: str | bool = catalog.DEFAULT_DEDUP_COPY, events_per_run: int | None = None
) -> list[str]:
    """The checker's arguments for platform runs; with `events_per_run`, small runs are reconciled
    side by side."""
    args = [a for rid in run_ids for a in ("--run-id", rid)]
    args += ["--dedup-copy", catalog.dedup_copy_store(dedup_copy)]
    if len(run_ids) > 1 and events_per_run is not None and events_per_run <= SIDE_BY_SIDE_MAX_EVENTS:
        args += ["--parallel-runs", str(RECONCILE_SIDE_BY_SIDE)]
    return args


def spark_application_env(
    ledger_conn_id: str = LEDGER_CONN_ID,
    kafka_conn_id: str = KAFKA_CONN_ID,
    source_conn_id: str | None = None,
    sink_conn_id: str | None = None,
) -> dict[str, str]:
    """What a platform Spark application reads from its environment, never from its arguments
    (`ps` shows those): the ledger database, an audit's source and sink databases, Kafka for
    librdkafka and for Spark's Kafka source, and this package on the driver's path."""
    kafka = kafka_config(kafka_conn_id)
    env = {
        **ledger_database(ledger_conn_id).spark_env(),
        "SEMANTICS_KAFKA_CONFIG": json.dumps(kafka),
        "SEMANTICS_KAFKA_SPARK_OPTIONS": json.dumps(spark_kafka_options(kafka)),
        "PYTHONPATH": pythonpath_with_package(),
        # Python UDFs (the Protobuf decoder) need pandas, pyarrow and protobuf: this interpreter's.
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "SEMANTICS_LAKEHOUSE": lakehouse(),
    }
    for section, conn_id in (("outbox", source_conn_id), ("sink", sink_conn_id)):
        if conn_id:
            env.update(stores.spark_env(conn_id, section))
    return env


def submission(
    app_args: list[str],
    app_env: dict[str, str],
    master: str | None = None,
    audit_conf: dict | None = None,
    spark_conn_id: str = SPARK_CONN_ID,
) -> spark_clusters.Submission:
    """How a platform application is submitted at the Spark connection's master (or `master`): its
    settings, and its environment in the process (client mode) or by reference (cluster mode)."""
    master = master or spark_master(spark_conn_id)
    conf = spark_conf(master, audit_conf, spark_conn_id)
    # The Kafka client's JVM options (an OAUTHBEARER token endpoint allowed), in the driver's and the
    # executors' JVMs: both read the topic.
    jvm = oauth_java_options(json.loads(app_env.get("SEMANTICS_KAFKA_CONFIG") or "{}"))
    for side in ("driver", "executor") if jvm else ():
        key = f"spark.{side}.extraJavaOptions"
        conf[key] = " ".join([conf[key], *jvm] if conf.get(key) else jvm)
    env = {**app_env, **spark_auth_env(spark_conn_id)}
    manager = spark_clusters.cluster_manager(master)
    if manager.name == "connect":
        # The server holds the jars; the session gets the platform's Python files for its workers.
        env[spark_clusters.CONNECT_PY_FILES] = spark_py_files()
    return manager.submission(master, env, conf, app_args)


def prepare_spark_submit(op) -> spark_clusters.Submission:
    """Completes a SparkSubmitOperator for a platform application when its task runs: the path of
    the application, the cached jars, the Spark settings, the application's environment, and in
    cluster mode the files it ships and its deploy mode. Returns the submission, whose Secret or
    credentials file `spark_clusters.submitted` makes and removes around the run."""
    app_env = spark_application_env(op.ledger_conn_id, op.kafka_conn_id, op.source_conn_id, op.sink_conn_id)
    sub = submission(list(op.application_args or ()), app_env, audit_conf=op.audit_conf, spark_conn_id=op._conn_id)
    op.application = str(spark_apps_dir() / op.application)
    op.application_args = sub.app_args
    if sub.connect:  # run by run_connect: no spark-submit, no jars here
        return sub
    op.jars = op.jars or spark_jars(reads_platform_topics(sub.app_args))
    op.conf = {**sub.conf, **(op.conf or {})}
    op.py_files = op.py_files or spark_py_files()
    op.files = ",".join([*(op.files.split(",") if op.files else []), *sub.files]) or None
    op._deploy_mode = sub.deploy_mode
    op.env_vars = {**(op.env_vars or {}), **sub.process_env, **sub.plain_env}
    return sub


@dataclass
class Reconciled:
    returncode: int
    summaries: list[dict]
    stdout: str
    stderr: str

    @property
    def error(self) -> str:
        # PySpark's runner merges the Python driver's stderr into stdout, and the JVM's log lines
        # can share a line with the application's message.
        text = self.stdout + "\n" + self.stderr
        lines = [ln[ln.index("reconcile: ") :] for ln in text.splitlines() if "reconcile: " in ln]
        if lines:
            return lines[-1]
        if "Traceback (most recent call last)" in text:  # a bug in the application: show where
            return text[text.rindex("Traceback (most recent call last)") :][:3000]
        return self.stderr[-2000:]


def command(
    app_args: list[str],
    master: str | None = None,
    conf: dict | None = None,
    app: str = "reconcile.py",
    audit_conf: dict | None = None,
    spark_conn_id: str = SPARK_CONN_ID,
) -> list[str]:
    """spark-submit of an application of spark_apps/ with the platform's jars and settings, at the
    Spark connection's master unless given one; `conf` over them all."""
    return command_of(submission(app_args, {}, master, audit_conf, spark_conn_id), conf, app)


def command_of(sub: spark_clusters.Submission, conf: dict | None = None, app: str = "reconcile.py") -> list[str]:
    if sub.connect:  # a Python process: the server is the driver (conf, if any, is the session's)
        return [sys.executable, str(spark_apps_dir() / app), *sub.app_args]
    over = dataclasses.replace(sub, conf={**sub.conf, **(conf or {})})
    jars = spark_jars(reads_platform_topics(sub.app_args))
    return ["spark-submit", *over.arguments(str(spark_apps_dir() / app), jars, spark_py_files())]


def run(
    *,
    run_id: str | list[str] | None = None,
    audit=None,
    reconciliation_id: str | None = None,
    window_ends: list[str] | None = None,
    master: str | None = None,
    env: dict | None = None,
    conf: dict | None = None,
    timeout: float = 3600,
    dedup_copy: str | bool = catalog.DEFAULT_DEDUP_COPY,
    spark_conn_id: str = SPARK_CONN_ID,
    on_result: Callable[[dict], None] | None = None,
) -> Reconciled:
    """Platform runs by id (one application for all), one run of an audit (an audits.Audit), or
    windows of a continuous audit (one application for all, in order): the audit's Kafka, outbox
    and sink connections are resolved here and handed over by environment. `on_result` gets each
    summary (a run's at one isolation level, or a window's) as the application prints it."""
    if (run_id is None) == (audit is None):
        raise ValueError("give exactly one of run_id or audit")
    if audit is not None:
        from delivery_semantics.audit import audits

        args = ["--audit", str(audit.path)]
        if window_ends:
            args += [a for end in window_ends for a in ("--window-end", end)]
        else:
            args += ["--reconciliation-id", reconciliation_id or audits.reconciliation_id(audit)]
        app_env = spark_application_env(
            kafka_conn_id=audit.kafka_conn_id, source_conn_id=audit.outbox_conn_id, sink_conn_id=audit.sink_conn_id
        )
    else:
        args = reconcile_args([run_id] if isinstance(run_id, str) else list(run_id), dedup_copy)
        app_env = spark_application_env()
    app_env = {**app_env, **(env or {})}
    sub = submission(args, app_env, master, audit.spark_conf if audit is not None else None, spark_conn_id)
    cmd = command_of(sub, conf)
    with spark_clusters.submitted(sub):
        return _run_watched(cmd, {**os.environ, **sub.process_env, **sub.plain_env}, timeout, on_result)


def run_connect(application: str, sub: spark_clusters.Submission, timeout: float, log) -> Reconciled:
    """A Spark Connect application as an Airflow task runs it: a Python process with the
    submission's environment, its output into the task's log."""
    done = _run_watched([sys.executable, application, *sub.app_args], {**os.environ, **sub.process_env}, timeout, None)
    for line in (done.stdout + done.stderr).splitlines():
        log.info("%s", line)
    return done


def _run_watched(cmd: list[str], env: dict, timeout: float, on_result) -> Reconciled:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stderr: list[str] = []
    reader = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    reader.start()
    timed_out = threading.Event()

    def expire() -> None:
        timed_out.set()
        proc.kill()

    timer = threading.Timer(timeout, expire)
    timer.start()
    stdout, summaries = [], []
    try:
        for line in proc.stdout:
            stdout.append(line)
            if line.startswith(("RECONCILED ", "WINDOW ")):
                summaries.append(json.loads(line.split(" ", 1)[1]))
                if on_result is not None:
                    on_result(summaries[-1])
        proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(cmd, timeout)
    return Reconciled(proc.returncode, summaries, "".join(stdout), "".join(stderr))


def write_class_archive(timeout: float = 900) -> Path | None:
    """Local mode's driver class archive (plumbing/spark.py: spark_class_archive), unless it is there: a
    driver runs spark_apps/class_archive.py, a small reconciliation's kind of work on generated
    rows, and its JVM archives the classes it loaded as it exits. None when that failed (each
    application then starts without it)."""
    archive = spark_class_archive()
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.part")
    java_options = spark_conf("local[2]")["spark.driver.extraJavaOptions"]
    # -Xlog: the dump notes each class it leaves out (from a signed jar, or too old a class version).
    conf = {"spark.driver.extraJavaOptions": f"{java_options} -XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off"}
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable}
    try:
        done = subprocess.run(
            command([], "local[2]", conf, app="class_archive.py"),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode == 0 and partial.is_file():
            for stale in archive.parent.glob("driver-classes-*.jsa"):  # another JVM's or Spark's, 200 MB each
                stale.unlink(missing_ok=True)
            partial.replace(archive)
            return archive
        return None
    finally:
        partial.unlink(missing_ok=True)
