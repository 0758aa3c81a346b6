"""Ways to read a platform run's topic in one Spark application (local[2], the checker's JVM
settings), timed one after another, to tell the Kafka source's cost from what the checker adds:

  spark             Spark's Kafka source as the checker reads it (8 MB fetches, 6 splits on 2
                    cores), the value's fields split out, summed
  spark:K=V;K=V     the same with other options of the source (minPartitions=12,
                    kafka.check.crcs=false, kafka.fetch.max.bytes=134217728)
  platform          the checker's platform reader (spark_apps/java): Kafka's consumer in each
                    task, the value's fields cut out in the JVM (the same splits)
  platform:K=V;K=V  the same with other consumer settings (kafka.max.poll.records=5000)
  python            librdkafka in each task through mapInArrow (the same splits), the value's
                    fields split out by Spark
  parquet:CODEC     the spark read written as Parquet with CODEC (snappy, none, lz4_raw, zstd):
                    the floor of writing a copy of the whole topic (timed to the write's end;
                    the files are counted after)

The first variant named pays the JVM's warm-up: name one twice to see it.

    bench/run topic_read --run RUN --variants spark,spark,python,parquet:snappy
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delivery_semantics.plumbing.endpoints import kafka_config, spark_kafka_options
from delivery_semantics.plumbing.spark import SPARK_CONF_LOCAL, spark_jars
from delivery_semantics.reporting import report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark_apps"))
from checker.sources import READ_FETCH

KINDS = ("spark", "platform", "python", "parquet")

SPLITS_PER_PARTITION = 2  # as the checker splits 3 partitions on 2 cores


def session(conf: dict | None = None) -> SparkSession:
    """local[2] with the checker's settings, and `conf`."""
    builder = SparkSession.builder.master("local[2]").config("spark.jars", spark_jars())
    for k, v in {**SPARK_CONF_LOCAL, **(conf or {})}.items():
        builder = builder.config(k, v)
    return builder.config("spark.ui.enabled", "false").getOrCreate()


def marks(conf: dict, topic: str) -> dict[int, tuple[int, int]]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**conf, "group.id": "bench-topic-read"})
    try:
        parts = c.list_topics(topic, timeout=15).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15) for p in sorted(parts)}
    finally:
        c.close()


def spark_read(spark: SparkSession, conf: dict, topic: str, options: dict) -> DataFrame:
    reader = spark.read.format("kafka").options(**spark_kafka_options(conf))
    defaults = {**READ_FETCH, "minPartitions": "6"}
    return (
        reader.options(**{**defaults, **options})
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def platform_read(spark: SparkSession, conf: dict, topic: str, ranges: dict, options: dict) -> DataFrame:
    splits = []
    for p, (lo, hi) in ranges.items():
        step = max(1, -(-(hi - lo) // SPLITS_PER_PARTITION))
        splits += [f"{p}:{a}:{min(hi, a + step)}" for a in range(lo, hi, step)]
    return (
        spark.read.format("deliverysemantics.PlatformTopicSource")
        .options(**{**READ_FETCH, **spark_kafka_options(conf), **options})
        .option("topic", topic)
        .option("layout", "value")
        .option("ranges", ",".join(splits))
        .load()
        .select("event_id", F.col("seq").try_cast("bigint").alias("seq"), "partition", "offset")
    )


def python_read(spark: SparkSession, conf: dict, topic: str, ranges: dict) -> DataFrame:
    splits = []
    for p, (lo, hi) in ranges.items():
        step = max(1, -(-(hi - lo) // SPLITS_PER_PARTITION))
        splits += [(p, a, min(hi, a + step)) for a in range(lo, hi, step)]
    frame = spark.createDataFrame(splits, "partition int, lo long, hi long").repartition(len(splits))

    def read(batches):
        import pyarrow as pa
        from confluent_kafka import Consumer, TopicPartition

        for b in batches:
            for p, lo, hi in zip(*(b.column(i).to_pylist() for i in range(3)), strict=True):
                c = Consumer({**conf, "group.id": "bench-topic-read", "enable.auto.commit": False})
                c.assign([TopicPartition(topic, p, lo)])
                at = lo
                while at < hi:
                    offsets, values = [], []
                    for m in c.consume(20000, timeout=1.0):
                        if m.error() or m.offset() >= hi:
                            continue
                        offsets.append(m.offset())
                        values.append(m.value())
                    if offsets:
                        at = offsets[-1] + 1
                        yield pa.RecordBatch.from_arrays(
                            [
                                pa.array([p] * len(offsets), pa.int32()),
                                pa.array(offsets),
                                pa.array(values, pa.binary()),
                            ],
                            names=["partition", "offset", "value"],
                        )
                    elif c.position([TopicPartition(topic, p)])[0].offset >= hi:
                        break
                c.close()

    return frame.mapInArrow(read, "partition int, offset long, value binary")


def fields(records: DataFrame) -> DataFrame:
    parts = F.split(F.col("value").cast("string"), " ", 4)
    return records.select(parts[0].alias("event_id"), parts[1].cast("bigint").alias("seq"), "partition", "offset")


def refuse(message: str, prog: str = "topic_read") -> None:
    print(f"{prog}: {message}", file=sys.stderr)
    sys.exit(2)


def run_topic(run_id: str, prog: str) -> str:
    """The topic of a run in the ledger, or a one-line refusal."""
    rows = report.query("SELECT topic FROM runs WHERE run_id = %s", (run_id,))
    if not rows:
        refuse(f"no run {run_id!r}", prog)
    return rows[0]["topic"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="a completed platform run whose topic is intact")
    ap.add_argument("--variants", default="spark,spark,python")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v.partition(":")[0] not in KINDS]
    if unknown:
        refuse(f"unknown variant {unknown[0]!r}: one of {', '.join(KINDS)}, with :options")
    topic, conf = run_topic(args.run, "topic_read"), kafka_config()
    ranges = marks(conf, topic)
    records = sum(hi - lo for lo, hi in ranges.values())
    spark = session()
    print(f"{topic}: {records:,} records in {len(ranges)} partitions")
    for variant in variants:
        kind, _, rest = variant.partition(":")
        out = None
        started = time.monotonic()
        options = dict(kv.split("=", 1) for kv in rest.split(";") if kv) if kind in ("spark", "platform") else {}
        if kind == "spark":
            got = fields(spark_read(spark, conf, topic, options)).agg(F.count("event_id"), F.sum("seq")).first()
        elif kind == "platform":
            got = platform_read(spark, conf, topic, ranges, options).agg(F.count("event_id"), F.sum("seq")).first()
        elif kind == "python":
            got = fields(python_read(spark, conf, topic, ranges)).agg(F.count("event_id"), F.sum("seq")).first()
        else:
            out = tempfile.mkdtemp(prefix="topic-read-")
            spark_read(spark, conf, topic, {}).write.mode("overwrite").option("compression", rest or "snappy").parquet(
                out
            )
        seconds = time.monotonic() - started
        if out:
            got = (spark.read.parquet(out).count(),)
            shutil.rmtree(out, ignore_errors=True)
        print(f"| {variant} | {seconds:.1f} | {got[0]:,} |", flush=True)


if __name__ == "__main__":
    main()
