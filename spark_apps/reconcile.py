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

The topic is read as read_committed and read_uncommitted over an exact offset range. That range
is fixed at the first reconciliation and recorded, so a rerun reads the same records. The ledger
is read with partitioned JDBC reads. Every event id is classified by the functions of
checker/anomalies.py, one per kind: duplicate, lost_acked, lost_unacked, unknown_landed,
unexpected, out_of_order, aborted_visible, malformed (a record with no usable event id) and, for a
sink, stale_overwrite (a record applied to its key's state after a newer version was).

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
import sys

from pyspark.sql import SparkSession

from checker.driver import reconcile
from checker.sources import InputError, Jdbc, mapping_source, platform_run_source


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
                raise InputError(
                    "no bootstrap servers: pass --bootstrap-servers or set SEMANTICS_KAFKA_BOOTSTRAP_SERVERS"
                )
            src = platform_run_source(jdbc, args.run_id, args.bootstrap_servers)
        else:
            src = mapping_source(args.mapping, args.bootstrap_servers)
        summaries = reconcile(spark, jdbc, src)
        for s in summaries:
            print(
                "RECONCILED "
                + json.dumps(
                    {
                        k: s[k]
                        for k in (
                            "reconciliation_id",
                            "isolation",
                            "records_read",
                            "delivered_once",
                            "duplicate_events",
                            "lost_acked",
                            "lost_unacked",
                            "unknown_landed",
                            "unexpected",
                            "out_of_order",
                            "aborted_visible",
                            "malformed",
                            "stale_overwrites",
                            "verdict",
                            "broken_by",
                        )
                    }
                ),
                flush=True,
            )
        return 0
    except InputError as e:
        print(f"reconcile: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
