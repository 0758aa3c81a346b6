"""The checker: reconciles a Kafka topic against a ledger by event id, per isolation level.

    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/reconcile.py --run-id RUN
    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/reconcile.py --mapping mapping.json

Input is one of:
- a run id of the platform's own (topic and ledger from the `runs`, `ledger_events` and
  `ledger_outcomes` tables);
- a consumer run id of the platform's own (`consumer_runs`), checked against its input run's
  ledger: what it wrote to the sink table (`sink_events`), or, for the transactional copier, its
  output topic;
- a mapping for an existing topic and ledger/outbox table (see docs/RECONCILE.md).

The topic is read twice (read_committed and read_uncommitted) over an exact offset range. That
range is fixed at the first reconciliation and recorded, so a rerun reads the same records. The
ledger is read with partitioned JDBC reads. Every event id is classified as one of:
delivered_once, duplicate, lost_acked, lost_unacked, unknown_landed, unexpected, out_of_order,
aborted_visible or malformed (a record with no usable event id). A sink is also checked for
stale overwrites: a record applied to its key's state after a newer version was.

Three tables are written: a summary (one row per run and isolation level), the discrepancies
(one row per affected event and kind) and an event-id-deduplicated copy of the data. Spark writes
them to staging tables, and one database transaction merges them, so a rerun leaves every row as
the first run did. Nothing is collected to the driver except the few summary rows.

Database: SEMANTICS_JDBC_URL / _USER / _PASSWORD. Kafka: SEMANTICS_KAFKA_BOOTSTRAP_SERVERS (or
the mapping). Exit codes: 0 done, 2 bad input or unreachable endpoint, 1 other failure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

ISOLATIONS = ("read_committed", "read_uncommitted")
NOT_ACKED = ("failed", "unknown", "pending", "aborted", "written")
KINDS = ("duplicate", "lost_acked", "lost_unacked", "unknown_landed", "unexpected", "out_of_order",
         "aborted_visible", "malformed")


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
    event_id: dict               # {"header": name} or {"json": "$.path"}
    key: dict = field(default_factory=lambda: {"record_key": True})
    seq: dict | None = None
    publish_at: dict | None = None   # header/json holding epoch millis, or {"timestamp": true}
    kafka_options: dict = field(default_factory=dict)
    ledger: dict = field(default_factory=dict)
    sink: dict | None = None         # a consumer run's sink table instead of the topic
    # False: no transactional producer wrote the topic, so both isolation levels see the same
    # records and one read serves both. None: unknown, read both.
    transactional: bool | None = None
    judged_by_reader: bool = True    # False: the records are a derived copy (no dedup_events rows)

    @property
    def isolations(self) -> tuple[str, ...]:
        # A sink holds what a read_committed consumer wrote: there is no other isolation to read.
        return ("read_committed",) if self.sink else ISOLATIONS


def platform_source(run: dict, bootstrap: str) -> Source:
    return Source(
        reconciliation_id=run["run_id"], bootstrap_servers=bootstrap, topic=run["topic"], mode=run["mode"],
        scenario=run["scenario"], event_id={"header": "event_id"}, seq={"header": "seq"},
        publish_at={"header": "publish_at"}, transactional=run["mode"] == "transactional",
        ledger={"kind": "platform", "run_id": run["run_id"], "messages": int(run["messages"])})


def consumer_source(crun: dict, input_run: dict, bootstrap: str) -> Source:
    if crun["status"] != "completed":
        raise InputError(f"consumer run {crun['consumer_run_id']} is {crun['status']}: reconcile it once it completed")
    copier = crun["output_topic"] is not None
    src = platform_source(input_run, bootstrap)
    src.reconciliation_id, src.mode, src.scenario = crun["consumer_run_id"], crun["strategy"], crun["scenario"]
    src.topic = crun["output_topic"] if copier else crun["input_topic"]
    src.judged_by_reader, src.transactional = False, copier
    if not copier:
        src.sink = {"consumer_run_id": crun["consumer_run_id"],
                    "end_offsets": {int(p): int(o) for p, o in json.loads(crun["input_end_offsets"]).items()}}
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
        raise InputError("no bootstrap servers: set bootstrap_servers in the mapping or SEMANTICS_KAFKA_BOOTSTRAP_SERVERS")
    return Source(m["reconciliation_id"], bootstrap, m["topic"], m.get("mode"), m.get("scenario", "external"),
                  m["event_id"], m.get("key", {"record_key": True}), m.get("seq"), m.get("publish_at"),
                  m.get("kafka_options", {}), {"kind": "mapped", **m["ledger"]}, transactional=m.get("transactional"))


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
        self.props = {"user": self.user, "password": self.password, "driver": "org.postgresql.Driver",
                      "reWriteBatchedInserts": "true"}

    def read(self, query: str, **partitioning) -> DataFrame:
        reader = (self.spark.read.format("jdbc").option("url", self.url).option("query", query)
                  if not partitioning else
                  self.spark.read.format("jdbc").option("url", self.url).option("dbtable", f"({query}) AS q"))
        for k, v in {**self.props, "fetchsize": "20000", **partitioning}.items():
            reader = reader.option(k, str(v))
        return reader.load()

    def write(self, df: DataFrame, table: str) -> None:
        (df.write.format("jdbc").option("url", self.url).option("dbtable", table)
         .option("batchsize", "20000").option("truncate", "false")
         .options(**self.props).mode("overwrite").save())

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
    rows = jdbc.scalar_rows('SELECT "partition", start_offset, end_offset FROM reconcile_offsets '
                            "WHERE reconciliation_id = ? ORDER BY 1", [src.reconciliation_id])
    if rows:
        return ({int(r[0]): int(r[1]) for r in rows}, {int(r[0]): int(r[2]) for r in rows}, True)
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": src.bootstrap_servers, "group.id": f"reconcile-offsets-{secrets.token_hex(4)}",
            "enable.auto.commit": False, "socket.timeout.ms": 10000,
            **{k: v for k, v in src.kafka_options.items() if not k.startswith("kafka.")}}
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
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", src.bootstrap_servers)
              .option("subscribe", src.topic)
              .option("startingOffsets", starting)
              .option("endingOffsets", ending)
              .option("includeHeaders", "true")
              .option("kafka.isolation.level", isolation)
              .option("failOnDataLoss", "false"))
    for k, v in src.kafka_options.items():
        reader = reader.option(k if k.startswith("kafka.") else f"kafka.{k}", v)
    df = reader.load()
    event_id = _field(src.event_id, "string")
    return df.select(
        F.when(F.length(F.trim(event_id)) > 0, event_id).alias("event_id"),
        _field(src.key, "string").alias("key"),
        (_field(src.seq, "bigint") if src.seq else F.lit(None).cast("bigint")).alias("seq"),
        (_field(src.publish_at, "millis") if src.publish_at else F.col("timestamp")).alias("publish_at"),
        F.col("partition"), F.col("offset"), F.col("value"))


def read_sink(jdbc: Jdbc, src: Source) -> DataFrame:
    """A consumer run's sink rows in the shape of topic records, in the order they were applied."""
    cid = src.sink["consumer_run_id"]
    lo, hi, n = jdbc.scalar_rows("SELECT coalesce(min(apply_no), 0), coalesce(max(apply_no), 0), count(*) "
                                 "FROM sink_events WHERE consumer_run_id = ?", [cid])[0]
    escaped = cid.replace("'", "''")
    df = jdbc.read(f'SELECT apply_no, event_id, key, seq, publish_at, source_partition AS "partition", '
                   f'source_offset AS "offset", state_applied FROM sink_events WHERE consumer_run_id = \'{escaped}\'',
                   partitionColumn="apply_no", lowerBound=int(lo), upperBound=int(hi) + 1,
                   numPartitions=max(1, min(64, int(n) // 250_000 + 1)))
    return df.withColumn("value", F.lit(None).cast("binary"))


def stale_overwrites(sink: DataFrame, isolation: str, rid: str) -> DataFrame:
    """Records applied to their key's state after a newer version (publish_at, then seq) was."""
    version = F.struct("publish_at", "seq")
    w = Window.partitionBy("key").orderBy("apply_no").rowsBetween(Window.unboundedPreceding, -1)
    return (sink.where(F.col("state_applied") & F.col("key").isNotNull())
            .withColumn("newest_before", F.max(version).over(w))
            .where(version < F.col("newest_before"))
            .groupBy("event_id").agg(F.count(F.lit(1)).cast("int").alias("copies"),
                                     F.array_sort(F.collect_set("partition")).alias("partitions"),
                                     F.slice(F.array_sort(F.collect_list("offset")), 1, 100).alias("offsets"))
            .select(F.lit(rid).alias("reconciliation_id"), F.lit(isolation).alias("isolation"), "event_id",
                    F.lit("stale_overwrite").alias("kind"), "copies", F.col("partitions").cast("array<int>"),
                    F.col("offsets").cast("array<bigint>")))


def read_ledger(jdbc: Jdbc, src: Source) -> DataFrame:
    """One row per ledger event: event_id, key, seq, publish_at, status (acked, sent, failed,
    unknown, pending, aborted, written)."""
    led = src.ledger
    if led["kind"] == "platform":
        run_id = led["run_id"].replace("'", "''")
        n_parts = max(1, min(64, led["messages"] // 250_000 + 1))
        events = jdbc.read(f"SELECT n, event_id, key, seq, publish_at FROM ledger_events WHERE run_id = '{run_id}'",
                           partitionColumn="n", lowerBound=0, upperBound=max(1, led["messages"]),
                           numPartitions=n_parts)
        bounds = jdbc.scalar_rows("SELECT coalesce(min(outcome_no), 0), coalesce(max(outcome_no), 0) "
                                  "FROM ledger_outcomes WHERE run_id = ?", [led["run_id"]])[0]
        outcomes = jdbc.read(f"SELECT outcome_no, event_id, status, \"partition\", \"offset\" FROM ledger_outcomes "
                             f"WHERE run_id = '{run_id}'", partitionColumn="outcome_no",
                             lowerBound=int(bounds[0]), upperBound=int(bounds[1]) + 1, numPartitions=n_parts)
        per_event = outcomes.groupBy("event_id").agg(
            F.max(F.when(F.col("status") == "acked", 1).otherwise(0)).alias("acked"),
            F.max(F.when(F.col("status") == "sent", 1).otherwise(0)).alias("sent"),
            F.max_by("status", "outcome_no").alias("last_status"),
            F.collect_set(F.when(F.col("status") == "aborted",
                                 F.struct("partition", "offset"))).alias("aborted_positions"))
        status = (F.when(F.col("acked") == 1, "acked").when(F.col("sent") == 1, "sent")
                  .otherwise(F.coalesce(F.col("last_status"), F.lit("pending"))))
        return (events.join(per_event, "event_id", "left")
                .select("event_id", "key", "seq", "publish_at", status.alias("status"),
                        F.coalesce("aborted_positions", F.array()).alias("aborted_positions")))
    cols = led["columns"]
    base = led.get("query") or f"SELECT * FROM {led['table']}"
    select = ", ".join(f'{cols[c]} AS {c}' for c in ("event_id", "key", "seq", "publish_at", "status") if c in cols)
    query = f"SELECT {select} FROM ({base}) AS src"
    part = led.get("partition_column")
    df = jdbc.read(query, **({"partitionColumn": part, "lowerBound": led["lower_bound"],
                              "upperBound": led["upper_bound"], "numPartitions": led.get("num_partitions", 8)}
                             if part else {}))
    acked_values = [str(v) for v in led.get("acked_values", ["acked"])]
    status = (F.when(F.col("status").cast("string").isin(acked_values), "acked").otherwise("unknown")
              if "status" in cols else F.lit("acked"))
    for c in ("key", "seq", "publish_at"):
        if c not in cols:
            df = df.withColumn(c, F.lit(None))
    return df.select(F.col("event_id").cast("string"), F.col("key").cast("string"), F.col("seq").cast("bigint"),
                     F.col("publish_at").cast("timestamp"), status.alias("status"),
                     F.array().cast("array<struct<partition:int,offset:bigint>>").alias("aborted_positions"))


# --------------------------------------------------------------------------- classification

def classify(records: DataFrame, ledger: DataFrame, committed_copies: DataFrame | None, isolation: str,
             rid: str) -> tuple[DataFrame, DataFrame]:
    """(discrepancies, per-kind counts) for one isolation level."""
    good = records.where(F.col("event_id").isNotNull())
    malformed = (records.where(F.col("event_id").isNull())
                 .select(F.concat(F.lit("partition "), F.col("partition").cast("string"), F.lit(" offset "),
                                  F.col("offset").cast("string")).alias("event_id"),
                         F.lit("malformed").alias("kind"), F.lit(1).cast("int").alias("copies"),
                         F.array(F.col("partition")).alias("partitions"), F.array(F.col("offset")).alias("offsets")))
    copies = good.groupBy("event_id").agg(
        F.count(F.lit(1)).cast("int").alias("copies"),
        F.array_sort(F.collect_set("partition")).alias("partitions"),
        F.slice(F.array_sort(F.collect_list("offset")), 1, 100).alias("offsets"))
    # Every kind and the totals below read this join: computed once.
    joined = copies.join(ledger.select("event_id", "status", "aborted_positions"), "event_id", "full_outer").cache()
    in_topic, in_ledger = F.col("copies").isNotNull(), F.col("status").isNotNull()
    kind_rows = [
        (in_topic & (F.col("copies") > 1), "duplicate"),
        (~in_topic & (F.col("status") == "acked"), "lost_acked"),
        (~in_topic & in_ledger & (F.col("status") != "acked"), "lost_unacked"),
        (in_topic & F.col("status").isin(*NOT_ACKED), "unknown_landed"),
        (in_topic & ~in_ledger, "unexpected"),
    ]
    parts = [joined.where(cond).select("event_id", F.lit(kind).alias("kind"),
                                       F.coalesce("copies", F.lit(0)).alias("copies"),
                                       F.coalesce("partitions", F.array().cast("array<int>")).alias("partitions"),
                                       F.coalesce("offsets", F.array().cast("array<bigint>")).alias("offsets"))
             for cond, kind in kind_rows]

    # Per key, first copies in log order: a sequence lower than one already seen is out of order.
    first = (good.groupBy("event_id").agg(F.min_by(F.struct("key", "seq", "partition", "offset"), "offset").alias("f"))
             .select("event_id", "f.*").where(F.col("seq").isNotNull()))
    w = Window.partitionBy("key").orderBy("partition", "offset").rowsBetween(Window.unboundedPreceding, -1)
    ooo = (first.withColumn("max_before", F.max("seq").over(w)).where(F.col("seq") < F.col("max_before"))
           .select("event_id", F.lit("out_of_order").alias("kind"), F.lit(1).alias("copies"),
                   F.array("partition").alias("partitions"), F.array("offset").alias("offsets")))
    parts.append(ooo)

    if isolation == "read_uncommitted" and committed_copies is not None:
        extra = (copies.join(committed_copies.withColumnRenamed("copies", "committed"), "event_id", "left")
                 .withColumn("extra", F.col("copies") - F.coalesce("committed", F.lit(0)))
                 .where(F.col("extra") > 0)
                 .select("event_id", F.lit("aborted_visible").alias("kind"), F.col("extra").cast("int").alias("copies"),
                         "partitions", "offsets"))
        parts.append(extra)
    else:
        # read_committed: a record at a position the ledger recorded as aborted must not be visible.
        aborted = (ledger.select("event_id", F.explode("aborted_positions").alias("pos"))
                   .select("event_id", F.col("pos.partition").alias("partition"), F.col("pos.offset").alias("offset")))
        seen = (good.join(aborted, ["event_id", "partition", "offset"], "inner")
                .select("event_id", F.lit("aborted_visible").alias("kind"), F.lit(1).alias("copies"),
                        F.array("partition").alias("partitions"), F.array("offset").alias("offsets")))
        parts.append(seen)
    parts.append(malformed)

    disc = parts[0]
    for p in parts[1:]:
        disc = disc.unionByName(p)
    disc = disc.select(F.lit(rid).alias("reconciliation_id"), F.lit(isolation).alias("isolation"), "event_id", "kind",
                       F.col("copies").cast("int"), F.col("partitions").cast("array<int>"),
                       F.col("offsets").cast("array<bigint>"))

    totals = joined.agg(
        F.count(F.when(in_ledger, 1)).alias("ledger_events"),
        F.count(F.when(F.col("status") == "acked", 1)).alias("ledger_acked"),
        F.count(F.when(in_topic, 1)).alias("distinct_events"),
        F.coalesce(F.sum("copies"), F.lit(0)).alias("records_with_id"),
        F.count(F.when(in_topic & (F.col("copies") == 1) & in_ledger, 1)).alias("delivered_once"),
        F.coalesce(F.sum(F.when(F.col("copies") > 1, F.col("copies") - 1)), F.lit(0)).alias("duplicate_copies"))
    return disc, totals


# --------------------------------------------------------------------------- writing

def write_results(spark: SparkSession, jdbc: Jdbc, src: Source, summaries: list[dict], disc: DataFrame,
                  dedup: DataFrame, start: dict, end: dict, recorded_before: bool) -> None:
    token = secrets.token_hex(6)
    stg_disc, stg_dedup = f"stg_discrepancies_{token}", f"stg_dedup_{token}"
    rid = src.reconciliation_id
    jdbc.write(disc, stg_disc)
    if dedup is not None:
        jdbc.write(dedup, stg_dedup)
    try:
        stmts: list[tuple[str, list]] = []
        if not recorded_before:
            for p in sorted(end):
                stmts.append(('INSERT INTO reconcile_offsets (reconciliation_id, topic, "partition", start_offset, '
                              "end_offset) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                              [rid, src.topic, p, start[p], end[p]]))
        stmts.append(("DELETE FROM reconcile_discrepancies WHERE reconciliation_id = ?", [rid]))
        stmts.append((f"INSERT INTO reconcile_discrepancies (reconciliation_id, isolation, event_id, kind, copies, "
                      f'"partitions", "offsets") SELECT reconciliation_id, isolation, event_id, kind, copies, '
                      f'"partitions", "offsets" FROM {stg_disc}', []))
        for s in summaries:
            cols = list(s)
            marks = ", ".join("?::jsonb" if c == "end_offsets" else "?" for c in cols)
            stmts.append((f"INSERT INTO reconcile_summary ({', '.join(cols)}) VALUES ({marks}) "
                          f"ON CONFLICT (reconciliation_id, isolation) DO UPDATE SET "
                          + ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in ("reconciliation_id", "isolation")),
                          [s[c] for c in cols]))
        if dedup is not None:
            # First copy by offset wins; a later version of an event replaces it only if it is newer.
            stmts.append((f"INSERT INTO dedup_events (event_id, reconciliation_id, key, seq, publish_at, "
                          f"\"partition\", \"offset\", value) SELECT event_id, reconciliation_id, key, seq, "
                          f"publish_at, \"partition\", \"offset\", value FROM {stg_dedup} ON CONFLICT (event_id) "
                          "DO UPDATE SET reconciliation_id = EXCLUDED.reconciliation_id, key = EXCLUDED.key, "
                          'seq = EXCLUDED.seq, publish_at = EXCLUDED.publish_at, "partition" = EXCLUDED."partition", '
                          '"offset" = EXCLUDED."offset", value = EXCLUDED.value '
                          "WHERE EXCLUDED.publish_at > dedup_events.publish_at", []))
        stmts.append(("INSERT INTO reconcile_jobs (reconciliation_id, staged_as) VALUES (?, ?)", [rid, token]))
        jdbc.execute_in_transaction(stmts)
    finally:
        jdbc.execute_in_transaction([(f"DROP TABLE IF EXISTS {stg_disc}", []), (f"DROP TABLE IF EXISTS {stg_dedup}", [])])


# --------------------------------------------------------------------------- main

def _counts(disc: DataFrame, totals: DataFrame, sink: bool) -> dict:
    kinds = {r["kind"]: (r["events"], r["copies"]) for r in
             disc.groupBy("kind").agg(F.count(F.lit(1)).alias("events"), F.sum("copies").alias("copies")).collect()}
    t = totals.collect()[0].asDict()
    malformed = kinds.get("malformed", (0, 0))[0]
    return {
        "records_read": int(t["records_with_id"]) + malformed, "ledger_events": t["ledger_events"],
        "ledger_acked": t["ledger_acked"], "distinct_events": t["distinct_events"],
        "delivered_once": t["delivered_once"],
        "duplicate_events": kinds.get("duplicate", (0, 0))[0], "duplicate_copies": int(t["duplicate_copies"]),
        "lost_acked": kinds.get("lost_acked", (0, 0))[0], "lost_unacked": kinds.get("lost_unacked", (0, 0))[0],
        "unknown_landed": kinds.get("unknown_landed", (0, 0))[0], "unexpected": kinds.get("unexpected", (0, 0))[0],
        "out_of_order": kinds.get("out_of_order", (0, 0))[0],
        "aborted_visible": int(kinds.get("aborted_visible", (0, 0))[1] or 0),
        "malformed": malformed,
        "stale_overwrites": kinds.get("stale_overwrite", (0, 0))[0] if sink else None,
    }


def reconcile(spark: SparkSession, jdbc: Jdbc, src: Source) -> list[dict]:
    from delivery_semantics import promises

    single_read = src.transactional is False and not src.sink
    ledger = read_ledger(jdbc, src).cache()
    if src.sink:
        start, end, recorded_before = {}, src.sink["end_offsets"], True
        reads = {"read_committed": read_sink(jdbc, src).cache()}
    else:
        start, end, recorded_before = fixed_offsets(spark, jdbc, src)
        reads = {iso: read_topic(spark, src, iso, start, end).cache()
                 for iso in (("read_uncommitted",) if single_read else src.isolations)}
        reads.setdefault("read_committed", reads["read_uncommitted"])
    committed_copies = reads["read_committed"].where(F.col("event_id").isNotNull()).groupBy("event_id").agg(
        F.count(F.lit(1)).cast("int").alias("copies"))
    summaries, all_disc, classified = [], None, {}
    for iso in sorted(src.isolations, reverse=True):   # read_uncommitted first
        if single_read and iso == "read_committed":
            # No transaction in the topic: the same records and the same classification.
            disc_u, counts = classified["read_uncommitted"]
            disc = disc_u.withColumn("isolation", F.lit(iso))
        else:
            disc, totals = classify(reads[iso], ledger, committed_copies if iso == "read_uncommitted" else None, iso,
                                    src.reconciliation_id)
            if src.sink:
                disc = disc.unionByName(stale_overwrites(reads[iso], iso, src.reconciliation_id))
            # The union of the kinds has a partition per branch and shuffle partition (59 here, most
            # of them empty): one JDBC connection each on write. A few suffice for what is left.
            disc = disc.coalesce(spark.sparkContext.defaultParallelism).cache()
            counts = _counts(disc, totals, bool(src.sink))
            classified[iso] = (disc, counts)
        n = max(1, counts["ledger_events"])
        mode = src.mode or ""
        verdict, broken = (promises.verdict(mode, src.scenario, iso, counts) if mode in promises.JUDGED_ISOLATION
                           else ("n/a", []))
        summaries.append({
            "reconciliation_id": src.reconciliation_id, "isolation": iso, "topic": src.topic, "mode": mode or None,
            "scenario": src.scenario, **counts,
            "loss_rate": (counts["lost_acked"] + counts["lost_unacked"]) / n,
            "duplicate_rate": counts["duplicate_copies"] / n,
            "promise": promises.PROMISE_TEXT.get(mode), "verdict": verdict, "broken_by": ",".join(broken) or None,
            "expectation": promises.expectation_text(mode, src.scenario) if mode else None,
            "meets_expectation": promises.meets_expectation(mode, src.scenario, counts) if mode else None,
            "end_offsets": json.dumps({str(p): o for p, o in sorted(end.items())}),
        })
        all_disc = disc if all_disc is None else all_disc.unionByName(disc)

    # The consumer-side remedy: one row per event id, the first copy by offset, read as the
    # mode's readers read (read_committed for transactions). A consumer run's records are copies
    # of its input run's, which has these rows already.
    dedup = None
    if src.judged_by_reader:
        iso = "read_committed" if (src.mode == "transactional" or src.mode is None) else "read_uncommitted"
        dedup = (reads[iso].where(F.col("event_id").isNotNull()).groupBy("event_id")
                 .agg(F.min_by(F.struct("key", "seq", "publish_at", "partition", "offset", "value"), "offset")
                      .alias("f"))
                 .select("event_id", F.lit(src.reconciliation_id).alias("reconciliation_id"), "f.*"))
    write_results(spark, jdbc, src, summaries, all_disc, dedup, start, end, recorded_before)
    return summaries


def platform_run_source(jdbc: Jdbc, run_id: str, bootstrap: str) -> Source:
    """A producer run, or a consumer run checked against its input run's ledger."""
    run_cols = ("run_id", "topic", "mode", "scenario", "messages")
    rows = jdbc.scalar_rows(f"SELECT {', '.join(run_cols)} FROM runs WHERE run_id = ?", [run_id])
    if rows:
        return platform_source(dict(zip(run_cols, rows[0])), bootstrap)
    crun_cols = ("consumer_run_id", "source_run_id", "strategy", "scenario", "status", "input_topic",
                 "input_end_offsets", "output_topic")
    rows = jdbc.scalar_rows(f"SELECT {', '.join(crun_cols[:-2])}, input_end_offsets::text, output_topic "
                            "FROM consumer_runs WHERE consumer_run_id = ?", [run_id])
    if not rows:
        raise InputError(f"no run {run_id!r} in the ledger (neither a producer nor a consumer run)")
    crun = dict(zip(crun_cols, rows[0]))
    input_run = jdbc.scalar_rows(f"SELECT {', '.join(run_cols)} FROM runs WHERE run_id = ?", [crun["source_run_id"]])
    return consumer_source(crun, dict(zip(run_cols, input_run[0])), bootstrap)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="reconcile a Kafka topic against a ledger by event id")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--run-id")
    g.add_argument("--mapping")
    ap.add_argument("--bootstrap-servers", default=os.environ.get("SEMANTICS_KAFKA_BOOTSTRAP_SERVERS"))
    args = ap.parse_args(argv)
    spark = SparkSession.builder.appName(f"reconcile-{args.run_id or os.path.basename(args.mapping)}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        jdbc = Jdbc(spark)
        if args.run_id:
            if not args.bootstrap_servers:
                raise InputError("no bootstrap servers: pass --bootstrap-servers or set SEMANTICS_KAFKA_BOOTSTRAP_SERVERS")
            src = platform_run_source(jdbc, args.run_id, args.bootstrap_servers)
        else:
            src = mapping_source(args.mapping, args.bootstrap_servers)
        summaries = reconcile(spark, jdbc, src)
        for s in summaries:
            print("RECONCILED " + json.dumps({k: s[k] for k in (
                "reconciliation_id", "isolation", "records_read", "delivered_once", "duplicate_events", "lost_acked",
                "lost_unacked", "unknown_landed", "unexpected", "out_of_order", "aborted_visible", "malformed",
                "stale_overwrites", "verdict", "broken_by")}), flush=True)
        return 0
    except InputError as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
