"""The deduplicated copy's write alone, in one Spark application (local[2], the checker's JVM
settings): a platform run's topic read by the platform reader with the copy's columns, as the
checker reads it again for the copy, then written to each sink in turn, to tell the read's cost
from the write's:

  noop          read only (Spark's noop sink: every row made, nothing written)
  parquet       Parquet as the copy's files are written (dictionaries off for the unique columns)
  delta         the copy's Delta write itself (dedup_copy.write_lakehouse, into a scratch table, in a
                session with the copy's settings)
  SINK:K=V;K=V  the same with Spark settings changed for it (spark.sql.maxConcurrentOutputFileWriters=0:
                the rows sorted by the partition before they are written, as before)

The first variant named pays the JVM's warm-up: name one twice to see it. With --event-log, bench/run
spark_profile shows each write's stages, with what they spilled to disk.

    bench/run copy_write --run RUN --variants noop,noop,parquet,delta,delta:spark.sql.maxConcurrentOutputFileWriters=0
    bench/run copy_write --run RUN --variants delta,delta --event-log var/spark-events/copy
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delivery_semantics.catalog import READ_UNCOMMITTED
from delivery_semantics.plumbing.endpoints import kafka_config, spark_kafka_options
from delivery_semantics.records import layouts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark_apps"))
import topic_read
from topic_read import SPLITS_PER_PARTITION, marks, refuse, run_topic

from checker import dedup_copy, sources
from checker.anomalies import FIRST_COPY

SINKS = ("noop", "parquet", "delta")


def session(event_log: str | None = None) -> SparkSession:
    conf = dict(dedup_copy.DedupCopy("lakehouse", "unused").session_conf)
    if event_log:
        Path(event_log).mkdir(parents=True, exist_ok=True)
        conf |= {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": Path(event_log).resolve().as_uri(),
            "spark.eventLog.compress": "false",  # spark_profile reads it as text
        }
    return topic_read.session(conf)


def copy_read(spark: SparkSession, topic: str, ranges: dict, rid: str) -> DataFrame:
    """The copy's rows as the checker makes them from a run without duplicates: its own read of a
    platform run's topic (the fields it needs of a run: layout, topic, Kafka options)."""
    run = SimpleNamespace(
        layout=layouts.VALUE_LAYOUT,
        topic=topic,
        kafka=SimpleNamespace(spark_options=spark_kafka_options(kafka_config())),
    )
    start, end = {p: lo for p, (lo, _) in ranges.items()}, {p: hi for p, (_, hi) in ranges.items()}
    records = sources._platform_read(spark, run, READ_UNCOMMITTED, start, end, SPLITS_PER_PARTITION)
    return records.select("event_id", F.lit(rid).alias("reconciliation_id"), *FIRST_COPY)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="a completed platform run (value layout) whose topic is intact")
    ap.add_argument("--variants", default="noop,noop,parquet,delta")
    ap.add_argument("--event-log", help="directory for Spark's event log (bench/run spark_profile reads it)")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v.partition(":")[0] not in SINKS]
    if unknown:
        refuse(f"unknown variant {unknown[0]!r}: one of {', '.join(SINKS)}, with :settings", "copy_write")
    topic = run_topic(args.run, "copy_write")
    ranges = marks(kafka_config(), topic)
    spark = session(args.event_log)
    scratch = Path(tempfile.mkdtemp(prefix="copy-write-"))
    print(f"{topic}: {sum(hi - lo for lo, hi in ranges.values()):,} records; scratch {scratch}")
    print("| variant | seconds | rows written |\n|---|---|---|")
    try:
        for n, variant in enumerate(variants):
            sink, _, rest = variant.partition(":")
            settings = dict(kv.split("=", 1) for kv in rest.split(";") if kv)
            before = {k: spark.conf.get(k, None) for k in settings}
            for k, v in settings.items():
                spark.conf.set(k, v)
            rows_df = copy_read(spark, topic, ranges, f"bench-{n}")
            started = time.monotonic()
            written = None
            if sink == "noop":
                rows_df.write.format("noop").mode("overwrite").save()
            elif sink == "parquet":
                out = scratch / f"parquet-{n}"
                rows_df.write.options(**dedup_copy.PARQUET_OPTIONS).parquet(str(out))
            else:
                copy = dedup_copy.DedupCopy("lakehouse", str(scratch / "lake"))
                _version, written = dedup_copy.write_lakehouse(spark, copy, rows_df, f"bench-{n}")
            seconds = time.monotonic() - started
            if sink == "parquet":
                written = spark.read.parquet(str(out)).count()
            for k, v in before.items():
                spark.conf.unset(k) if v is None else spark.conf.set(k, v)
            print(f"| {variant} | {seconds:.1f} | {'-' if written is None else f'{written:,}'} |", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
