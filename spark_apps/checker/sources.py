"""The checker's inputs: where the events are (a platform run, a consumer run, or a mapping for
a team's own topic and outbox), and how they are read: the topic over an exact offset range with
Spark's Kafka source, a sink table and the ledger with partitioned JDBC reads. Nothing here
classifies, and nothing is collected to the driver but a few bounds.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delivery_semantics import catalog
from delivery_semantics.catalog import ISOLATIONS, READ_COMMITTED


class InputError(Exception):
    """Bad input or an endpoint that cannot be reached: exit 2 with the message."""


# --------------------------------------------------------------------------- inputs


@dataclass
class Source:
    """Where the events are and how to read the event id, key, sequence and publish time."""

    reconciliation_id: str
    bootstrap_servers: str
    topic: str
    mode: str | None
    scenario: str
    event_id: dict  # {"header": name} or {"json": "$.path"}
    key: dict = field(default_factory=lambda: {"record_key": True})
    seq: dict | None = None
    publish_at: dict | None = None  # header/json holding epoch millis, or {"timestamp": true}
    kafka_options: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)
    sink: dict | None = None  # a consumer run's sink table instead of the topic
    # False: no transactional producer wrote the topic, so both isolation levels see the same
    # records and one read serves both. None: unknown, read both.
    transactional: bool | None = None
    judged_by_reader: bool = True  # False: the records are a derived copy (no dedup_events rows)

    @property
    def isolations(self) -> tuple[str, ...]:
        # A sink holds what a read_committed consumer wrote: there is no other isolation to read.
        return (READ_COMMITTED,) if self.sink else ISOLATIONS


def platform_source(run: dict, bootstrap: str) -> Source:
    return Source(
        reconciliation_id=run["run_id"],
        bootstrap_servers=bootstrap,
        topic=run["topic"],
        mode=run["mode"],
        scenario=run["scenario"],
        event_id={"header": "event_id"},
        seq={"header": "seq"},
        publish_at={"header": "publish_at"},
        transactional=catalog.get_mode(run["mode"]).transactional,
        ledger={"kind": "platform", "run_id": run["run_id"], "messages": int(run["messages"])},
    )


def consumer_source(crun: dict, input_run: dict, bootstrap: str) -> Source:
    if crun["status"] != "completed":
        raise InputError(f"consumer run {crun['consumer_run_id']} is {crun['status']}: reconcile it once it completed")
    copier = crun["output_topic"] is not None
    src = platform_source(input_run, bootstrap)
    src.reconciliation_id, src.mode, src.scenario = crun["consumer_run_id"], crun["strategy"], crun["scenario"]
    src.topic = crun["output_topic"] if copier else crun["input_topic"]
    src.judged_by_reader, src.transactional = False, copier
    if not copier:
        src.sink = {
            "consumer_run_id": crun["consumer_run_id"],
            "end_offsets": {int(p): int(o) for p, o in json.loads(crun["input_end_offsets"]).items()},
        }
    return src


def mapping_source(path: str, bootstrap_default: str | None) -> Source:
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"mapping {path}: {e}") from None
    for k in ("reconciliation_id", "topic", "event_id", "ledger"):
        if k not in m:
            raise InputError(f"mapping {path}: missing {k!r}")
    cols = m["ledger"].get("columns", {})
    if "event_id" not in cols or not ("table" in m["ledger"] or "query" in m["ledger"]):
        raise InputError(f"mapping {path}: ledger needs a table or query and columns.event_id")
    bootstrap = m.get("bootstrap_servers") or bootstrap_default
    if not bootstrap:
        raise InputError(
            "no bootstrap servers: set bootstrap_servers in the mapping or SEMANTICS_KAFKA_BOOTSTRAP_SERVERS"
        )
    return Source(
        m["reconciliation_id"],
        bootstrap,
        m["topic"],
        m.get("mode"),
        m.get("scenario", "external"),
        m["event_id"],
        m.get("key", {"record_key": True}),
        m.get("seq"),
        m.get("publish_at"),
        m.get("kafka_options", {}),
        {"kind": "mapped", **m["ledger"]},
        transactional=m.get("transactional"),
    )


# --------------------------------------------------------------------------- database


class Jdbc:
    def __init__(self, spark: SparkSession):
        try:
            self.url = os.environ["SEMANTICS_JDBC_URL"]
            self.user = os.environ["SEMANTICS_JDBC_USER"]
            self.password = os.environ["SEMANTICS_JDBC_PASSWORD"]
        except KeyError as e:
            raise InputError(f"{e.args[0]} is not set") from None
        self.spark = spark
        # reWriteBatchedInserts: the driver sends a batch as multi-row INSERTs, not one per row.
        self.props = {
            "user": self.user,
            "password": self.password,
            "driver": "org.postgresql.Driver",
            "reWriteBatchedInserts": "true",
        }

    def read(self, query: str, **partitioning) -> DataFrame:
        reader = (
            self.spark.read.format("jdbc").option("url", self.url).option("query", query)
            if not partitioning
            else self.spark.read.format("jdbc").option("url", self.url).option("dbtable", f"({query}) AS q")
        )
        for k, v in {**self.props, "fetchsize": "20000", **partitioning}.items():
            reader = reader.option(k, str(v))
        return reader.load()

    def write(self, df: DataFrame, table: str) -> None:
        (
            df.write.format("jdbc")
            .option("url", self.url)
            .option("dbtable", table)
            .option("batchsize", "20000")
            .option("truncate", "false")
            .options(**self.props)
            .mode("overwrite")
            .save()
        )

    def connection(self):
        jvm = self.spark._jvm
        # --jars puts the driver in Spark's class loader, which java.sql.DriverManager cannot see;
        # Spark's registry wraps it so that DriverManager can.
        jvm.org.apache.spark.sql.execution.datasources.jdbc.DriverRegistry.register("org.postgresql.Driver")
        props = jvm.java.util.Properties()
        props.setProperty("user", self.user)
        props.setProperty("password", self.password)
        try:
            return jvm.java.sql.DriverManager.getConnection(self.url, props)
        except Exception as e:
            raise InputError(f"the database at {self.url} cannot be reached: {_java_message(e)}") from None

    def scalar_rows(self, sql: str, params: list) -> list[list]:
        conn = self.connection()
        try:
            st = conn.prepareStatement(sql)
            for i, p in enumerate(params, 1):
                st.setObject(i, p)
            rs = st.executeQuery()
            meta = rs.getMetaData()
            rows = []
            while rs.next():
                rows.append([rs.getObject(i) for i in range(1, meta.getColumnCount() + 1)])
            return rows
        finally:
            conn.close()

    def execute_in_transaction(self, statements: list[tuple[str, list]]) -> None:
        conn = self.connection()
        try:
            conn.setAutoCommit(False)
            for sql, params in statements:
                st = conn.prepareStatement(sql)
                for i, p in enumerate(params, 1):
                    st.setObject(i, p)
                st.execute()
                st.close()
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        finally:
            conn.close()


def _java_message(e: Exception) -> str:
    text = str(e)
    for line in text.splitlines():
        if "Exception:" in line:
            return line.split("Exception:", 1)[1].strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------- offsets


def fixed_offsets(spark: SparkSession, jdbc: Jdbc, src: Source) -> tuple[dict, dict, bool]:
    """(start, end) offsets per partition: the ones recorded for this reconciliation, or the
    topic's current log start and end, recorded now. Returns (start, end, recorded_before)."""
    rows = jdbc.scalar_rows(
        'SELECT "partition", start_offset, end_offset FROM reconcile_offsets WHERE reconciliation_id = ? ORDER BY 1',
        [src.reconciliation_id],
    )
    if rows:
        return ({int(r[0]): int(r[1]) for r in rows}, {int(r[0]): int(r[2]) for r in rows}, True)
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": src.bootstrap_servers,
        "group.id": f"reconcile-offsets-{secrets.token_hex(4)}",
        "enable.auto.commit": False,
        "socket.timeout.ms": 10000,
        **{k: v for k, v in src.kafka_options.items() if not k.startswith("kafka.")},
    }
    c = Consumer(conf)
    try:
        md = c.list_topics(src.topic, timeout=15)
        t = md.topics.get(src.topic)
        if t is None or t.error is not None:
            raise InputError(f"topic {src.topic!r}: {t.error if t else 'not found'}")
        start, end = {}, {}
        for p in sorted(t.partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(src.topic, p), timeout=15)
            start[p], end[p] = lo, hi
    except KafkaException as e:
        raise InputError(f"Kafka at {src.bootstrap_servers} cannot be read: {e.args[0].str()}") from None
    finally:
        c.close()
    return start, end, False


# --------------------------------------------------------------------------- reading


def _field(spec: dict | None, dtype: str) -> F.Column | None:
    if not spec:
        return None
    if "header" in spec:
        raw = F.expr(f"CAST(try_element_at(filter(headers, h -> h.key = '{spec['header']}'), 1).value AS STRING)")
    elif "json" in spec:
        raw = F.get_json_object(F.col("value").cast("string"), spec["json"])
    elif spec.get("record_key"):
        raw = F.col("key").cast("string")
    elif spec.get("timestamp"):
        return F.col("timestamp")
    else:
        raise InputError(f"unknown field spec {spec}")
    if dtype == "string":
        return raw
    if dtype == "bigint":
        return raw.try_cast("bigint")
    if dtype == "millis":
        return F.timestamp_millis(raw.try_cast("bigint"))
    raise ValueError(dtype)


def read_topic(spark: SparkSession, src: Source, isolation: str, start: dict, end: dict) -> DataFrame:
    starting = json.dumps({src.topic: {str(p): o for p, o in start.items()}})
    ending = json.dumps({src.topic: {str(p): o for p, o in end.items()}})
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", src.bootstrap_servers)
        .option("subscribe", src.topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", isolation)
        .option("failOnDataLoss", "false")
    )
    for k, v in src.kafka_options.items():
        reader = reader.option(k if k.startswith("kafka.") else f"kafka.{k}", v)
    df = reader.load()
    event_id = _field(src.event_id, "string")
    return df.select(
        F.when(F.length(F.trim(event_id)) > 0, event_id).alias("event_id"),
        _field(src.key, "string").alias("key"),
        (_field(src.seq, "bigint") if src.seq else F.lit(None).cast("bigint")).alias("seq"),
        (_field(src.publish_at, "millis") if src.publish_at else F.col("timestamp")).alias("publish_at"),
        F.col("partition"),
        F.col("offset"),
        F.col("value"),
    )


def read_sink(jdbc: Jdbc, src: Source) -> DataFrame:
    """A consumer run's sink rows in the shape of topic records, in the order they were applied."""
    cid = src.sink["consumer_run_id"]
    lo, hi, n = jdbc.scalar_rows(
        "SELECT coalesce(min(apply_no), 0), coalesce(max(apply_no), 0), count(*) "
        "FROM sink_events WHERE consumer_run_id = ?",
        [cid],
    )[0]
    escaped = cid.replace("'", "''")
    df = jdbc.read(
        f'SELECT apply_no, event_id, key, seq, publish_at, source_partition AS "partition", '
        f"source_offset AS \"offset\", state_applied FROM sink_events WHERE consumer_run_id = '{escaped}'",
        partitionColumn="apply_no",
        lowerBound=int(lo),
        upperBound=int(hi) + 1,
        numPartitions=max(1, min(64, int(n) // 250_000 + 1)),
    )
    return df.withColumn("value", F.lit(None).cast("binary"))


def read_ledger(jdbc: Jdbc, src: Source) -> DataFrame:
    """One row per ledger event: event_id, key, seq, publish_at, status (acked, sent, failed,
    unknown, pending, aborted, written)."""
    led = src.ledger
    if led["kind"] == "platform":
        run_id = led["run_id"].replace("'", "''")
        n_parts = max(1, min(64, led["messages"] // 250_000 + 1))
        events = jdbc.read(
            f"SELECT n, event_id, key, seq, publish_at FROM ledger_events WHERE run_id = '{run_id}'",
            partitionColumn="n",
            lowerBound=0,
            upperBound=max(1, led["messages"]),
            numPartitions=n_parts,
        )
        bounds = jdbc.scalar_rows(
            "SELECT coalesce(min(outcome_no), 0), coalesce(max(outcome_no), 0) FROM ledger_outcomes WHERE run_id = ?",
            [led["run_id"]],
        )[0]
        outcomes = jdbc.read(
            f'SELECT outcome_no, event_id, status, "partition", "offset" FROM ledger_outcomes '
            f"WHERE run_id = '{run_id}'",
            partitionColumn="outcome_no",
            lowerBound=int(bounds[0]),
            upperBound=int(bounds[1]) + 1,
            numPartitions=n_parts,
        )
        per_event = outcomes.groupBy("event_id").agg(
            F.max(F.when(F.col("status") == "acked", 1).otherwise(0)).alias("acked"),
            F.max(F.when(F.col("status") == "sent", 1).otherwise(0)).alias("sent"),
            F.max_by("status", "outcome_no").alias("last_status"),
            F.collect_set(F.when(F.col("status") == "aborted", F.struct("partition", "offset"))).alias(
                "aborted_positions"
            ),
        )
        status = (
            F.when(F.col("acked") == 1, "acked")
            .when(F.col("sent") == 1, "sent")
            .otherwise(F.coalesce(F.col("last_status"), F.lit("pending")))
        )
        return events.join(per_event, "event_id", "left").select(
            "event_id",
            "key",
            "seq",
            "publish_at",
            status.alias("status"),
            F.coalesce("aborted_positions", F.array()).alias("aborted_positions"),
        )
    cols = led["columns"]
    base = led.get("query") or f"SELECT * FROM {led['table']}"
    select = ", ".join(f"{cols[c]} AS {c}" for c in ("event_id", "key", "seq", "publish_at", "status") if c in cols)
    query = f"SELECT {select} FROM ({base}) AS src"
    part = led.get("partition_column")
    df = jdbc.read(
        query,
        **(
            {
                "partitionColumn": part,
                "lowerBound": led["lower_bound"],
                "upperBound": led["upper_bound"],
                "numPartitions": led.get("num_partitions", 8),
            }
            if part
            else {}
        ),
    )
    acked_values = [str(v) for v in led.get("acked_values", ["acked"])]
    status = (
        F.when(F.col("status").cast("string").isin(acked_values), "acked").otherwise("unknown")
        if "status" in cols
        else F.lit("acked")
    )
    for c in ("key", "seq", "publish_at"):
        if c not in cols:
            df = df.withColumn(c, F.lit(None))
    return df.select(
        F.col("event_id").cast("string"),
        F.col("key").cast("string"),
        F.col("seq").cast("bigint"),
        F.col("publish_at").cast("timestamp"),
        status.alias("status"),
        F.array().cast("array<struct<partition:int,offset:bigint>>").alias("aborted_positions"),
    )


def platform_run_source(jdbc: Jdbc, run_id: str, bootstrap: str) -> Source:
    """A producer run, or a consumer run checked against its input run's ledger."""
    run_cols = ("run_id", "topic", "mode", "scenario", "messages")
    rows = jdbc.scalar_rows(f"SELECT {', '.join(run_cols)} FROM runs WHERE run_id = ?", [run_id])
    if rows:
        return platform_source(dict(zip(run_cols, rows[0], strict=False)), bootstrap)
    crun_cols = (
        "consumer_run_id",
        "source_run_id",
        "strategy",
        "scenario",
        "status",
        "input_topic",
        "input_end_offsets",
        "output_topic",
    )
    rows = jdbc.scalar_rows(
        f"SELECT {', '.join(crun_cols[:-2])}, input_end_offsets::text, output_topic "
        "FROM consumer_runs WHERE consumer_run_id = ?",
        [run_id],
    )
    if not rows:
        raise InputError(f"no run {run_id!r} in the ledger (neither a producer nor a consumer run)")
    crun = dict(zip(crun_cols, rows[0], strict=False))
    input_run = jdbc.scalar_rows(f"SELECT {', '.join(run_cols)} FROM runs WHERE run_id = ?", [crun["source_run_id"]])
    return consumer_source(crun, dict(zip(run_cols, input_run[0], strict=False)), bootstrap)
