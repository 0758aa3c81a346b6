"""A small reconciliation's kind of work on generated rows, run once by local/setup so that its
driver's JVM archives the classes it loaded (entry/spark_submit.py: write_class_archive). Needs no
service: a window per id, aggregations and an anti-join collected, a Delta partition replaced and
its history read, and the Kafka source and the JDBC driver resolved.

    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/class_archive.py
"""

import tempfile

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from delivery_semantics.audit.stores import lakehouse


def main() -> None:
    builder = SparkSession.builder.appName("class-archive")
    for k, v in lakehouse.SESSION_CONF["delta"].items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    records = spark.range(20000).select(
        (F.col("id") % 15000).alias("event_id"),
        (F.col("id") % 100).cast("string").alias("key"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.col("id").alias("offset"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.current_timestamp().alias("publish_at"),
    )
    ledger = spark.range(16000).select(F.col("id").alias("event_id"), (F.col("id") % 2 == 0).alias("acked"))
    copies = records.withColumn("copy", F.row_number().over(Window.partitionBy("event_id").orderBy("offset")))
    copies.cache()
    copies.groupBy("key").agg(F.count("*"), F.max("copy"), F.min("offset")).collect()
    ledger.join(records, "event_id", "left_anti").agg(F.count("*"), F.sum(F.col("acked").cast("int"))).collect()
    copies.join(ledger, "event_id", "full_outer").groupBy("partition").count().collect()
    with tempfile.TemporaryDirectory(prefix="class-archive-") as lake:
        (
            copies.where("copy = 1")
            .drop("copy")
            .withColumn("reconciliation_id", F.lit("warm-up"))
            .write.format("delta")
            .mode("overwrite")
            .partitionBy("reconciliation_id")
            .option("replaceWhere", "reconciliation_id = 'warm-up'")
            .save(lake)
        )
        spark.sql(f"DESCRIBE HISTORY delta.`{lake}` LIMIT 5").first()
        spark.read.format("delta").load(lake).where("event_id < 10").count()
    sources = {
        "kafka": {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "class-archive"},
        "jdbc": {"url": "jdbc:postgresql://127.0.0.1:9/none", "dbtable": "none", "connectTimeout": "1"},
    }
    for fmt, options in sources.items():
        try:
            spark.read.format(fmt).options(**options).load().printSchema()
        except Exception:  # noqa: S110 (resolving a source loads its classes; there is nothing to reach)
            pass
    spark.stop()


if __name__ == "__main__":
    main()
