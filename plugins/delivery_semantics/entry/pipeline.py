"""A connector pipeline (catalog.PIPELINES) under a fault scenario, end to end:

1. its outbox table (the change-data-capture database), its topic and its sink table are made
   for the run, and its two connectors registered on the pipeline's Connect cluster: Debezium's
   PostgreSQL source with the outbox event router, and Debezium's JDBC sink appending each record
   to the sink table;
2. the load writes N events into the outbox in transactions of `txn_size`, at a rate; the
   committed outbox rows are the run's ledger. The scenario's timeline runs beside it;
3. the nemesis heals, the pipeline drains, the connectors, the replication slot and the
   publication go;
4. a continuous audit made for the run (var/pipelines/<audit>.yaml) checks outbox, topic and sink
   three ways in two windows (mid-load, and once everything is due), and the run's totals, its
   throughput and end-to-end latency, and its verdict land in `pipeline_runs`.

Connection ids (`catalog.PIPELINE_CONNECTIONS`) are Airflow connections: Kafka, the Connect cluster the pipeline
names, the outbox's owner (the load; Debezium replicates as it) and reader (the audit), and the
sink's owner (the JDBC sink) and reader.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg2
import psycopg2.extras

from delivery_semantics import catalog, modes
from delivery_semantics.audit.audits import PLATFORM_AUDIT_PREFIX, pipelines_dir
from delivery_semantics.catalog import CatalogError, Pipeline
from delivery_semantics.faults.nemesis import Nemesis, NemesisError, backend_from_env, wait_healthy
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.connect import ConnectCluster, ConnectError
from delivery_semantics.plumbing.endpoints import Database, EndpointError, database, kafka_config
from delivery_semantics.workload.generator import new_run_id
from delivery_semantics.workload.scenarios import Timeline

# The audit's grace: a row is due this long after it was written. The last window ends two graces
# after the load (end-to-end checks wait twice the grace), by when the pipeline has drained.
GRACE_SECONDS = 10
# The pipeline has drained when the sink holds every committed row, or nothing new arrived for this long.
SETTLE_SECONDS = 45
DRAIN_TIMEOUT = 300
KEYS = 100


class PipelineError(CatalogError):
    """A pipeline run that cannot start: one line, before anything is made."""


@dataclass(frozen=True)
class PipelineSpec:
    pipeline: str
    scenario: str = "none"
    events: int = 3000
    txn_size: int = 10
    rate: int | None = None  # events a second; None: paced over LOAD_SECONDS under a fault, else unpaced
    run_id: str | None = None
    airflow_run_id: str | None = None
    # False: measure throughput and latency only (bench/pipeline.py); the run stays `loaded`.
    audit: bool = True


@dataclass(frozen=True)
class Names:
    """What a run makes, all named from its id (a plain token: new_run_id)."""

    run_id: str

    @property
    def topic(self) -> str:
        return f"semantics-pipeline-{self.run_id}"

    @property
    def outbox(self) -> str:
        return f"outbox_{self.run_id}"

    @property
    def sink(self) -> str:
        return f"sink_{self.run_id}"

    @property
    def source_connector(self) -> str:
        return f"semantics-source-{self.run_id}"

    @property
    def sink_connector(self) -> str:
        return f"semantics-sink-{self.run_id}"

    @property
    def slot(self) -> str:
        """The replication slot and the publication: PostgreSQL names, lowercase."""
        return f"semantics_{self.run_id}".lower()

    @property
    def audit(self) -> str:
        return f"{PLATFORM_AUDIT_PREFIX}{self.run_id}"


# --------------------------------------------------------------------------- before anything runs


def validate(spec: PipelineSpec) -> tuple[Pipeline, catalog.Scenario, PipelineSpec]:
    """The pair and the numbers, checked before any endpoint is looked up; the spec with its run id
    and pace."""
    pipeline, scenario = catalog.check_pipeline_pair(spec.pipeline, spec.scenario)
    for name, value in (("events", spec.events), ("txn_size", spec.txn_size)):
        low, high = catalog.LIMITS["messages" if name == "events" else name]
        if not isinstance(value, int) or not low <= value <= high:
            raise PipelineError(f"{name} must be an integer from {low} to {high}, not {value!r}")
    if spec.rate is not None and (not isinstance(spec.rate, int) or spec.rate < 1):
        raise PipelineError(f"rate must be a positive number of events a second, not {spec.rate!r}")
    if spec.run_id is not None and not (spec.run_id.isascii() and spec.run_id.replace("_", "").isalnum()):
        raise PipelineError(f"run id {spec.run_id!r} must be letters, digits and _")
    rate = spec.rate or (max(1, int(spec.events / catalog.LOAD_SECONDS)) if scenario.paced else None)
    return pipeline, scenario, dataclasses.replace(spec, run_id=spec.run_id or new_run_id("p"), rate=rate)


def preflight(pipeline: Pipeline) -> tuple[ConnectCluster, dict, Database, Database]:
    """Every endpoint answers before anything is made: Connect (with both connector plugins),
    Kafka, the outbox and sink databases (as their writers). Raises EndpointError with one line."""
    cluster = ConnectCluster(pipeline.connect_conn_id)
    cluster.version()
    missing = {catalog.SOURCE_CONNECTOR, catalog.SINK_CONNECTOR} - set(cluster.plugins())
    if missing:
        raise ConnectError(f"Kafka Connect ({cluster.conn_id}) lacks the plugins {', '.join(sorted(missing))}")
    kafka_conf = kafka_config(catalog.PIPELINE_CONNECTIONS["kafka"])
    try:
        topics.check_reachable(kafka_conf)
    except ConnectionError as e:
        raise EndpointError(f"connection {catalog.PIPELINE_CONNECTIONS['kafka']}: {e}") from None
    dbs = []
    for role in ("outbox_writer", "sink_writer"):
        db = database(catalog.PIPELINE_CONNECTIONS[role])
        try:
            psycopg2.connect(**db.psycopg2_kwargs()).close()
        except psycopg2.Error as e:
            raise EndpointError(
                f"connection {catalog.PIPELINE_CONNECTIONS[role]}: {str(e).strip().splitlines()[0]}"
            ) from None
        dbs.append(db)
    return cluster, kafka_conf, dbs[0], dbs[1]


# --------------------------------------------------------------------------- the connectors


def source_config(pipeline: Pipeline, names: Names, outbox_db: Database, password: str) -> dict:
    """Debezium's PostgreSQL connector on the run's outbox table only (its own slot and a filtered
    publication), streaming without a snapshot, through the outbox event router into the run's
    topic: the row's `id` becomes the record's `id` header, `aggregateid` its key, the JSON
    payload its value (expanded, with a schema, for the JDBC sink). `password` is a reference to the
    database's password (ConnectCluster.secret_reference), never the password."""
    return {
        "connector.class": catalog.SOURCE_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": outbox_db.host,
        "database.port": str(outbox_db.port),
        "database.user": outbox_db.user,
        "database.password": password,
        "database.dbname": outbox_db.database,
        "topic.prefix": names.slot,
        "slot.name": names.slot,
        "publication.name": names.slot,
        "publication.autocreate.mode": "filtered",
        "table.include.list": f"public.{names.outbox}",
        "snapshot.mode": "no_data",
        "tombstones.on.delete": "false",
        "transforms": "outbox",
        "transforms.outbox.type": catalog.OUTBOX_ROUTER,
        "transforms.outbox.route.topic.replacement": names.topic,
        "transforms.outbox.table.expand.json.payload": "true",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        **pipeline.source_settings,
    }


def sink_config(pipeline: Pipeline, names: Names, sink_db: Database, password: str) -> dict:
    """Debezium's JDBC sink appending every record it applies to the run's sink table (no key:
    each apply is a row, so a record applied twice is seen twice). `password` as source_config's."""
    return {
        "connector.class": catalog.SINK_CONNECTOR,
        "tasks.max": "1",
        "topics": names.topic,
        "connection.url": sink_db.jdbc_url,
        "connection.username": sink_db.user,
        "connection.password": password,
        "insert.mode": catalog.SINK_INSERT_MODE,
        "primary.key.mode": "none",
        "schema.evolution": "none",
        "collection.name.format": names.sink,
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "consumer.override.auto.offset.reset": "earliest",
        # A killed worker's sink consumer leaves its group only when its session expires: the
        # default 45 s stalls the restarted task as long as the drain waits for news (measured:
        # 750 of 3,000 rows applied, then nothing).
        "consumer.override.session.timeout.ms": "10000",
        **pipeline.sink_settings,
    }


def source_transactional_id(pipeline: Pipeline, names: Names) -> str:
    """Kafka Connect's transactional.id of an exactly-once source task (KIP-618):
    <the workers' group.id>-<connector>-<task>; the Connect connection's extra names the group."""
    from delivery_semantics.plumbing.endpoints import get_connection

    group = get_connection(pipeline.connect_conn_id).extra.get("group.id")
    if not group:
        raise NemesisError(f"connection {pipeline.connect_conn_id!r} names no group.id in its extra")
    return f"{group}-{names.source_connector}-0"


def _sql(db: Database, statements: str, params=None) -> list:
    with psycopg2.connect(**db.psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(statements, params)
        return cur.fetchall() if cur.description else []


def create(names: Names, kafka_conf: dict, outbox_db: Database, sink_db: Database) -> None:
    _sql(
        outbox_db,
        f"CREATE TABLE {names.outbox} (id uuid PRIMARY KEY, aggregatetype text NOT NULL, "
        "aggregateid text NOT NULL, type text NOT NULL, payload jsonb NOT NULL, seq bigint NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    _sql(
        sink_db,
        f"CREATE TABLE {names.sink} (event_id text NOT NULL, seq bigint NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    )
    topics.ensure_topic(kafka_conf, names.topic)


def start_connectors(cluster: ConnectCluster, pipeline: Pipeline, names: Names, outbox_db, sink_db) -> None:
    for name, config in (
        (
            names.sink_connector,
            sink_config(pipeline, names, sink_db, cluster.secret_reference(names.sink_connector, sink_db.password)),
        ),
        (
            names.source_connector,
            source_config(
                pipeline, names, outbox_db, cluster.secret_reference(names.source_connector, outbox_db.password)
            ),
        ),
    ):
        errors = cluster.validate(config["connector.class"], {"name": name, **config})
        if errors:
            raise ConnectError(f"Kafka Connect refuses {name}: {'; '.join(errors)[:500]}")
        cluster.put(name, config)
    for name in (names.sink_connector, names.source_connector):
        cluster.wait_running(name)


def stop_connectors(cluster: ConnectCluster, names: Names, outbox_db: Database, timeout: float = 60) -> None:
    """The connectors go, then the slot (a slot nobody reads keeps WAL forever) and the publication."""
    for name in (names.source_connector, names.sink_connector):
        cluster.delete(name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            _sql(
                outbox_db,
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (names.slot,),
            )
            break
        except psycopg2.Error:  # still active until the task has stopped
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    _sql(outbox_db, f"DROP PUBLICATION IF EXISTS {names.slot}")


# --------------------------------------------------------------------------- the load


def event_uuid(run_id: str, n: int) -> str:
    """Event n's id: the same on every attempt, so a transaction retried after an unknown commit
    outcome inserts nothing twice."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"semantics:{run_id}:{n}"))


def load_outbox(spec: PipelineSpec, names: Names, db: Database, started: threading.Event, retry_for: float = 120):
    """N events in transactions of txn_size at the spec's rate. A transaction that fails (the
    database restarting) is retried on a new session with the same ids; ON CONFLICT makes a retry
    of one that did commit a no-op."""
    insert = (
        f"INSERT INTO {names.outbox} (id, aggregatetype, aggregateid, type, payload, seq) VALUES %s "
        "ON CONFLICT (id) DO NOTHING"
    )
    conn = None
    t0 = time.monotonic()
    try:
        for start in range(0, spec.events, spec.txn_size):
            if spec.rate:
                time.sleep(max(0.0, t0 + start / spec.rate - time.monotonic()))
            rows = [
                (
                    event_uuid(spec.run_id, n),
                    names.topic,
                    f"k{n % KEYS}",
                    "OrderEvent",
                    json.dumps({"event_id": event_uuid(spec.run_id, n), "seq": n}),
                    n,
                )
                for n in range(start, min(spec.events, start + spec.txn_size))
            ]
            deadline = time.monotonic() + retry_for
            while True:
                try:
                    if conn is None or conn.closed:
                        conn = psycopg2.connect(**db.psycopg2_kwargs())
                    with conn, conn.cursor() as cur:
                        psycopg2.extras.execute_values(cur, insert, rows)
                    break
                except (psycopg2.OperationalError, psycopg2.InterfaceError):  # the database went away
                    if time.monotonic() > deadline:
                        raise
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.5)
            started.set()
    finally:
        started.set()
        if conn is not None:
            conn.close()


def drain(names: Names, outbox_db: Database, sink_db: Database) -> tuple[int, int]:
    """Waits until the sink holds every committed outbox row, or until nothing new has arrived
    for SETTLE_SECONDS; returns (outbox rows, distinct events in the sink)."""
    outbox_rows = _sql(outbox_db, f"SELECT count(*) FROM {names.outbox}")[0][0]
    deadline, last, since = time.monotonic() + DRAIN_TIMEOUT, -1, time.monotonic()
    while True:
        applied = _sql(sink_db, f"SELECT count(DISTINCT event_id) FROM {names.sink}")[0][0]
        if applied >= outbox_rows or time.monotonic() > deadline:
            return outbox_rows, applied
        if applied != last:
            last, since = applied, time.monotonic()
        elif time.monotonic() - since > SETTLE_SECONDS:
            return outbox_rows, applied
        time.sleep(1)


def latency(names: Names, outbox_db: Database, sink_db: Database) -> dict:
    """End to end, outbox created_at to the first sink applied_at of each event: p50, p99, and the
    pipeline's throughput (rows over first write to last apply)."""
    created = dict(_sql(outbox_db, f"SELECT id::text, created_at FROM {names.outbox}"))
    applied = dict(_sql(sink_db, f"SELECT event_id, min(applied_at) FROM {names.sink} GROUP BY event_id"))
    lat = sorted((applied[e] - t).total_seconds() * 1000 for e, t in created.items() if e in applied)
    if not lat:
        return {"throughput_eps": None, "latency_p50_ms": None, "latency_p99_ms": None}
    span = (max(applied.values()) - min(created.values())).total_seconds()
    return {
        "throughput_eps": round(len(created) / span, 1) if span > 0 else None,
        "latency_p50_ms": round(lat[len(lat) // 2], 1),
        "latency_p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1),
    }


# --------------------------------------------------------------------------- the audit


def audit_spec(pipeline: Pipeline, scenario: str, names: Names) -> dict:
    return {
        "description": f"{pipeline.name} under {scenario}: run {names.run_id}",
        "topic": names.topic,
        "pipeline": pipeline.name,
        "transactional": pipeline.transactional,
        "connections": {
            "kafka": catalog.PIPELINE_CONNECTIONS["kafka"],
            "outbox": catalog.PIPELINE_CONNECTIONS["outbox"],
            "sink": catalog.PIPELINE_CONNECTIONS["sink"],
        },
        "record": {"event_id": {"header": "id"}, "key": {"record_key": True}},
        "outbox": {
            "table": f"public.{names.outbox}",
            "columns": {"event_id": "id", "key": "aggregateid", "publish_at": "created_at"},
        },
        "window": {"grace": f"{GRACE_SECONDS}s"},
        "sink": {"table": f"public.{names.sink}", "columns": {"event_id": "event_id", "applied_at": "applied_at"}},
    }


def write_audit(pipeline: Pipeline, scenario: str, names: Names) -> Path:
    path = pipelines_dir() / f"{names.audit}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# Made by the pipeline run {names.run_id}: its outbox, topic and sink, audited in windows.\n"
        + json.dumps(audit_spec(pipeline, scenario, names), indent=2)
        + "\n"
    )
    return path


def window_ends(load_started: datetime, load_ended: datetime) -> list[datetime]:
    """Mid-load, and two graces after the load (everything due, end to end too); one window when
    the load was too short to split."""
    last = (load_ended + timedelta(seconds=2 * GRACE_SECONDS + 1)).replace(microsecond=0)
    mid = (load_started + (load_ended - load_started) / 2).replace(microsecond=0)
    return [mid, last] if load_started < mid < last - timedelta(seconds=GRACE_SECONDS) else [last]


def totals(ledger: Ledger, pipeline: Pipeline, scenario: str, audit: str) -> dict:
    """The run's counts over its windows: a loss a later window found late is no loss."""
    with ledger.conn, ledger.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute(
            """SELECT count(*) AS windows, coalesce(sum(records_read), 0) AS records_read,
                      coalesce(sum(duplicate_events), 0) AS duplicate_events,
                      -- each stage's losses net of the late copies that resolved them
                      greatest(0, coalesce(sum(lost_acked), 0) - coalesce(sum(late), 0)) AS lost_acked,
                      coalesce(sum(late), 0) AS late,
                      coalesce(sum(sink_rows), 0) AS sink_rows, coalesce(sum(sink_duplicates), 0) AS sink_duplicates,
                      greatest(0, coalesce(sum(sink_lost), 0) - coalesce(sum(sink_late), 0)) AS sink_lost,
                      greatest(0, coalesce(sum(end_to_end_lost), 0) - coalesce(sum(end_to_end_late), 0))
                        AS end_to_end_lost,
                      -- a window counts the copies it read: the extra copies are over all windows
                      (SELECT coalesce(sum(copies), 0) - count(DISTINCT event_id) FROM audit_sightings
                        WHERE audit = %(a)s AND side = 'topic') AS duplicate_copies,
                      (SELECT coalesce(sum(end_offset - start_offset), 0) FROM audit_window_offsets
                        WHERE audit = %(a)s) AS offsets
               FROM audit_windows WHERE audit = %(a)s""",
            {"a": audit},
        )
        r = cur.fetchone()
    if not r["windows"]:
        raise PipelineError(f"audit {audit} recorded no window")
    judged = catalog.Counts.from_window(r)
    counts = {
        "records_read": r["records_read"],
        "duplicate_events": judged.of("duplicate"),
        "duplicate_copies": r["duplicate_copies"],
        "lost": judged.losses(),
        "late": r["late"],
        "sink_rows": r["sink_rows"],
        "sink_duplicates": judged.of("duplicate", catalog.TOPIC_SINK),
        "sink_lost": judged.losses(catalog.TOPIC_SINK),
        "end_to_end_lost": judged.losses(catalog.OUTBOX_SINK),
        "transaction_markers": r["offsets"] - r["records_read"],
    }
    if pipeline.transactional != (counts["transaction_markers"] > 0):
        raise PipelineError(
            f"the topic of {audit} has {counts['transaction_markers']} offsets without a record (transaction "
            f"markers), and {pipeline.name} "
            + (
                "writes transactions: its Connect cluster does not run exactly-once source support"
                if pipeline.transactional
                else "writes none: its Connect cluster runs exactly-once source support"
            )
            + f" ({pipeline.connect_conn_id} must name a cluster with {dict(pipeline.worker_settings)})"
        )
    verdict, broken = modes.verdict(pipeline.name, scenario, pipeline.isolation, judged)
    sink = catalog.get_strategy(catalog.PIPELINE_SINK_STRATEGY)
    sink_verdicts = {modes.verdict(sink.name, scenario, sink.isolation, judged, s)[0] for s in catalog.SINK_STAGES}
    return {
        **counts,
        "promise": pipeline.promise.text,
        "verdict": verdict,
        "broken_by": ",".join(broken) or None,
        "expectation": catalog.expectation_text(pipeline.name, scenario),
        "meets_expectation": catalog.meets_expectation(pipeline.name, scenario, judged),
        "sink_verdict": "broken" if "broken" in sink_verdicts else "kept",
    }


# --------------------------------------------------------------------------- a run


def run(spec: PipelineSpec, *, nemesis: Nemesis | None = None, master: str | None = None) -> dict:
    """A whole pipeline run; returns its pipeline_runs row. Bad input and unreachable endpoints
    are refused (PipelineError, EndpointError) before anything is made."""
    pipeline, scenario, spec = validate(spec)
    try:
        backend = nemesis.backend if nemesis else backend_from_env()
    except NemesisError as e:
        raise PipelineError(f"{scenario.name}: {e}") from None
    cluster, kafka_conf, outbox_db, sink_db = preflight(pipeline)
    names = Names(spec.run_id)
    nemesis = nemesis or Nemesis(kafka_conf, backend)
    ledger = Ledger()
    try:
        ledger.migrate()
        ledger.create_pipeline_run(
            {
                "run_id": names.run_id,
                "airflow_run_id": spec.airflow_run_id,
                "pipeline": pipeline.name,
                "scenario": scenario.name,
                "events": spec.events,
                "txn_size": spec.txn_size,
                "rate": spec.rate,
                "topic": names.topic,
                "outbox_table": names.outbox,
                "sink_table": names.sink,
                "audit": names.audit,
                "status": "running",
            }
        )
        try:
            row = _run(
                spec, pipeline, scenario, names, cluster, kafka_conf, outbox_db, sink_db, nemesis, ledger, master
            )
        except BaseException as e:
            ledger.update_pipeline_run(names.run_id, status="failed", error=str(e)[:2000], ended_at=_now())
            raise
        return row
    finally:
        ledger.close()


def _now() -> datetime:
    return datetime.now(UTC)


def _run(spec, pipeline, scenario, names, cluster, kafka_conf, outbox_db, sink_db, nemesis, ledger, master) -> dict:
    from delivery_semantics.audit import audits
    from delivery_semantics.entry import spark_submit

    wait_healthy(kafka_conf)
    create(names, kafka_conf, outbox_db, sink_db)
    try:
        start_connectors(cluster, pipeline, names, outbox_db, sink_db)
        resolvers = {
            "source_worker": lambda: [cluster.task_worker(names.source_connector) or _no_task(names.source_connector)],
            "sink_worker": lambda: [cluster.task_worker(names.sink_connector) or _no_task(names.sink_connector)],
            "outbox_db": lambda: [None],
            "topic": lambda: [names.topic],
        }
        if pipeline.transactional:
            tid = source_transactional_id(pipeline, names)
            resolvers["coordinator"] = lambda: [nemesis.coordinator_of(tid)]
        run_row = {"run_id": names.run_id, "topic": names.topic, "messages": spec.events, "producers": 1}
        timeline = Timeline(scenario.timeline, nemesis, run_row, None, resolvers=resolvers)
        nemesis.timeline.record("healthy_before", scenario=scenario.name)
        started, failure = threading.Event(), []

        def apply():
            try:
                timeline.apply(started)
            except BaseException as e:
                failure.append(e)

        t = threading.Thread(target=apply, name="nemesis", daemon=True)
        t.start()
        load_started = _now()
        try:
            load_outbox(spec, names, outbox_db, started)
        finally:
            load_ended = _now()
            t.join(timeout=600)
            try:
                nemesis.heal()
            finally:
                ledger.update_pipeline_run(
                    names.run_id,
                    status="loaded",
                    load_started_at=load_started,
                    load_ended_at=load_ended,
                    timeline={
                        "scenario": scenario.name,
                        "backend": nemesis.backend.name,
                        "events": nemesis.timeline.entries,
                    },
                )
        if failure:
            raise NemesisError(f"the nemesis timeline failed: {failure[0]}") from failure[0]
        for name in (names.source_connector, names.sink_connector):
            cluster.wait_running(name)  # moved, restarted or back: the drain needs them running
        outbox_rows, _ = drain(names, outbox_db, sink_db)
    finally:
        stop_connectors(cluster, names, outbox_db)
    measured = latency(names, outbox_db, sink_db)
    if not spec.audit:
        ledger.update_pipeline_run(names.run_id, ended_at=_now(), outbox_rows=outbox_rows, **measured)
        return ledger.get_pipeline_run(names.run_id)
    ends = window_ends(load_started, load_ended)
    time.sleep(max(0.0, (ends[-1] - _now()).total_seconds() + 1))
    audit = audits.load(write_audit(pipeline, scenario.name, names))
    result = spark_submit.run(audit=audit, window_ends=[e.isoformat() for e in ends], master=master)
    if result.returncode != 0:
        raise PipelineError(f"the audit of run {names.run_id} failed: {result.error}")
    fields = {
        "status": "reconciled",
        "ended_at": _now(),
        "outbox_rows": outbox_rows,
        **measured,
        **totals(ledger, pipeline, scenario.name, names.audit),
    }
    ledger.update_pipeline_run(names.run_id, **fields)
    # The run's audit never runs again: its totals are recorded, its state would only stay.
    with ledger.conn, ledger.conn.cursor() as cur:
        audits.forget_state(cur, names.audit)
    return ledger.get_pipeline_run(names.run_id)


def summary_line(row: dict) -> str:
    return (
        f"{row['run_id']} {row['pipeline']} x {row['scenario']}: {row['outbox_rows']} outbox rows, "
        f"{row['records_read']} records, duplicates {row['duplicate_events']}, lost {row['lost']}, "
        f"sink rows {row['sink_rows']} (duplicates {row['sink_duplicates']}, lost {row['sink_lost']}), "
        f"end-to-end lost {row['end_to_end_lost']}; {row['throughput_eps']} events/s, "
        f"p50 {row['latency_p50_ms']} ms, p99 {row['latency_p99_ms']} ms; verdict {row['verdict']}, "
        f"expected {row['expectation']}: {'as expected' if row['meets_expectation'] else 'NOT as expected'}"
    )


def _no_task(connector: str):
    raise NemesisError(f"{connector} has no running task to fault")
