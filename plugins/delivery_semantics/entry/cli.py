"""The command line: `local/semantics COMMAND ...` runs `python -m delivery_semantics.entry.cli COMMAND ...`.

    load run --mode idempotent --messages 100000 [--scenario lost_ack] ...
    load resume --run-id RUN [--producer P]
    consumer_workload run --strategy process_then_commit --source-run RUN [--scenario consumer_crash] [--set KEY=VALUE]
    consumer_workload resume --consumer-run-id CRUN
    reconcile --run-id RUN [--run-id RUN2 ...] [--dedup-copy lakehouse|postgres|off] | --mapping FILE
    audit run NAME|FILE [--reconciliation-id ID]   (audits/NAME.yaml; see docs/RECONCILE.md)
    audit run NAME|FILE --window-end T [--window-end T2 ...]   (a continuous audit's windows, in order)
    audit validate [NAME|FILE ...] | audit list
    report [--runs R1,R2 | --matrix-run ID] [--html PATH]
    pipeline run --pipeline debezium_outbox [--scenario connect_worker_kill] [--events N] ...
    dedup show RECONCILIATION_ID [--limit N] | dedup sql "SELECT ... FROM dedup_events ..."
    dedup vacuum [--retain-hours N] [--dry-run] [--lakehouse PATH]
    gc [--keep-days N] [--dry-run]   (the platform's own run topics unused for N days and their runs' records, with sizes)
    init [--pool-slots N | --no-pool]   (the results database's schema and Airflow's kafka_cluster pool; safe to run again)
    predict --mode NAME | --audit NAME | --pipeline NAME | --connector NAME | --set FAMILY.KEY=VALUE ... [--json] [--fail-on G]
    prove --mode NAME [--set producer.KEY=VALUE | topic.KEY=VALUE ...] | --pipeline NAME [--reuse] [--dry-run] [--json]

Bad input is refused with a one-line message and exit 2 before any side effect. `consumer_session`
is the consumer process a consumer run starts; it is not for people.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from delivery_semantics import catalog


def _overrides(pairs: list[str]) -> dict:
    from delivery_semantics.workload.load import LoadError

    out = {}
    for p in pairs:
        if "=" not in p:
            raise LoadError(f"override {p!r} is not key=value (the client's own key names)")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _load_parser(sub) -> None:
    ap = sub.add_parser("load", help="producer load under a delivery mode and a fault scenario")
    cmds = ap.add_subparsers(dest="action", required=True)
    run = cmds.add_parser("run", help="start a new run")
    run.add_argument("--mode", required=True, help=f"a preset ({', '.join(catalog.MODES)}) or a mode file's name")
    run.add_argument(
        "--client",
        help=f"the producer client: {' or '.join(catalog.CLIENTS)} (default: a mode file's own, or librdkafka)",
    )
    run.add_argument(
        "--scenario", default="none", help=f"fault during the load: {', '.join(catalog.PRODUCER_SCENARIOS)}"
    )
    run.add_argument("--messages", type=int, required=True)
    run.add_argument("--partitions", type=int, default=3)
    run.add_argument("--keys", type=int, default=16)
    run.add_argument("--payload-bytes", type=int, default=200)
    run.add_argument(
        "--record-format",
        default="text",
        help="text (the event's fields and payload as text) or avro (Confluent's wire format); librdkafka only",
    )
    run.add_argument("--rate", type=int, default=0, help="target records/s (0: unthrottled)")
    run.add_argument(
        "--txn-size",
        type=int,
        help=f"events per transaction (default {catalog.TXN_SIZE}, or messages / {catalog.TXNS_PER_RUN} when more)",
    )
    run.add_argument("--abort-ratio", type=float, default=0.0)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument(
        "--producers",
        type=int,
        default=catalog.DEFAULT_PRODUCERS,
        help=f"producer processes, each with its own slice of the events (default here: {catalog.DEFAULT_PRODUCERS})",
    )
    run.add_argument("--topic")
    run.add_argument("--run-id")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer setting over the mode's, in the client's key names (repeatable)",
    )
    res = cmds.add_parser("resume", help="run a producer session for an existing run: finish a crashed one")
    res.add_argument("--run-id", required=True)
    res.add_argument("--producer", type=int, help="only this producer's slice (default: every slice not completed)")
    res.add_argument(
        "--crash-before-commit-at",
        type=int,
        metavar="I",
        help="a transactional producer kills itself (SIGKILL) between the flush and the commit of the transaction "
        "holding its slice's I-th event: the producer_crash fault, as the scenario arms it",
    )
    for p in (run, res):
        p.add_argument("--no-progress", action="store_true")
        p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _load(args):
    from delivery_semantics.workload import load, scenarios

    if args.action == "resume":
        return load.resume(
            args.run_id,
            producer=args.producer,
            progress=not args.no_progress,
            crash_before_commit_at=args.crash_before_commit_at,
        )
    spec = load.LoadSpec(
        mode=args.mode,
        messages=args.messages,
        partitions=args.partitions,
        keys=args.keys,
        payload_bytes=args.payload_bytes,
        record_format=args.record_format,
        rate=args.rate,
        txn_size=args.txn_size,
        abort_ratio=args.abort_ratio,
        seed=args.seed,
        producers=args.producers,
        topic=args.topic,
        run_id=args.run_id,
        overrides=_overrides(args.overrides),
        client=args.client,
    )
    if args.scenario == "none":
        return load.start(spec, progress=not args.no_progress)
    return scenarios.run(spec, args.scenario)


def _consumer_parser(sub) -> None:
    ap = sub.add_parser("consumer_workload", help="a consumer run over a producer run's topic")
    cmds = ap.add_subparsers(dest="action", required=True)
    run = cmds.add_parser("run", help="start a consumer run")
    run.add_argument("--strategy", required=True, help=f"one of {', '.join(catalog.STRATEGIES)}")
    run.add_argument("--source-run", required=True, help="the completed producer run whose topic is consumed")
    run.add_argument("--scenario", default="none", help=f"one of {', '.join(catalog.CONSUMER_SCENARIOS)}")
    run.add_argument("--crashes", type=int, default=1, help="crashes under consumer_crash")
    run.add_argument(
        "--batch-size", type=int, default=500, help="records per poll, sink transaction or Kafka transaction"
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting the strategy reads over its default (auto.commit.interval.ms, max.poll.interval.ms, "
        "app.processing.ms)",
    )
    res = cmds.add_parser("resume", help="finish a consumer run whose driver died")
    res.add_argument("--consumer-run-id", required=True)
    for p in (run, res):
        p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _consumer(args):
    from delivery_semantics.workload import consumer_workload

    if args.action == "resume":
        return consumer_workload.resume(args.consumer_run_id)
    return consumer_workload.start(
        consumer_workload.ConsumerSpec(
            strategy=args.strategy,
            source_run_id=args.source_run,
            scenario=args.scenario,
            crashes=args.crashes,
            batch_size=args.batch_size,
            settings=dict(pair.partition("=")[::2] for pair in args.set),
        )
    )


def _session_parser(sub) -> None:
    ap = sub.add_parser("consumer_session")
    ap.add_argument("--consumer-run-id", required=True)
    ap.add_argument("--session", type=int, required=True)
    ap.add_argument("--crash-after", type=int)
    ap.add_argument("--timeout", type=float, default=900)


def _consumer_session(args) -> int:
    from confluent_kafka import KafkaException

    from delivery_semantics.workload import consumers

    try:
        result = consumers.run_session(args.consumer_run_id, args.session, args.crash_after, args.timeout)
    except (consumers.SessionError, KafkaException) as e:
        print(f"consumer_session: {e}", file=sys.stderr)
        return 1
    print("DONE " + json.dumps(result), flush=True)
    return 0


def _judging_options(ap) -> None:
    """What every command that judges takes: its results file and the kinds that fail it."""
    ap.add_argument("--output", metavar="FILE", help="write the results file here (JSON, docs/OPERATIONS.md)")
    ap.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="KIND",
        help="exit 1 when this kind is seen, even if no promise is broken (repeatable)",
    )


def _judging(args) -> tuple:
    """The results file's path and the --fail-on kinds, refused in one line before anything runs."""
    from delivery_semantics.reporting import results_file

    for kind in args.fail_on:
        results_file.kind_columns(kind)
    return results_file.check_output(args.output), args.fail_on


def _reconcile_parser(sub) -> None:
    ap = sub.add_parser("reconcile", help="the Spark checker, with spark-submit")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--run-id", action="append", help="a platform run (repeatable)")
    g.add_argument("--mapping", help="an audit file (YAML or JSON), run once: the same as `audit run FILE`")
    ap.add_argument("--reconciliation-id", help="with --mapping: the id of this run")
    ap.add_argument("--master", help="where Spark runs (default: the spark_default connection's master, or local[2])")
    ap.add_argument(
        "--dedup-copy",
        choices=list(catalog.DEDUP_COPY_STORES),
        help="with --run-id: where the deduplicated copy goes (default lakehouse; an audit names its own)",
    )
    ap.add_argument("--no-dedup-copy", dest="dedup_copy", action="store_const", const="off", help="--dedup-copy off")
    _judging_options(ap)


def _reconcile(args) -> int:
    from delivery_semantics.entry import spark_submit
    from delivery_semantics.reporting.results_file import ResultsFileError

    try:
        output, fail_on = _judging(args)
    except ResultsFileError as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return 2
    if args.mapping:
        if args.dedup_copy:
            print("reconcile: --dedup-copy is for --run-id; an audit names its own in dedup_copy:", file=sys.stderr)
            return 2
        return _audit_run(args.mapping, args.reconciliation_id, args.master, output=output, fail_on=fail_on)
    with _progress(len(args.run_id), "reconciled run") as on_result:
        result = spark_submit.run(
            run_id=args.run_id,
            master=args.master,
            dedup_copy=args.dedup_copy or catalog.DEFAULT_DEDUP_COPY,
            on_result=on_result,
        )
    return _reconciled(result, "reconcile", output, fail_on)


@contextlib.contextmanager
def _progress(total: int, what: str):
    """Progress of a Spark reconciliation on stderr (stdout keeps the JSON summaries): a step per
    run or window as the application prints its first summary."""
    from delivery_semantics.reporting.progress import Progress

    progress = Progress(total, what, sys.stderr)
    progress.note(f"spark-submit: {total} to reconcile")
    seen: set[str] = set()

    def on_result(s: dict) -> None:
        key = s.get("reconciliation_id") or s.get("window_end")
        if key not in seen:
            seen.add(key)
            if s.get("mapping_suspect"):
                progress.note(f"mapping_suspect: {s['mapping_suspect']}")
            broken = f" ({s['broken_by']})" if s.get("broken_by") else ""
            progress.step(f"{s.get('window_end') or key}: {s.get('verdict')}{broken}")

    try:
        yield on_result
    finally:
        progress.close()


def _reconciled(r, command: str, output=None, fail_on=()) -> int:
    """The summaries as JSON lines, the results file, and the exit code of their judgement."""
    from delivery_semantics.reporting import results_file

    if r.returncode != 0:
        print(r.error, file=sys.stderr)
        return r.returncode
    for s in r.summaries:
        print(json.dumps(s))
    doc = results_file.document(
        command, [results_file.result(s, results_file.subject_of(s)) for s in r.summaries], fail_on
    )
    results_file.write(output, doc)
    if doc["exit_code"]:
        seen = f"; --fail-on kinds seen: {', '.join(doc['fail_on_seen'])}" if doc["fail_on_seen"] else ""
        print(f"{command}: verdict {doc['verdict']}{seen} (exit 1)", file=sys.stderr)
    return doc["exit_code"]


def _audit_parser(sub) -> None:
    ap = sub.add_parser("audit", help="audits of a team's topic against its outbox: audits/NAME.yaml")
    cmds = ap.add_subparsers(dest="action", required=True)
    run = cmds.add_parser("run", help="check the endpoints, then reconcile once with Spark")
    run.add_argument("audit", help="a name (audits/NAME.yaml) or a path")
    run.add_argument("--reconciliation-id", help="default: audit:NAME:manual__<UTC time>")
    run.add_argument(
        "--window-end",
        action="append",
        help="a continuous audit: reconcile the window ending at this ISO 8601 time (repeatable, run in order)",
    )
    run.add_argument("--master", help="where Spark runs (default: the spark_default connection's master, or local[2])")
    _judging_options(run)
    val = cmds.add_parser("validate", help="validate audit files against the schema (default: every one)")
    val.add_argument("audits", nargs="*")
    val.add_argument("--endpoints", action="store_true", help="also check the connections, Kafka and the outbox")
    cmds.add_parser(
        "list", help="the audit files, their topic, what they are judged as (a mode or a pipeline) and schedule"
    )
    forget = cmds.add_parser(
        "forget",
        help="drop a continuous audit's state (sightings, pending records) and keep its results: "
        "for an audit that stopped running, or one to start over",
    )
    forget.add_argument("audit", help="the audit's name (its file may be gone)")


def _audit(args) -> int:
    from delivery_semantics.audit import audits
    from delivery_semantics.audit import preflight as audit_preflight

    if args.action == "run":
        from delivery_semantics.reporting.results_file import ResultsFileError

        try:
            output, fail_on = _judging(args)
        except ResultsFileError as e:
            print(f"audit: {e}", file=sys.stderr)
            return 2
        return _audit_run(args.audit, args.reconciliation_id, args.master, args.window_end, output, fail_on)
    if args.action == "forget":
        return _audit_forget(args.audit)
    if args.action == "list":
        for name, a in audits.discover():
            print(
                f"{name:24} invalid: {a}"
                if isinstance(a, Exception)
                else f"{name:24} {a.topic:24} {a.judged_as:18} {a.schedule or 'triggered only'}"
            )
        return 0
    failed = 0
    for item in args.audits or [a.path if not isinstance(a, Exception) else n for n, a in audits.discover()]:
        try:
            if args.endpoints:
                audit = audit_preflight.preflight(item)
            else:  # the writer schemas are read and checked too: everything but the endpoints
                from delivery_semantics.audit import schemas

                audit = audits.load(item)
                schemas.load(audit)
            print(f"{audit.path}: ok")
        except audits.AuditError as e:
            print(f"audit: {e}", file=sys.stderr)
            failed = 2
    return failed


def _audit_forget(name: str) -> int:
    import psycopg2

    from delivery_semantics.audit import audits
    from delivery_semantics.plumbing.endpoints import EndpointError, ledger_database

    try:
        with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c, c.cursor() as cur:
            dropped = audits.forget_state(cur, name)
            if not any(dropped.values()):
                c.rollback()
                print(f"audit: {name!r} has no state to forget (no sightings or pending records)", file=sys.stderr)
                return 2
    except (EndpointError, psycopg2.OperationalError) as e:
        print(f"audit: the platform's database: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    print(
        f"audit {name}: forgot {dropped['partitions']} sightings partitions, {dropped['default_sightings']} "
        f"older sightings and {dropped['pending']} pending records; its windows' results are kept. "
        "Its next window starts with no state."
    )
    return 0


def _audit_run(
    name_or_path: str, reconciliation_id: str | None, master: str, window_ends=None, output=None, fail_on=()
) -> int:
    """Refused with one line and exit 2 before Spark starts when the file or an endpoint is bad; 1 when
    a promise is broken."""
    from delivery_semantics.audit import audits
    from delivery_semantics.audit import preflight as audit_preflight
    from delivery_semantics.entry import spark_submit
    from delivery_semantics.plumbing.endpoints import EndpointError

    try:
        audit = audits.load(name_or_path)
        if window_ends and not audit.windowed:
            raise audits.AuditError(f"{audit.path}: --window-end is for a continuous audit (one with window:)")
        if audit.windowed and not window_ends:
            raise audits.AuditError(f"{audit.path}: a continuous audit runs by window: give --window-end")
        if window_ends and reconciliation_id:
            raise audits.AuditError("a window's reconciliation id is made from its end: give --window-end only")
        ends = [audits.window_end(e) for e in window_ends or ()]
        audit_preflight.preflight(audit, ends)
        rid = reconciliation_id or audits.reconciliation_id(audit)
        with _progress(len(ends) or 1, "audit window" if ends else "audit run") as on_result:
            result = spark_submit.run(
                audit=audit,
                reconciliation_id=rid,
                master=master,
                window_ends=[e.isoformat() for e in ends] or None,
                on_result=on_result,
            )
    except (audits.AuditError, EndpointError) as e:
        print(f"audit: {e}", file=sys.stderr)
        return 2
    return _reconciled(result, "audit run", output, fail_on)


def _pipeline_parser(sub) -> None:
    ap = sub.add_parser("pipeline", help="a connector pipeline (Debezium outbox to a JDBC sink) under a fault")
    cmds = ap.add_subparsers(dest="action", required=True)
    run = cmds.add_parser("run", help="load the outbox under the scenario, then audit outbox, topic and sink")
    run.add_argument("--pipeline", required=True, help=f"one of {', '.join(catalog.PIPELINES)}")
    run.add_argument("--scenario", default="none", help=f"one of {', '.join(catalog.PIPELINE_SCENARIOS)}")
    run.add_argument("--events", type=int, default=3000)
    run.add_argument("--txn-size", type=int, default=10, help="outbox rows per database transaction")
    run.add_argument("--rate", type=int, help="events a second (default: paced over 30 s under a fault)")
    run.add_argument("--master", help="where Spark runs (default: the spark_default connection's master, or local[2])")
    run.add_argument("--json", action="store_true")
    _judging_options(run)


def _pipeline(args) -> int:
    """Refused with one line and exit 2 before anything is made; 1 when the run failed or its promise
    is broken."""
    from delivery_semantics.entry import pipeline
    from delivery_semantics.plumbing.endpoints import EndpointError
    from delivery_semantics.reporting import results_file
    from delivery_semantics.workload import connector_pipeline

    spec = connector_pipeline.PipelineSpec(args.pipeline, args.scenario, args.events, args.txn_size, args.rate)
    try:
        output, fail_on = _judging(args)
        p, _, _ = connector_pipeline.validate(spec)
        connector_pipeline.preflight(p)
    except (ValueError, EndpointError) as e:  # ResultsFileError is a ValueError
        print(f"pipeline: {e}", file=sys.stderr)
        return 2
    try:
        row = pipeline.run(spec, master=args.master)
    except (ValueError, EndpointError, RuntimeError) as e:
        print(f"pipeline: {e}", file=sys.stderr)
        return 1
    print(json.dumps(row, default=str) if args.json else pipeline.summary_line(row))
    doc = results_file.document("pipeline run", [results_file.result(row, "pipeline")], fail_on)
    results_file.write(output, doc)
    return doc["exit_code"]


def _dedup_parser(sub) -> None:
    ap = sub.add_parser("dedup", help="the deduplicated copies (the lakehouse's Delta table, or PostgreSQL's)")
    cmds = ap.add_subparsers(dest="action", required=True)
    show = cmds.add_parser("show", help="one reconciliation's copy, a JSON line per event id")
    show.add_argument("reconciliation_id")
    show.add_argument("--limit", type=_count, help="at most this many rows")
    q = cmds.add_parser("sql", help="a DuckDB query on the lakehouse's table, named dedup_events")
    q.add_argument("statement")
    v = cmds.add_parser("vacuum", help="remove the lakehouse copy's files that reruns replaced")
    v.add_argument(
        "--retain-hours",
        type=_count,
        help="keep what was replaced less than this long ago (default: the table's retention, 7 days); "
        "with 0, a query reading an older version fails",
    )
    v.add_argument("--dry-run", action="store_true", help="list them, remove nothing")
    v.add_argument(
        "--lakehouse", help="the lakehouse folder or URI (default SEMANTICS_LAKEHOUSE; an audit's dedup_copy.path)"
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def _dedup(args) -> int:
    from delivery_semantics.reporting import dedup

    try:
        if args.action == "show":
            for row in dedup.rows(args.reconciliation_id, args.limit):
                value = row.get("value")
                row["value"] = bytes(value).decode("utf-8", "backslashreplace") if value is not None else None
                print(json.dumps(row, default=str))
            return 0
        if args.action == "vacuum":
            return _dedup_vacuum(args)
        names, rows = dedup.sql(args.statement)
    except dedup.NoCopy as e:
        print(f"dedup: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # DuckDB's and deltalake's own errors: one line, the query's fault
        print(f"dedup: {type(e).__name__}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print("\t".join(names))
    for r in rows:
        print("\t".join("" if v is None else str(v) for v in r))
    return 0


def _dedup_vacuum(args) -> int:
    from delivery_semantics.reporting import dedup

    location = catalog.dedup_copy_table(args.lakehouse) if args.lakehouse else None
    files = dedup.vacuum(args.retain_hours, args.dry_run, location)
    for f in files:
        print(f)
    kept = "the table's retention" if args.retain_hours is None else f"{args.retain_hours} hours"
    done = "to remove (dry run)" if args.dry_run else "removed"
    print(f"dedup: {len(files)} files replaced longer ago than {kept}: {done}", file=sys.stderr)
    return 0


def _gc_parser(sub) -> None:
    ap = sub.add_parser(
        "gc", help="delete the platform's own run topics unused for the retention and their runs' records, with sizes"
    )
    ap.add_argument(
        "--keep-days",
        type=_count,
        help="keep a topic this many days after its last use: made, loaded or reconciled "
        "(default SEMANTICS_RETENTION_DAYS, else 7)",
    )
    ap.add_argument("--dry-run", action="store_true", help="list them with their sizes, delete nothing")


def _gc(args) -> int:
    from delivery_semantics.history import schema
    from delivery_semantics.plumbing import endpoints
    from delivery_semantics.reporting import retention

    try:
        days = retention.retention_days(args.keep_days)
        db, kafka_conf = endpoints.ledger_database(), endpoints.kafka_config()
        schema.migrate(db)  # retired_runs, on a database a release before made
        doomed = retention.expired(db, kafka_conf, days)
        held = retention.held_runs(db, [e.topic for e in doomed])
    except (retention.RetentionError, endpoints.EndpointError) as e:
        print(f"gc: {e}", file=sys.stderr)
        return 2
    human = retention.human
    for e in doomed:
        print(f"{e.topic}\t{e.owner}\tlast used {e.last_used_at:%Y-%m-%d %H:%M}\t{human(e.bytes)}")
    for r in held:
        print(
            f"records of {r.side} run {r.run_id}\t{human(r.database_bytes)} in the database\t"
            f"{human(r.lakehouse_bytes)} in the lakehouse"
        )
    total = human(sum(e.bytes or 0 for e in doomed))
    unmeasured = sum(e.bytes is None for e in doomed)
    note = f" ({unmeasured} not measured)" if unmeasured else ""
    in_db = human(sum(r.database_bytes for r in held))
    in_lake = sum(r.lakehouse_bytes for r in held)
    records = f"{len(held)} runs' records, {in_db} in the database and {human(in_lake)} in the lakehouse"
    if args.dry_run:
        print(
            f"gc: {len(doomed)} topics unused for over {days} days, {total}{note}; {records}: to delete (dry run)",
            file=sys.stderr,
        )
        return 0
    refused = retention.retire(db, kafka_conf, doomed) if doomed else []
    held = retention.held_runs(db)  # the runs whose topics are gone now (a refused topic's are kept)
    refused += retention.retire_runs(db, held) if held else []
    for line in refused:
        print(f"gc: not deleted: {line}", file=sys.stderr)
    print(
        f"gc: {len(doomed)} topics unused for over {days} days, {total}{note}; {records}: deleted"
        + (f" but for {len(refused)}" if refused else ""),
        file=sys.stderr,
    )
    return 1 if refused else 0


def _init_parser(sub) -> None:
    from delivery_semantics import catalog

    ap = sub.add_parser(
        "init", help="prepare a deployment: the results database's schema and Airflow's pool (safe to run again)"
    )
    ap.add_argument(
        "--pool-slots", type=_count, default=catalog.CLUSTER_POOL_SLOTS, help="the kafka_cluster pool's slots"
    )
    ap.add_argument("--no-pool", action="store_true", help="the schema only: the pool is made elsewhere")


def _init(args) -> int:
    import psycopg2

    from delivery_semantics.entry import deploy
    from delivery_semantics.plumbing.endpoints import EndpointError

    try:
        applied = deploy.init(None if args.no_pool else args.pool_slots)
    except (EndpointError, psycopg2.OperationalError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"init: the results database: {first}", file=sys.stderr)
        return 2
    except deploy.DeployError as e:
        print(f"init: {e}", file=sys.stderr)
        return 2
    print(f"init: schema {'migrated: ' + ', '.join(applied) if applied else 'current'}")
    if not args.no_pool:
        print(f"init: pool kafka_cluster, {args.pool_slots} slots")
    return 0


def _predict_parser(sub) -> None:
    ap = sub.add_parser(
        "predict", help="read settings, say which guarantee each breaks under which fault (the rule catalog)"
    )
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--mode", help="a preset or a mode file (modes/NAME.yaml): its producer on the platform's topic")
    what.add_argument("--audit", help="an audit (audits/NAME.yaml): its topic's and brokers' configuration, read live")
    what.add_argument("--pipeline", help="a connector pipeline of the catalog: its source and sink connectors")
    what.add_argument(
        "--connector", help="a running connector: the settings the rules read, through Connect's REST API"
    )
    ap.add_argument("--connect", default="kafka_connect", help="with --connector: its Connect cluster's connection id")
    ap.add_argument(
        "--kafka",
        metavar="CONN_ID",
        help="a Kafka connection: its brokers' configuration and the cluster's feature levels, read live (each "
        "value printed with where it came from); with --topic, that topic's configuration too",
    )
    ap.add_argument("--topic", help="with --kafka: the topic whose configuration to read")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FAMILY.KEY=VALUE",
        help="a setting of producer, topic, broker, consumer or connector, added to or over the above "
        "(app.commit=before_process|after_process|transactional, app.dedup, app.processing.ms for what a "
        "consumer does; app.resends_failed for a producer that sends again what failed)",
    )
    ap.add_argument("--client", help="the producer's client: librdkafka (default) or java")
    ap.add_argument("--json", action="store_true", help="one JSON object per finding")
    ap.add_argument("--fail-on", action="append", default=[], metavar="GUARANTEE", help="exit 1 if one breaks it")


def _predict(args) -> int:
    from delivery_semantics import rule_catalog
    from delivery_semantics.clients import known_keys
    from delivery_semantics.plumbing import endpoints, topics

    try:
        given: dict[str, dict] = {}
        sources: dict[str, str] = {}
        client = args.client
        if args.topic and not args.kafka:
            raise rule_catalog.RuleError("--topic is read through a Kafka connection: give --kafka CONN_ID")
        if args.mode:
            given, client, sources = rule_catalog.of_mode(args.mode, client)
        if args.audit or args.kafka:
            from delivery_semantics.audit import audits
            from delivery_semantics.audit import preflight as audit_preflight
        if args.audit:
            audit = audits.load(args.audit)
            given, sources = audit_preflight.given_settings(audit, endpoints.kafka_config(audit.kafka_conn_id))
        if args.kafka:
            live, read = audit_preflight.cluster_settings(endpoints.kafka_config(args.kafka), args.topic)
            given = {**live, **{f: {**live.get(f, {}), **c} for f, c in given.items()}}
            sources = {**read, **sources}
        if args.connector:
            from delivery_semantics.plumbing.connect import ConnectCluster

            given = {"connector": ConnectCluster(args.connect).settings_for_rules(args.connector)}
        for pair in args.set:
            name, sep, value = pair.partition("=")
            family, dot, key = name.partition(".")
            if not sep or not dot or not key:
                raise rule_catalog.RuleError(f"--set {pair[:80]!r} is not FAMILY.KEY=VALUE")
            try:  # a misspelt key read as unset would give the findings of its default
                key, value = known_keys.setting(
                    family, key, value, client or catalog.DEFAULT_CLIENT, rule_catalog.READS
                )
            except known_keys.SettingRefused as e:
                raise rule_catalog.RuleError(f"--set {e}") from None
            given.setdefault(family, {})[key] = value
            sources.pop(f"{family}.{key}", None)  # set here: no longer what the cluster said
        if args.set and (why := known_keys.connector_refusal(given.get("connector") or {})):
            raise rule_catalog.RuleError(f"--set {why}")  # once the class is known: a source's keys are not a sink's
        unknown = [g for g in args.fail_on if g not in rule_catalog.GUARANTEES]
        if unknown:
            raise rule_catalog.RuleError(f"--fail-on {unknown[0]!r}: choose from {', '.join(rule_catalog.GUARANTEES)}")
        if args.pipeline:
            found = [p for role in rule_catalog.of_pipeline(args.pipeline).values() for p in rule_catalog.predict(role)]
        elif not given:
            raise rule_catalog.RuleError("nothing to read: give --mode, --audit, --pipeline, --connector or --set")
        else:
            found = rule_catalog.predict(given, client or catalog.DEFAULT_CLIENT, sources)
    except (
        rule_catalog.RuleError,
        catalog.CatalogError,
        catalog.ModeError,
        topics.TopicError,
        endpoints.EndpointError,
        ConnectionError,
    ) as e:
        print(f"predict: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the cluster did not answer, an audit file that does not load: bad input
        print(f"predict: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
        return 2
    for p in found:
        if args.json:
            r = p.rule
            row = {"rule": r.name, "family": r.family, "settings": p.settings, "sources": p.sources}
            row |= {"guarantee": r.guarantee}
            row |= {"scenarios": list(r.scenarios), "kind": r.kind, "reason": r.reason, "reference": r.reference}
            print(json.dumps(row))
        else:
            print(p.line())
    if args.kafka or args.audit:  # what the cluster said, whether or not a rule fired on it
        used = sorted(rule_catalog.READS & set(sources))
        facts = [f"{ref}={given[ref.split('.', 1)[0]][ref.split('.', 1)[1]]} ({sources[ref]})" for ref in used]
        features = [
            f"cluster.{k}={v}" for k, v in sorted((given.get("cluster") or {}).items()) if f"cluster.{k}" not in used
        ]
        print(f"predict: read from the cluster: {', '.join(facts + features) or 'nothing'}", file=sys.stderr)
    print(f"predict: {len(found)} findings of {len(rule_catalog.RULES)} rules", file=sys.stderr)
    return 1 if any(p.rule.guarantee in args.fail_on for p in found) else 0


def _prove_parser(sub) -> None:
    ap = sub.add_parser(
        "prove", help="predict, then run the fewest matrix runs that can show each finding, and compare"
    )
    subject = ap.add_mutually_exclusive_group(required=True)
    subject.add_argument("--mode", help="a preset or a mode file (modes/NAME.yaml)")
    subject.add_argument("--pipeline", help="a connector pipeline: its connectors' findings")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FAMILY.KEY=VALUE",
        help="producer.KEY=VALUE over the mode's settings, consumer.KEY=VALUE for its readers, topic.KEY=VALUE for "
        "the runs' topic (each family's allowlist: docs/SECURITY.md)",
    )
    ap.add_argument("--client", help="the producer's client: librdkafka or java (default: the mode's)")
    ap.add_argument("--messages", type=int, default=15_000, help="events per run (default 15,000)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="read a finding from the newest judged run made the same way, where there is one; make the rest",
    )
    ap.add_argument(
        "--only-reuse",
        action="store_true",
        help="as --reuse, and make no run: a finding no judged run shows is listed as not put to one",
    )
    ap.add_argument("--dry-run", action="store_true", help="the findings and the runs planned, without running")
    ap.add_argument("--json", action="store_true", help="one JSON object per finding")


def _prove(args) -> int:
    from delivery_semantics.entry import prove
    from delivery_semantics.plumbing.endpoints import EndpointError
    from delivery_semantics.workload.load import LoadError

    try:
        req = prove.request(args.mode, args.set, args.client, pipeline=args.pipeline)
        if args.dry_run:
            planned, left = prove.plan(prove.predictions(req), req)
            outcomes = [prove.Outcome(p, pl.label) for pl in planned for p in pl.predictions] + left
        else:
            reuse = prove.ONLY if args.only_reuse else args.reuse
            outcomes = prove.prove(req, messages=args.messages, reuse=reuse)
    except (prove.ProveError, LoadError, catalog.CatalogError, EndpointError) as e:
        print(f"prove: {e}", file=sys.stderr)
        return 2
    except prove.CheckerFailed as e:
        print(f"prove: {e}", file=sys.stderr)
        return 1
    if args.json:
        for o in outcomes:
            print(json.dumps(o.row()))
    else:
        print(prove.table(outcomes))
    unconfirmed = [o for o in outcomes if o.confirmed is False]
    unproved = sum(o.confirmed is None for o in outcomes)
    runs = len({o.run_id for o in outcomes if o.run_id})
    print(
        f"prove: {len(outcomes)} findings, {runs} runs; "
        + (f"{len(unconfirmed)} not confirmed: a rule or the checker is wrong" if unconfirmed else "none refuted")
        + (f"; {unproved} not proved (the table says why)" if unproved and not args.dry_run else ""),
        file=sys.stderr,
    )
    return 1 if unconfirmed else 0


def _report_parser(sub) -> None:
    ap = sub.add_parser("report", help="the matrix as text, and an HTML report")
    ap.add_argument("--runs", help="comma-separated run ids (default: the latest run of every pair)")
    ap.add_argument("--matrix-run", help="the runs of one semantics_matrix DAG run (its Airflow run id)")
    ap.add_argument("--html", help="write the HTML report here")
    ap.add_argument("--json", action="store_true", help="the results file's document on stdout (it reports: exit 0)")
    ap.add_argument("--proofs", action="store_true", help="the newest proof of each subject: predicted beside observed")
    ap.add_argument(
        "--calibration",
        action="store_true",
        help="each rule beside its newest proof: the run, the count seen, when (Markdown, as in docs/CHECKER.md)",
    )
    ap.add_argument(
        "--expectations", action="store_true", help="what each subject promises and each fault is expected to do"
    )


def _report(args) -> int:
    from delivery_semantics.reporting import report

    if args.expectations:
        from delivery_semantics.matrix import expectations_markdown

        print(expectations_markdown(), end="")
        return 0
    if args.proofs:
        print(report.proof_text(report.proof_rows()))
        return 0
    if args.calibration:
        print(report.calibration_markdown(), end="")
        return 0
    run_ids = args.runs.split(",") if args.runs else None
    pipelines = report.pipeline_rows(run_ids)
    if args.matrix_run:
        run_ids = report.matrix_run_ids(args.matrix_run)
        pipelines = report.pipeline_rows(matrix_run=args.matrix_run)
        if not run_ids and not pipelines:
            print(f"report: no runs for matrix run {args.matrix_run!r}", file=sys.stderr)
            return 2
    rows = report.matrix_rows(run_ids) if run_ids or not (args.runs or args.matrix_run) else []
    if args.json:
        from delivery_semantics.reporting import results_file

        results = [results_file.result(r, "run") for r in rows]
        results += [results_file.result(p, "pipeline") for p in pipelines]
        print(json.dumps(results_file.document("report", results), indent=2, default=str))
        return 0
    if rows:
        print(report.matrix_text(rows))
    if pipelines:
        print("\nConnector pipelines\n" + report.pipeline_text(pipelines))
    if args.html:
        print(f"\nHTML report: {report.html_report(rows, Path(args.html), pipelines=pipelines)}")
    return 0


def _run_and_summarise(args, work) -> int:
    """The tail of `load` and `consumer_workload`: the summary line (or JSON), exit 0 when the run
    completed, 2 when the input was refused before anything was written."""
    from delivery_semantics.plumbing.endpoints import EndpointError

    try:
        result = work(args)
    except (ValueError, EndpointError) as e:  # LoadError, WorkloadError, CatalogError, a missing connection
        print(f"{args.command}: {e}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(result), default=str) if args.json else result.line())
    return 0 if result.status == "completed" else 1


class _Parser(argparse.ArgumentParser):
    """Bad arguments are refused as all bad input is: one line, exit 2 (argparse adds its usage;
    `--help` still shows it). Its subcommands' parsers are of this class too."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="semantics", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    for add in (
        _load_parser,
        _consumer_parser,
        _session_parser,
        _reconcile_parser,
        _audit_parser,
        _report_parser,
        _pipeline_parser,
        _dedup_parser,
        _gc_parser,
        _init_parser,
        _predict_parser,
        _prove_parser,
    ):
        add(sub)
    args = ap.parse_args(argv)
    if args.command == "load":
        return _run_and_summarise(args, _load)
    if args.command == "consumer_workload":
        return _run_and_summarise(args, _consumer)
    return {
        "consumer_session": _consumer_session,
        "reconcile": _reconcile,
        "audit": _audit,
        "report": _report,
        "pipeline": _pipeline,
        "dedup": _dedup,
        "gc": _gc,
        "init": _init,
        "predict": _predict,
        "prove": _prove,
    }[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
