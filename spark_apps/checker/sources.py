"""The checker's inputs: where the events are (a platform run, a consumer run, or an audit of a
team's own topic and outbox), and how they are read: the topic over an exact offset range with
Spark's Kafka source, a sink table and an outbox with partitioned JDBC reads, and a platform
run's ledger rebuilt from its ranges and batch rows. Nothing here classifies, and nothing is
collected to the driver but a few bounds.

Kafka's settings arrive by environment, made at submit time from the Kafka connection:
SEMANTICS_KAFKA_CONFIG (librdkafka, for the offsets) and SEMANTICS_KAFKA_SPARK_OPTIONS (the
`kafka.*` options of Spark's source, with `kafka.sasl.jaas.config` when SASL is on).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from checker import anomalies, cache, formats
from delivery_semantics import catalog, modes
from delivery_semantics.audit import audits, schemas
from delivery_semantics.audit.stores import Store
from delivery_semantics.audit.stores.spark_jdbc import InputError, Jdbc
from delivery_semantics.catalog import ISOLATIONS, READ_COMMITTED
from delivery_semantics.plumbing import kafka_retry
from delivery_semantics.plumbing.endpoints import librdkafka
from delivery_semantics.records import layouts

MIN_SPLIT_RECORDS = 50_000  # the fewest records per task of a split topic read
# A partition's fetch, unless the connection sets its own: at 10M records, 8 MB fetches read the
# topic in 10% less time than the client's 1 MB (docs/BENCHMARKS.md).
READ_FETCH = {"kafka.max.partition.fetch.bytes": str(8 << 20)}
BATCHES_PER_READ = 50  # batch rows (up to 10,000 events each) per task of the ledger's read
ROWS_PER_READ = 250_000  # rows per task of any other partitioned read of the platform's tables


@dataclass(frozen=True)
class Kafka:
    """The cluster, as librdkafka settings and as the options of Spark's Kafka source."""

    client: dict = field(repr=False)
    spark_options: dict = field(repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return self.client.get("bootstrap.servers", "")

    @classmethod
    def from_env(cls) -> Kafka:
        try:
            return cls(
                json.loads(os.environ["SEMANTICS_KAFKA_CONFIG"]),
                json.loads(os.environ["SEMANTICS_KAFKA_SPARK_OPTIONS"]),
            )
        except KeyError as e:
            raise InputError(
                f"{e.args[0]} is not set: the submitting process makes it from the Kafka connection"
            ) from None


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PlatformLedger:
    """A platform run's ledger, in the platform's database: what its producers sent and were told."""

    run_id: str
    messages: int
    # Per partition, the end of the offsets its acks name (what a covering read must reach).
    acked_ends: dict = field(default_factory=dict)
    # Its producers wrote in transactions (the run's mode), whatever a consumer run then wrote.
    transactional: bool = False

    @property
    def id_prefix(self) -> str:
        """A platform run's ids are `<run>-<n>` (records.event.event_id)."""
        return f"{self.run_id}-"


@dataclass(frozen=True)
class OutboxLedger:
    """An audit's outbox, read from its store: the columns the audit maps, and the values of its
    status column that mean the row was committed (acked)."""

    columns: dict
    acked_values: tuple = ("acked",)
    id_prefix = None  # an outbox's ids are its own


@dataclass(frozen=True)
class ConsumerSink:
    """A consumer run's sink table, read instead of a topic: what its consumers applied of the
    input topic up to its end offsets."""

    consumer_run_id: str
    end_offsets: dict


@dataclass(frozen=True)
class PolledTopic:
    """The topic a consumer run polled, to its end offsets, beside the run's poll log."""

    consumer_run_id: str
    topic: str
    end_offsets: dict


@dataclass
class Source:
    """Where the events are and how to read the event id, key, sequence and publish time."""

    reconciliation_id: str
    kafka: Kafka
    topic: str
    judged_as: str | None  # the catalog's delivery mode or consumer strategy whose promise is judged
    scenario: str
    # {"header": name}, {"json": "$.path"}, {"value": True} or {"value_field": i} (layouts.VALUE_FIELDS)
    event_id: dict
    key: dict = field(default_factory=lambda: {"record_key": True})
    seq: dict | None = None
    publish_at: dict | None = None  # header/json holding epoch millis, or {"timestamp": true}
    ledger: PlatformLedger | OutboxLedger | None = None
    sink: ConsumerSink | None = None  # a consumer run's sink table instead of the topic
    # False: no transactional producer wrote the topic, so both isolation levels see the same
    # records and one read serves both. None: unknown, read both.
    transactional: bool | None = None
    judged_by_reader: bool = True  # False: the records are a derived copy (no dedup_events rows)
    # A consumer run's poll log and the topic it polled.
    polled: PolledTopic | None = None
    audit: str | None = None
    # A platform run's settings that contradict its mode's promise (runs.findings).
    findings: list = field(default_factory=list)
    # How an audited topic's values and keys are written, with their writer schemas.
    record_format: formats.RecordFormat = field(default_factory=formats.RecordFormat)
    # A platform run's record layout (generator.py), whose topic the platform reader reads.
    layout: str | None = None
    # What judged_as promised, as its run recorded it (or, for a run made before and an audit, as
    # the catalog and the mode files define it now); None: nothing is judged.
    definition: catalog.Definition | None = None

    @property
    def id_prefix(self) -> str | None:
        return self.ledger.id_prefix if self.ledger is not None else None

    @property
    def ledger_wrote_topic(self) -> bool:
        """The records are the ones a platform run's producers wrote, at the positions its ledger
        recorded (a consumer's copy, or its sink, holds other positions)."""
        return isinstance(self.ledger, PlatformLedger) and self.ledger.run_id == self.reconciliation_id

    @property
    def reads_headers(self) -> bool:
        """Spark's Kafka source builds the headers column, the costliest to read, only when asked."""
        return any(spec and "header" in spec for spec in (self.event_id, self.key, self.seq, self.publish_at))

    @property
    def knows_transactions(self) -> bool:
        """The ledger has the events of each transaction that wrote the topic."""
        return bool(self.transactional) and self.ledger_wrote_topic

    @property
    def isolations(self) -> tuple[str, ...]:
        # A sink holds what a read_committed consumer wrote: there is no other isolation to read.
        return (READ_COMMITTED,) if self.sink else ISOLATIONS


def _platform_fields(layout: str) -> dict:
    """Where a platform run's records carry the event id, seq and publish time (generator.py)."""
    if layout == layouts.VALUE_LAYOUT:
        return {name: {"value_field": layouts.VALUE_FIELDS.index(name)} for name in ("event_id", "seq", "publish_at")}
    if layout == layouts.HEADERS_LAYOUT:
        # Where the producer put them: `formats.header` looks elsewhere only when they are not there.
        return {
            name: {"header": header, "at": layouts.HEADERS.index(header)}
            for name, header in (
                ("event_id", layouts.H_EVENT_ID),
                ("seq", layouts.H_SEQ),
                ("publish_at", layouts.H_PUBLISH_AT),
            )
        }
    if layout == layouts.AVRO_LAYOUT:
        return {name: {"field": name} for name in ("event_id", "seq", "publish_at")}
    raise InputError(f"unknown record layout {layout!r}")


def _platform_format(layout: str) -> formats.RecordFormat:
    if layout != layouts.AVRO_LAYOUT:
        return formats.RecordFormat()
    event = schemas.WriterSchema(layouts.AVRO_SCHEMA_ID, "avro", layouts.AVRO_SCHEMA, "layouts.AVRO_SCHEMA")
    return formats.RecordFormat("avro", schemas={"value": {event.id: event}, "key": {}})


def recorded_definition(run: dict, name: str) -> catalog.Definition:
    """The definition a run recorded when it was made (its ledger row's JSON, as text or read); a run
    made before that, its subject's now."""
    recorded = run.get("definition")
    if recorded:
        return catalog.Definition.from_json(json.loads(recorded) if isinstance(recorded, str) else recorded)
    defined = modes.definition(name, run["scenario"])
    if defined is None:
        raise InputError(
            f"{name!r}, which run {run.get('run_id') or run.get('consumer_run_id')} is judged as, is no "
            "longer defined, and the run recorded no definition of its own"
        )
    return defined


def platform_source(run: dict, kafka: Kafka) -> Source:
    definition = recorded_definition(run, run["mode"])
    transactional = definition.transactional
    return Source(
        reconciliation_id=run["run_id"],
        kafka=kafka,
        topic=run["topic"],
        judged_as=run["mode"],
        scenario=run["scenario"],
        **_platform_fields(run.get("record_layout", layouts.HEADERS_LAYOUT)),
        transactional=transactional,
        ledger=PlatformLedger(
            run["run_id"], int(run["messages"]), json.loads(run.get("acked_ends") or "{}"), transactional
        ),
        findings=json.loads(run.get("findings") or "[]"),
        record_format=_platform_format(run.get("record_layout", layouts.HEADERS_LAYOUT)),
        layout=run.get("record_layout", layouts.HEADERS_LAYOUT),
        definition=definition,
    )


def consumer_source(crun: dict, input_run: dict, kafka: Kafka) -> Source:
    if crun["status"] != "completed":
        raise InputError(f"consumer run {crun['consumer_run_id']} is {crun['status']}: reconcile it once it completed")
    copier = crun["output_topic"] is not None
    src = platform_source(input_run, kafka)
    src.reconciliation_id, src.judged_as, src.scenario = crun["consumer_run_id"], crun["strategy"], crun["scenario"]
    src.definition = recorded_definition(crun, crun["strategy"])
    src.topic = crun["output_topic"] if copier else crun["input_topic"]
    src.judged_by_reader, src.transactional, src.findings = False, copier, []
    end = {int(p): int(o) for p, o in json.loads(crun["input_end_offsets"]).items()}
    src.polled = PolledTopic(crun["consumer_run_id"], crun["input_topic"], end)
    if not copier:
        src.sink = ConsumerSink(crun["consumer_run_id"], end)
    return src


def audit_source(
    audit: audits.Audit, reconciliation_id: str, kafka: Kafka, record_format: formats.RecordFormat | None = None
) -> Source:
    """A team's topic against its outbox (audits/<name>.yaml, validated when loaded). The record
    format with its schemas (compiled once per application: a continuous audit's windows share it)."""
    rec = audit.record
    return Source(
        reconciliation_id,
        kafka,
        audit.topic,
        audit.judged_as,
        audits.AUDIT_SCENARIO,
        rec["event_id"],
        rec.get("key", {"record_key": True}),
        rec.get("seq"),
        rec.get("publish_at"),
        OutboxLedger(audit.outbox["columns"], tuple(audit.outbox.get("acked_values", ("acked",)))),
        transactional=audit.transactional,
        audit=audit.name,
        record_format=record_format or formats.RecordFormat.of(rec, schemas.load(audit)),
        definition=modes.definition(audit.judged_as, audits.AUDIT_SCENARIO) if audit.judged_as else None,
    )


# --------------------------------------------------------------------------- database


def fixed_offsets(spark: SparkSession, jdbc: Jdbc, src: Source) -> tuple[dict, dict, bool]:
    """(start, end) offsets per partition: the ones recorded for this reconciliation, or the
    topic's current log start and end, recorded now. Returns (start, end, recorded_before)."""
    rows = jdbc.scalar_rows(
        'SELECT "partition", start_offset, end_offset FROM reconcile_offsets WHERE reconciliation_id = ? ORDER BY 1',
        [src.reconciliation_id],
    )
    if rows:
        return ({int(r[0]): int(r[1]) for r in rows}, {int(r[0]): int(r[2]) for r in rows}, True)
    # The ends of what the run's producers saw acked: the log end is taken once the followers
    # have them (readback.high_watermarks).
    covering = src.ledger.acked_ends if src.ledger_wrote_topic else None
    marks = topic_offsets(src, covering=covering)
    return {p: m[0] for p, m in marks.items()}, {p: m[1] for p, m in marks.items()}, False


def topic_offsets(
    src: Source, at_millis: int | None = None, covering: dict | None = None
) -> dict[int, tuple[int, int, int | None]]:
    """Per partition: (log start, log end, and with `at_millis` the first offset whose timestamp is
    at or after it, None when there is none yet); with `covering`, the log ends once they reach
    it (readback.high_watermarks)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    from delivery_semantics.plumbing.kafka_retry import retrying
    from delivery_semantics.workload import readback

    conf = {
        **src.kafka.client,
        "group.id": f"reconcile-offsets-{secrets.token_hex(4)}",
        "enable.auto.commit": False,
        "socket.timeout.ms": 10000,
    }
    answered = False

    def attempt() -> dict[int, tuple[int, int, int | None]]:
        nonlocal answered
        c = Consumer(librdkafka(conf))  # a new client each time: a broker's handle may be gone with it
        try:
            md = c.list_topics(src.topic, timeout=15)
            answered = True
            t = md.topics.get(src.topic)
            if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise InputError(f"topic {src.topic!r}: {t.error if t else 'not found'}")
            if t.error is not None:
                raise KafkaException(t.error)
            marks = {
                p: (lo, hi, None)
                for p, (lo, hi) in readback.high_watermarks(c, src.topic, sorted(t.partitions), covering).items()
            }
            if at_millis is not None:
                found = c.offsets_for_times([TopicPartition(src.topic, p, at_millis) for p in marks], timeout=15)
                for tp in found:
                    if tp.error is not None:
                        raise KafkaException(tp.error)
                    lo, hi, _ = marks[tp.partition]
                    marks[tp.partition] = (lo, hi, tp.offset if tp.offset >= 0 else None)
            return marks
        finally:
            c.close()

    try:
        return retrying(attempt, lambda: answered, f"Kafka at {src.kafka.bootstrap_servers}")
    except KafkaException as e:
        raise InputError(f"Kafka at {src.kafka.bootstrap_servers} cannot be read: {e.args[0].str()}") from None


# --------------------------------------------------------------------------- reading


def parallelism(spark: SparkSession) -> int:
    """The cores the session's tasks run on: Spark's default parallelism, or through Spark Connect
    (no SparkContext in the client) the session's shuffle partitions."""
    try:
        return spark.sparkContext.defaultParallelism
    except Exception:  # PySparkNotImplementedError under Spark Connect
        return int(spark.conf.get("spark.sql.shuffle.partitions") or 2)


# Source.layout values that the platform reader (spark_apps/java/PlatformTopicSource.java) reads.
PLATFORM_READER_LAYOUTS = (layouts.VALUE_LAYOUT, layouts.HEADERS_LAYOUT)


def read_by_platform_reader(src: Source) -> bool:
    return src.layout in PLATFORM_READER_LAYOUTS and os.environ.get("SEMANTICS_TOPIC_READER") != "kafka"


def read_topic(
    spark: SparkSession, src: Source, isolation: str, start: dict, end: dict, via: str | None = None
) -> DataFrame:
    """The records of the topic over [start, end) per partition as `isolation` sees them, their
    fields parsed. A platform run's text layouts are read by the platform reader (Kafka's consumer
    in each task, the fields cut out as text in the JVM; 2.6x faster than Spark's Kafka source on a
    10M-record topic, docs/BENCHMARKS.md), anything else by Spark's Kafka source; `via` ("platform"
    or "kafka") forces one, for the test that holds them to the same rows, and so does
    SEMANTICS_TOPIC_READER=kafka for the benchmark that compares them."""
    via = via or ("platform" if read_by_platform_reader(src) else "kafka")
    cores, offsets = parallelism(spark), sum(end[p] - start[p] for p in end)
    # One task per partition leaves cores idle when the partitions do not divide among them
    # (3 on 2 cores: two rounds, the second half empty). Each partition is split into as many
    # ranges as there are cores, once the ranges stay large.
    split = cores > 1 and bool(end) and offsets // (len(end) * cores) >= MIN_SPLIT_RECORDS
    tasks_per_partition = cores if split else 1
    if via == "platform":
        records = _platform_read(spark, src, isolation, start, end, tasks_per_partition)
    else:
        records = _kafka_read(spark, src, isolation, start, end, tasks_per_partition)
    # A blank id is none. Tested on the column, not on the header lookup that makes it, which
    # Spark would repeat; an id with the run's prefix is not blank.
    eid = F.col("event_id")
    nonblank = F.length(F.trim(eid)) > 0
    if src.id_prefix and src.id_prefix.strip():
        nonblank = eid.startswith(F.lit(src.id_prefix)) | nonblank
    return anomalies.with_id_key(records.withColumn("event_id", F.when(nonblank, eid)), src.id_prefix)


def _kafka_read(
    spark: SparkSession, src: Source, isolation: str, start: dict, end: dict, tasks_per_partition: int
) -> DataFrame:
    starting = json.dumps({src.topic: {str(p): o for p, o in start.items()}})
    ending = json.dumps({src.topic: {str(p): o for p, o in end.items()}})
    reader = (
        spark.read.format("kafka")
        .options(**{**READ_FETCH, **kafka_retry.spark_source_options(), **src.kafka.spark_options})
        .option("subscribe", src.topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("includeHeaders", str(src.reads_headers).lower())
        .option("kafka.isolation.level", isolation)
        .option("failOnDataLoss", "false")
    )
    if tasks_per_partition > 1:
        reader = reader.option("minPartitions", str(len(end) * tasks_per_partition))
    df = src.record_format.decode(reader.load(), [src.event_id, src.key, src.seq, src.publish_at])
    return df.select(
        formats.field(src.event_id, "string").alias("event_id"),
        formats.field(src.key, "string").alias("key"),
        (formats.field(src.seq, "bigint") if src.seq else F.lit(None).cast("bigint")).alias("seq"),
        (formats.field(src.publish_at, "millis") if src.publish_at else F.col("timestamp")).alias("publish_at"),
        F.col("partition"),
        F.col("offset"),
        F.col("value"),
        F.col("timestamp").alias("record_at"),
    )


def _platform_read(
    spark: SparkSession, src: Source, isolation: str, start: dict, end: dict, tasks_per_partition: int
) -> DataFrame:
    """The platform reader's text fields, cast as `formats.field` casts them."""
    if src.layout not in PLATFORM_READER_LAYOUTS:
        raise ValueError(f"the platform reader does not read the {src.layout!r} layout")
    ranges = []
    for p in sorted(end):
        lo, hi = start.get(p, 0), end[p]
        step = max(1, -(-(hi - lo) // tasks_per_partition))
        ranges += [f"{p}:{a}:{min(hi, a + step)}" for a in range(lo, hi, step)]
    df = (
        spark.read.format("deliverysemantics.PlatformTopicSource")
        .options(**{**READ_FETCH, **src.kafka.spark_options})
        .option("topic", src.topic)
        .option("layout", src.layout)
        .option("ranges", ",".join(ranges))
        .option("kafka.isolation.level", isolation)
        .load()
    )
    return df.select(
        "event_id",
        "key",
        F.col("seq").try_cast("bigint").alias("seq"),
        F.timestamp_millis(F.col("publish_at").try_cast("bigint")).alias("publish_at"),
        "partition",
        "offset",
        "value",
        F.col("timestamp").alias("record_at"),
    )


def read_polls(spark: SparkSession, jdbc: Jdbc, src: Source) -> tuple[DataFrame, DataFrame]:
    """A consumer run's polls, each offset after a session's first with the one before it in that
    session and partition (`session, partition, offset, prev_offset`), and the topic it polled,
    read as the consumers read it (read_committed)."""
    polled = src.polled
    literal = _run_id_literal(polled.consumer_run_id)
    polls = anomalies.poll_steps(
        jdbc.read(
            f'SELECT session, poll_no, "partition", offsets FROM consumer_polls WHERE consumer_run_id = {literal}'
        )
    )
    end = polled.end_offsets
    topic = read_topic(spark, replace(src, topic=polled.topic, sink=None), READ_COMMITTED, dict.fromkeys(end, 0), end)
    return polls, topic


def _run_id_literal(run_id: str) -> str:
    """A platform run id as a SQL literal, for the JDBC source's `query`, which takes no
    parameters. The ids were looked up with bound parameters first; this keeps any other text out."""
    if not re.fullmatch(catalog.RUN_ID_PATTERN, run_id):
        raise InputError(f"{run_id!r} is not a run id")
    return f"'{run_id}'"


def read_sink(jdbc: Jdbc, src: Source) -> DataFrame:
    """A consumer run's sink rows in the shape of topic records, in the order they were applied."""
    cid = src.sink.consumer_run_id
    df, _ = jdbc.read_spread(
        f'SELECT apply_no, event_id, key, seq, publish_at, source_partition AS "partition", '
        f'source_offset AS "offset", state_applied FROM sink_events WHERE consumer_run_id = {_run_id_literal(cid)}',
        "sink_events",
        "apply_no",
        "consumer_run_id = ?",
        [cid],
        ROWS_PER_READ,
    )
    return anomalies.with_id_key(df.withColumn("value", F.lit(None).cast("binary")), src.id_prefix)


def read_ledger(jdbc: Jdbc, src: Source, outbox: Store | None = None) -> DataFrame | anomalies.OutcomeLedger:
    """A platform run's ledger, its outcomes (anomalies.OutcomeLedger), from the platform's
    database; or an audit's outbox, from its store (`outbox_ledger`)."""
    led = src.ledger
    if isinstance(led, PlatformLedger):
        return _platform_ledger(jdbc, led)
    return outbox_ledger(outbox.read(jdbc.spark), src)


def outbox_ledger(rows: DataFrame, src: Source) -> DataFrame:
    """An outbox's rows (a store's `read`) as a ledger, one row per event: event_id and its ID_KEY,
    status (acked or unknown), aborted_positions (none), key, seq and publish_at."""
    led = src.ledger
    # As Spark casts them to string: a boolean status reads "true", not Python's "True".
    acked_values = [str(v).lower() if isinstance(v, bool) else str(v) for v in led.acked_values]
    status = (
        F.when(F.col("status").cast("string").isin(acked_values), "acked").otherwise("unknown")
        if "status" in led.columns
        else F.lit("acked")
    )
    types = {"event_id": "string", "key": "string", "seq": "bigint", "publish_at": "timestamp", "status": "string"}
    ledger = typed(rows.withColumn("status", status), types).withColumn(
        "aborted_positions", F.array().cast(anomalies.EMPTY_POSITIONS)
    )
    return anomalies.with_id_key(ledger, src.id_prefix)


# A per-event outcome of a transaction the broker's coordinator aborted (the load's word for it, in
# its error): a constant of the catalog's, so pasted as a literal.
_BY_COORDINATOR = "(status = 'aborted' AND error LIKE '" + catalog.COORDINATOR_ABORTED + ":%')"


def _platform_ledger(jdbc: Jdbc, led: PlatformLedger) -> anomalies.OutcomeLedger:
    """A platform run's ledger, rebuilt rather than read row by row: its event numbers are ranges
    (spark.range), its event ids derived from them (records.event.event_id), and its outcomes are a
    few batch rows (ledger_batches: ranges, expanded here) and the rows of the outcomes that were
    not clean (ledger_event_outcomes). Only those rows cross JDBC. The checker folds the outcomes
    into its aggregation of the topic's copies (anomalies.OutcomeLedger)."""
    spark, run_id, messages = jdbc.spark, led.run_id, led.messages
    literal = _run_id_literal(run_id)
    parts = max(parallelism(spark), min(64, messages // 250_000 + 1))
    # Events are recorded a batch at a time, as ranges of n (a hand-made ledger's as rows): merged,
    # a few islands of n, one per producer slice.
    islands = [
        (int(lo), int(hi))
        for lo, hi in jdbc.scalar_rows(
            "SELECT lower(r), upper(r) FROM unnest((SELECT range_agg(x) FROM ("
            "SELECT int8range(n_lo, n_hi) AS x FROM ledger_event_ranges WHERE run_id = ? "
            "UNION ALL SELECT int8range(n, n + 1) FROM ledger_event_rows WHERE run_id = ?) AS e)) AS r ORDER BY 1",
            [run_id, run_id],
        )
    ]
    big = [(lo, hi) for lo, hi in islands if hi - lo >= 100_000]
    small = [(lo, hi) for lo, hi in islands if hi - lo < 100_000]
    pieces = [spark.range(lo, hi, numPartitions=parts).select(F.col("id").alias("n")) for lo, hi in big]
    if small or not pieces:
        pieces.append(
            spark.createDataFrame(small, "lo bigint, hi bigint")
            .repartition(parts)
            .select(F.explode(F.sequence("lo", F.col("hi") - 1)).alias("n"))
        )
    events = pieces[0]
    for p in pieces[1:]:
        events = events.unionByName(p)

    # A batch's partitions and offsets cross JDBC as text, which Spark splits: the JDBC driver
    # decodes an array element by element, 47 s on one core for the 20M elements of 10M events.
    batches, _ = jdbc.read_spread(
        "SELECT outcome_no, status, n_lo, n_hi, array_to_string(partitions, ',', '') AS partitions, "
        f"array_to_string(offsets, ',', '') AS offsets FROM ledger_batches WHERE run_id = {literal}",
        "ledger_batches",
        "outcome_no",
        "run_id = ?",
        [run_id],
        BATCHES_PER_READ,
        max_tasks=parts,
    )
    # Kept compact, as the database holds them, and expanded where read: a transactional run's two
    # isolation levels read them twice.
    batches = cache.keep(
        batches.select(
            "outcome_no",
            anomalies.status_code(F.col("status")).alias("code"),
            "n_lo",
            "n_hi",
            _text_array("partitions", "int"),
            _text_array("offsets", "bigint"),  # an empty element: sent with acks=0, no offset
        )
    )
    # A batch's partitions and offsets are in the order of its event numbers. Zipped, not looked
    # up by index: an exploded row would carry both arrays of its batch.
    batch_rows = (
        batches.select(_batch_ns_array().alias("ns"), "partitions", "offsets", "outcome_no", "code")
        .select(F.explode(F.arrays_zip("ns", "partitions", "offsets")).alias("e"), "outcome_no", "code")
        .select(
            F.col("e.ns").alias("n"),
            "outcome_no",
            "code",
            anomalies.position(F.col("e.partitions"), F.col("e.offsets")).alias("pos"),
        )
    )
    singles, event_rows = jdbc.read_spread(
        f'SELECT outcome_no, event_id, status, "partition", "offset", {_BY_COORDINATOR} AS by_coordinator '
        f"FROM ledger_event_outcomes WHERE run_id = {literal}",
        "ledger_event_outcomes",
        "outcome_no",
        "run_id = ?",
        [run_id],
        ROWS_PER_READ,
    )
    single_rows = cache.keep(
        anomalies.with_id_key(singles, f"{run_id}-")
        .where(F.col("n") >= 0)
        .select(
            "n",
            "outcome_no",
            anomalies.status_code(F.col("status")).alias("code"),
            "partition",
            "offset",
            anomalies.position(F.col("partition"), F.col("offset")).alias("pos"),
            "by_coordinator",
        )
    )
    # Aborted outcomes are never in a batch: their positions come from the few per-event rows.
    [[aborted_rows]] = (
        jdbc.scalar_rows("SELECT count(*) FROM ledger_event_outcomes WHERE run_id = ? AND status = 'aborted'", [run_id])
        if event_rows
        else [[0]]
    )
    aborted = anomalies.aborted_events(single_rows)
    if int(aborted_rows) == 0:
        aborted = None
    elif int(aborted_rows) <= anomalies.BROADCAST_MAX_ROWS:
        aborted = F.broadcast(aborted)
    return anomalies.OutcomeLedger(
        outcomes=batch_rows.unionByName(single_rows.select("n", "outcome_no", "code", "pos")),
        islands=tuple(islands),
        events=events,
        aborted=aborted,
        event_rows=event_rows,
        transactional=led.transactional,
    )


def _text_array(name: str, element: str) -> F.Column:
    """A comma-separated column as an array, an empty element as NULL."""
    text = F.col(name)
    empty = F.array().cast(f"array<{element}>")
    return F.when(text == "", empty).otherwise(F.split(text, ",").try_cast(f"array<{element}>")).alias(name)


def _batch_ns_array() -> F.Column:
    """The event numbers of a `ledger_batches` row in order (its ranges n_lo, n_hi expanded)."""
    return F.flatten(F.transform(F.arrays_zip("n_lo", "n_hi"), lambda r: F.sequence(r["n_lo"], r["n_hi"] - 1)))


def committed_transactions(jdbc: Jdbc, run_id: str) -> DataFrame:
    """(n, txn) of every event a platform run's producers committed in a transaction, txn being
    `<producer>/<txn_no>`: the acked batch rows with a transaction number, and the acked per-event
    rows with one (a hand-made ledger's)."""
    literal = _run_id_literal(run_id)
    acked = f"WHERE run_id = {literal} AND status = 'acked' AND txn_no IS NOT NULL"
    txn = F.concat_ws("/", F.col("producer").cast("string"), F.col("txn_no").cast("string")).alias("txn")
    batched = jdbc.read(f"SELECT producer, txn_no, n_lo, n_hi FROM ledger_batches {acked}").select(
        F.explode(_batch_ns_array()).alias("n"), txn
    )
    singles = anomalies.with_id_key(
        jdbc.read(f"SELECT producer, txn_no, event_id FROM ledger_event_outcomes {acked}"), f"{run_id}-"
    ).where(F.col("n") >= 0)
    return batched.unionByName(singles.select("n", txn)).select("n", F.lit("").alias("id_rest"), "txn")


def typed(df: DataFrame, types: dict[str, str]) -> DataFrame:
    """The logical columns a file mapped, cast to their types; NULL for those it left out."""
    return df.select(*((F.col(c) if c in df.columns else F.lit(None)).cast(t).alias(c) for c, t in types.items()))


def platform_run_source(jdbc: Jdbc, run_id: str, kafka: Kafka) -> Source:
    """A producer run, or a consumer run checked against its input run's ledger."""
    run_cols = (
        "run_id",
        "topic",
        "mode",
        "scenario",
        "messages",
        "record_layout",
        "findings",
        "acked_ends",
        "definition",
    )
    select = (
        "SELECT run_id, topic, mode, scenario, messages, record_layout, findings::text, acked_ends::text, "
        "definition::text FROM runs"
    )
    rows = jdbc.scalar_rows(f"{select} WHERE run_id = ?", [run_id])
    if rows:
        return platform_source(dict(zip(run_cols, rows[0], strict=False)), kafka)
    crun_cols = (
        "consumer_run_id",
        "source_run_id",
        "strategy",
        "scenario",
        "status",
        "input_topic",
        "input_end_offsets",
        "output_topic",
        "definition",
    )
    rows = jdbc.scalar_rows(
        f"SELECT {', '.join(crun_cols[:-3])}, input_end_offsets::text, output_topic, definition::text "
        "FROM consumer_runs WHERE consumer_run_id = ?",
        [run_id],
    )
    if not rows:
        raise InputError(f"no run {run_id!r} in the ledger (neither a producer nor a consumer run)")
    crun = dict(zip(crun_cols, rows[0], strict=False))
    input_run = jdbc.scalar_rows(f"{select} WHERE run_id = ?", [crun["source_run_id"]])
    return consumer_source(crun, dict(zip(run_cols, input_run[0], strict=False)), kafka)
