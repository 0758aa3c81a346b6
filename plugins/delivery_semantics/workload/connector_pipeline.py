"""A connector pipeline (catalog.PIPELINES) under a fault scenario, as a workload: what its run
makes and drives, up to the point where it is judged.

1. its outbox table (the change-data-capture database), its topic and its sink table are made
   for the run, and its two connectors registered on the pipeline's Connect cluster: Debezium's
   PostgreSQL source with the outbox event router, and Debezium's JDBC sink appending each record
   to the sink table;
2. the load writes N events into the outbox in transactions of `txn_size`, at a rate; the
   committed outbox rows are the run's ledger. The scenario's timeline runs beside it;
3. the nemesis heals, the pipeline drains, the connectors, the replication slot and the
   publication go, and the run's throughput and end-to-end latency are measured;
4. the run is judged by what the caller gives (`judge`: entry/pipeline.py audits it with the
   checker, audit/pipeline_audit.py); without one it stays `loaded`.

This is the connector pipeline under test, not a team's own pipeline (which a team audits with an
audit file). Connection ids (`catalog.PIPELINE_CONNECTIONS`) are Airflow connections: Kafka, the
Connect cluster the pipeline names, the outbox's owner (the load; Debezium replicates as it) and
reader (the audit), and the sink's owner (the JDBC sink) and reader.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg2
import psycopg2.extras

from delivery_semantics import catalog
from delivery_semantics.catalog import CatalogError, Pipeline
from delivery_semantics.faults.nemesis import Nemesis, NemesisError, backend_from_env, wait_healthy
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.connect import ConnectCluster, ConnectError
from delivery_semantics.plumbing.endpoints import Database, EndpointError, database, kafka_config
from delivery_semantics.workload.generator import new_run_id
from delivery_semantics.workload.scenarios import Timeline

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
        return f"{catalog.PLATFORM_AUDIT_PREFIX}{self.run_id}"


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


# --------------------------------------------------------------------------- a run


@dataclass(frozen=True)
class Loaded:
    """A run once its load is done, the pipeline drained and its connectors gone: what its judge reads."""

    spec: PipelineSpec
    pipeline: Pipeline
    scenario: catalog.Scenario
    names: Names
    load_started: datetime
    load_ended: datetime
    definition: catalog.Definition  # what its row recorded when it was made


# What judges a loaded run and records its verdict in its `pipeline_runs` row.
Judge = Callable[[Ledger, Loaded], None]


def run(spec: PipelineSpec, *, nemesis: Nemesis | None = None, judge: Judge | None = None) -> dict:
    """A whole pipeline run, judged by `judge` when given; returns its pipeline_runs row. Bad input
    and unreachable endpoints are refused (PipelineError, EndpointError) before anything is made."""
    pipeline, scenario, spec = validate(spec)
    try:
        backend = nemesis.backend if nemesis else backend_from_env()
    except NemesisError as e:
        raise PipelineError(f"{scenario.name}: {e}") from None
    cluster, kafka_conf, outbox_db, sink_db = preflight(pipeline)
    names = Names(spec.run_id)
    nemesis = nemesis or Nemesis(kafka_conf, backend)
    ledger = Ledger()
    defined = pipeline.definition(scenario.name)
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
                "definition": defined.to_json(),
                "definition_hash": defined.digest,
            }
        )
        try:
            loaded = _load(
                spec, pipeline, scenario, defined, names, cluster, kafka_conf, outbox_db, sink_db, nemesis, ledger
            )
            if judge is None:
                ledger.update_pipeline_run(names.run_id, ended_at=now())
            else:
                judge(ledger, loaded)
        except BaseException as e:
            ledger.update_pipeline_run(names.run_id, status="failed", error=str(e)[:2000], ended_at=now())
            raise
        return ledger.get_pipeline_run(names.run_id)
    finally:
        ledger.close()


def now() -> datetime:
    return datetime.now(UTC)


def _load(spec, pipeline, scenario, defined, names, cluster, kafka_conf, outbox_db, sink_db, nemesis, ledger) -> Loaded:
    """The run up to its judging: made, loaded under the scenario's timeline, drained, its
    connectors gone, its latency measured and recorded."""
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
        load_started = now()
        try:
            load_outbox(spec, names, outbox_db, started)
        finally:
            load_ended = now()
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
    ledger.update_pipeline_run(names.run_id, outbox_rows=outbox_rows, **latency(names, outbox_db, sink_db))
    return Loaded(spec, pipeline, scenario, names, load_started, load_ended, defined)


def _no_task(connector: str):
    raise NemesisError(f"{connector} has no running task to fault")
