"""The checker: reconciles a Kafka topic against a ledger by event id, per isolation level.

    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/reconcile.py --run-id RUN [--run-id RUN2 ...] [--parallel-runs N] [--dedup-copy lakehouse|postgres|off]
    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/reconcile.py --audit audits/NAME.yaml --reconciliation-id ID
    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/reconcile.py --audit audits/NAME.yaml --window-end T [...]

Input is one of:
- a run id of the platform's own (topic and ledger from the `runs`, `ledger_events`,
  `ledger_batches` and `ledger_event_outcomes` tables);
- a consumer run id of the platform's own (`consumer_runs`), checked against its input run's
  ledger: what it wrote to the sink table (`sink_events`), or, for the transactional copier, its
  output topic;
- an audit of a team's own topic and outbox table (audits/NAME.yaml, see docs/RECONCILE.md);
  a continuous audit (one with `window:`) reconciles the windows ending at each --window-end, in
  order, with checker/incremental.py, and its sink table when it names one.

The topic is read as read_committed and read_uncommitted over an exact offset range. That range
is fixed at the first reconciliation and recorded, so a rerun reads the same records. A platform
run's ledger is rebuilt from its ranges of event numbers and its batch rows (spark.range), and
only the outcomes that were not clean are read a row each; an outbox is read with partitioned
JDBC reads. Every event id is classified by the functions of
checker/anomalies.py, one per kind: duplicate, lost_acked, lost_unacked (and within it
coordinator_aborted, a transaction the broker's coordinator aborted), unknown_landed, unexpected,
out_of_order, aborted_visible, malformed (a record with no usable event id) and, for a sink,
stale_overwrite (a record applied to its key's state after a newer version was).

Three tables are written: a summary (one row per run and isolation level), the discrepancies
(one row per affected event and kind) and an event-id-deduplicated copy of the data. Spark writes
them to staging tables, and one database transaction merges them, so a rerun leaves every row as
the first run did. The deduplicated copy goes to the lakehouse (a Delta table partitioned by
reconciliation, the default), to PostgreSQL with --dedup-copy postgres, or nowhere with
--dedup-copy off (checker/dedup_copy.py). Nothing is collected to the driver except the few summary rows.

Everything else comes by environment, made at submit time from Airflow connections and never on
the command line: the results database SEMANTICS_JDBC_URL / _USER / _PASSWORD, an audit's outbox
database SEMANTICS_SOURCE_JDBC_*, and Kafka SEMANTICS_KAFKA_CONFIG / SEMANTICS_KAFKA_SPARK_OPTIONS.
Exit codes: 0 done, 2 bad input or unreachable endpoint, 1 other failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from pyspark.sql import SparkSession

# In client mode the driver runs beside the package's folders, and the --py-files zip
# (plumbing/spark.py: spark_py_files) is for the executors: the folders come first. In cluster mode
# (YARN, Kubernetes) the zip is all the driver has.
_ZIPPED = [p for p in sys.path if os.path.basename(p).startswith("semantics-py-")]
_FOLDERS = [p for p in sys.path if p not in _ZIPPED]
if any(os.path.isdir(os.path.join(p or ".", "delivery_semantics")) for p in _FOLDERS):
    sys.path[:] = _FOLDERS + _ZIPPED

from checker import cache, dedup_copy, formats  # noqa: E402 (after the path is set)
from checker.driver import reconcile  # noqa: E402
from checker.incremental import reconcile_window  # noqa: E402
from checker.sources import InputError, Jdbc, Kafka, audit_source, platform_run_source  # noqa: E402
from delivery_semantics import catalog  # noqa: E402
from delivery_semantics.audit import audits, schemas, stores  # noqa: E402
from delivery_semantics.plumbing import kafka_retry, spark_clusters  # noqa: E402

# A summary's line on stdout: what the results file (reporting/results_file.py) is made of.
PRINTED = (
    "reconciliation_id",
    "audit",
    "topic",
    "judged_as",
    "scenario",
    "isolation",
    "records_read",
    "ledger_events",
    "ledger_acked",
    "distinct_events",
    "delivered_once",
    "duplicate_copies",
    *catalog.summary_columns(),
    "promise",
    "verdict",
    "broken_by",
    "expectation",
    "meets_expectation",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="reconcile a Kafka topic against a ledger by event id")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--run-id", action="append", help="a platform run (repeatable: one application, many runs)")
    g.add_argument("--audit", help="an audit file, audits/NAME.yaml")
    ap.add_argument("--reconciliation-id", help="with --audit: the id of this audit run")
    ap.add_argument("--window-end", action="append", help="with a continuous audit: a window's end (repeatable)")
    ap.add_argument(
        "--dedup-copy",
        choices=dedup_copy.STORES,
        default="lakehouse",
        help="where the deduplicated copy of the data goes (checker/dedup_copy.py); an audit's dedup_copy: wins",
    )
    ap.add_argument("--no-dedup-copy", dest="dedup_copy", action="store_const", const="off", help="--dedup-copy off")
    ap.add_argument(
        "--parallel-runs",
        type=_positive,
        default=1,
        help="platform runs reconciled side by side (threads of one application)",
    )
    args = ap.parse_args(argv)
    spark_clusters.load_application_env()  # YARN's cluster mode: the secrets shipped beside the application
    if args.audit and not (args.reconciliation_id or args.window_end):
        ap.error("--audit needs --reconciliation-id, or --window-end for a continuous audit")
    name = f"audit-{args.reconciliation_id or args.window_end[0]}" if args.audit else f"reconcile-{args.run_id[0]}"
    # Spark Connect (plumbing/spark_clusters.py): the server is the driver; this process sends plans.
    remote = os.environ.get(spark_clusters.CONNECT_REMOTE)
    builder = SparkSession.builder.appName(name)
    if remote:
        builder = builder.remote(remote)
    audit = None
    if args.audit:
        try:
            audit = audits.load(args.audit)
        except audits.AuditError as e:
            print(f"reconcile: {e}", file=sys.stderr)
            return 2
    if audit is not None and "kafka_retry_seconds" in audit.spec:
        # One knob for the driver's Kafka calls and Spark's Kafka source (kafka_retry.bound_seconds).
        os.environ["SEMANTICS_KAFKA_RETRY_SECONDS"] = str(audit.spec["kafka_retry_seconds"])
    try:
        copy = dedup_copy.DedupCopy.choose(args.dedup_copy, audit.dedup_copy if audit else None)
    except ValueError as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return 2
    # What the stores need of the session before it starts (Delta's extension); through Connect the
    # session's own settings, the server's static ones being the server's.
    session = {**copy.session_conf, **(stores.session_conf(audit) if audit else {})}
    if remote:
        given = json.loads(os.environ.get(spark_clusters.CONNECT_SESSION_CONF) or "{}")
        session = {k: v for k, v in {**given, **session}.items() if spark_clusters.session_setting(k)}
    for key, value in session.items():
        builder = builder.config(key, value)
    # A cluster's spark.authenticate secret comes by environment (plumbing/spark.py: spark_auth_env): a driver
    # at a standalone master takes it only as a setting, given here rather than on the command line.
    if os.environ.get("_SPARK_AUTH_SECRET"):
        builder = builder.config("spark.authenticate.secret", os.environ["_SPARK_AUTH_SECRET"])
    spark = builder.getOrCreate()
    if remote:  # the server's Python workers import the platform from the session's artifacts
        spark.addArtifacts(os.environ[spark_clusters.CONNECT_PY_FILES], pyfile=True)
    else:
        spark.sparkContext.setLogLevel("WARN")
    try:
        jdbc, kafka = Jdbc(spark), Kafka.from_env()
        if args.audit:
            outbox = stores.for_section(audit, "outbox")
            if args.window_end:
                return _windows(spark, jdbc, kafka, audit, args.window_end, outbox)
            jobs = [(audit_source(audit, args.reconciliation_id, kafka), outbox)]
        else:
            jobs = [(platform_run_source(jdbc, rid, kafka), None) for rid in args.run_id]

        def one(job) -> list[dict]:
            def attempt() -> list[dict]:
                with cache.scope():  # one run's cached reads are not the next one's
                    return reconcile(spark, jdbc, *job, copy=copy)

            return _riding_over_the_database(jdbc, job[0].reconciliation_id, attempt)

        with ThreadPoolExecutor(args.parallel_runs) as pool:
            futures = [pool.submit(one, job) for job in jobs]
            try:
                for done in as_completed(futures):
                    for s in done.result():
                        printed = {k: s[k] for k in PRINTED}
                        if audit is not None:
                            printed["mapping_suspect"] = _mapping_suspect(audit, s)
                        print("RECONCILED " + json.dumps(printed), flush=True)
            except BaseException:
                for f in futures:  # the first failure ends the application, as it would one run at a time
                    f.cancel()
                raise
        return 0
    except (InputError, stores.StoreError, audits.AuditError) as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return kafka_retry.EXIT_BAD_INPUT
    except kafka_retry.TransientError as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return kafka_retry.EXIT_TRANSIENT
    finally:
        spark.stop()


def _riding_over_the_database(jdbc: Jdbc, what: str, attempt):
    """A reconciliation or window read and written again when the results database restarts under
    it (its merge is one transaction: the second attempt leaves what the first would have); past
    the bound, exit 75 for Airflow's retry."""
    return kafka_retry.riding_over(attempt, jdbc.gone, f"results database: {what}", "the database restarting")


def _mapping_suspect(audit, s: dict) -> str | None:
    """The file's mapping said plainly when no record carries an id where it says (stderr: the task log)."""
    line = audits.mapping_suspect(audit, s.get("records_read"), s.get("malformed"))
    if line:
        print(f"mapping_suspect: {line}", file=sys.stderr, flush=True)
    return line


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _windows(spark, jdbc, kafka, audit, ends: list[str], outbox) -> int:
    if not audit.windowed:
        raise InputError(f"{audit.path}: --window-end is for a continuous audit, and this one has no window")
    try:
        ends_at = sorted(audits.window_end(e) for e in ends)
    except audits.AuditError as e:
        raise InputError(str(e)) from None
    sink = stores.for_section(audit, "sink") if audit.sink else None
    record_format = formats.RecordFormat.of(audit.record, schemas.load(audit))
    for end in ends_at:
        src = audit_source(audit, audits.window_id(audit, end), kafka, record_format)
        started = time.monotonic()
        timings: dict = {}

        def attempt(src=src, end=end, timings=timings) -> dict:
            spark.catalog.clearCache()  # an attempt the database cut short left its reads cached
            return reconcile_window(spark, jdbc, src, audit, end, outbox, sink, timings)

        row = _riding_over_the_database(jdbc, src.reconciliation_id, attempt)
        spark.catalog.clearCache()
        suspect = _mapping_suspect(audit, row)
        print(
            "WINDOW "
            + json.dumps(
                {
                    **row,
                    "mapping_suspect": suspect,
                    "elapsed_s": round(time.monotonic() - started, 2),
                    "phases": timings,
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
