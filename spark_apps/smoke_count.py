"""Smoke job: count a topic's records through the Spark Kafka source and write the count to
PostgreSQL over JDBC. Proves spark-submit, the cached connector jars, Kafka and JDBC all work.

    spark-submit --jars "$SEMANTICS_SPARK_JARS" spark_apps/smoke_count.py --topic T
Kafka comes from SEMANTICS_KAFKA_SPARK_OPTIONS (JSON of kafka.* options, made at submit time from
the Kafka connection) and the database from SEMANTICS_JDBC_URL / _USER / _PASSWORD.
"""

import argparse
import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--topic", required=True)
    args = p.parse_args()
    try:
        jdbc = {k: os.environ[f"SEMANTICS_JDBC_{k.upper()}"] for k in ("url", "user", "password")}
        kafka = json.loads(os.environ["SEMANTICS_KAFKA_SPARK_OPTIONS"])
    except KeyError as e:
        print(f"smoke_count: {e.args[0]} is not set", file=sys.stderr)
        return 2

    spark = SparkSession.builder.appName(f"smoke-count-{args.topic}").getOrCreate()
    records = (
        spark.read.format("kafka")
        .options(**kafka)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    counted = records.agg(F.count(F.lit(1)).alias("counted")).withColumn("topic", F.lit(args.topic))
    (
        counted.select("topic", "counted")
        .write.format("jdbc")
        .option("url", jdbc["url"])
        .option("user", jdbc["user"])
        .option("password", jdbc["password"])
        .option("driver", "org.postgresql.Driver")
        .option("dbtable", "smoke_counts")
        .mode("append")
        .save()
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
