"""Where the deduplicated copy of a reconciliation's data goes (the consumer-side remedy: one row
per event id, its first copy by offset).

- `lakehouse` (the default): a Delta table at <lakehouse>/dedup_events, partitioned by
  reconciliation_id. A rerun replaces its own partition in one Delta commit (replaceWhere), so it
  is idempotent, and no other reconciliation's rows are touched. It is written before the results'
  database transaction, which records it in `dedup_copies` (its Delta version and row count): a
  checker killed in between leaves a partition that nothing records, which its rerun replaces.
- `postgres`: the `dedup_events` table, for small runs. Each Spark task streams its rows into a
  staging table with COPY (Arrow batches written as CSV), and the results' transaction merges them.
- `off`: no copy; the verdicts are the same.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from delivery_semantics import catalog
from delivery_semantics.audit.stores import lakehouse
from delivery_semantics.audit.stores.spark_jdbc import libpq_params

STORES = tuple(catalog.DEDUP_COPY_STORES)
TABLE = catalog.DEDUP_COPY_TABLE
COLUMNS = catalog.DEDUP_COPY_COLUMNS
# Columns with a value per row: a Parquet dictionary for them is built, outgrows its page and is
# dropped in every row group. Without dictionaries the 10M-event copy took 150.6 s against
# 158.4 s back to back (docs/BENCHMARKS.md); the key and partition keep theirs.
UNIQUE_COLUMNS = ("event_id", "seq", "publish_at", "offset", "value")
PARQUET_OPTIONS = {f"parquet.enable.dictionary#{c}": "false" for c in UNIQUE_COLUMNS}
# The columns Delta keeps each file's minimum and maximum of, for skipping files: where a record
# was (a Kafka partition's offsets) and when it was published. Event ids and keys are spread over
# every file, so their ranges skip nothing, and gathering them (Delta's default: the first 32
# columns) took 3-4 s of a 10M-event copy's 20 (docs/BENCHMARKS.md).
STATS_PROPERTY = "delta.dataSkippingStatsColumns"
STATS_COLUMNS = "partition,offset,publish_at"


@dataclass(frozen=True)
class DedupCopy:
    store: str
    lakehouse: str | None = None  # the folder or URI the lakehouse tables live under

    @classmethod
    def choose(cls, store: str, audit_section: dict | None = None) -> DedupCopy:
        """The store the checker was given, unless an audit's `dedup_copy:` section names its own;
        the lakehouse at the audit's `path`, or SEMANTICS_LAKEHOUSE."""
        section = audit_section or {}
        store = section.get("store", store)
        lakehouse = section.get("path") or os.environ.get("SEMANTICS_LAKEHOUSE")
        if store == "lakehouse" and not lakehouse:
            raise ValueError("the lakehouse copy needs SEMANTICS_LAKEHOUSE or the audit's dedup_copy.path")
        return cls(store, lakehouse if store == "lakehouse" else None)

    @property
    def wanted(self) -> bool:
        return self.store != "off"

    @property
    def location(self) -> str:
        if self.store == "lakehouse":
            return catalog.dedup_copy_table(self.lakehouse)
        return TABLE

    @property
    def sql_table(self) -> str:
        """The lakehouse table in Spark SQL: delta.`<location>`."""
        return f"delta.`{self.location.replace('`', '``')}`"

    @property
    def session_conf(self) -> dict[str, str]:
        if self.store != "lakehouse":
            return {}
        # Each write of the copy is one partition (its reconciliation's). With file writers per
        # partition value, a task writes its rows as they come; without them, Spark sorts the rows
        # by that one value first: at 10M events, 598 MB spilled to disk (docs/BENCHMARKS.md).
        # Spark falls back to sorting once the open writers reach the limit, so it is one more than
        # the one writer a task needs.
        return {
            **lakehouse.SESSION_CONF["delta"],
            "spark.sql.maxConcurrentOutputFileWriters": "2",
            # A table the copy creates gathers statistics on the positions and times only (below).
            "spark.databricks.delta.properties.defaults.dataSkippingStatsColumns": STATS_COLUMNS,
            # The write sets every row's reconciliation_id to the one replaceWhere names, so Delta's
            # check of each row against it finds nothing: 2-3 s of a 10M-event copy.
            "spark.databricks.delta.replaceWhere.constraintCheck.enabled": "false",
        }


# What Delta's optimistic concurrency says when another writer committed first: two reconciliations
# writing their partitions at once (side-by-side runs of one application, or parallel tasks), or
# both creating the table. The write is idempotent, so it is tried again.
_CONFLICTS = ("Concurrent", "ProtocolChanged", "MetadataChanged", "DELTA_TABLE_ALREADY_EXISTS", "already exists")


def write_lakehouse(
    spark: SparkSession, copy: DedupCopy, rows: DataFrame, reconciliation_id: str, attempts: int = 6
) -> tuple[int, int]:
    """The reconciliation's partition, replaced in one commit; its Delta version and row count."""
    # The commit carries the reconciliation and a token of this write, to be found in the history.
    mark = f"{reconciliation_id} #{secrets.token_hex(6)}"
    writer = (
        rows.withColumn("reconciliation_id", F.lit(reconciliation_id))
        .select(*COLUMNS)
        .write.format("delta")
        .mode("overwrite")
        .partitionBy("reconciliation_id")
        .option("replaceWhere", f"reconciliation_id = {sql_string(reconciliation_id)}")
        .option("userMetadata", mark)
        .options(**PARQUET_OPTIONS)
    )
    _committed(lambda: writer.save(copy.location), attempts)
    table = copy.sql_table
    history = spark.sql(f"DESCRIBE HISTORY {table} LIMIT 50")
    mine = history.where(F.col("userMetadata") == mark).first()
    # A table made before the copy chose its statistics columns gathers them from its next write.
    properties = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    if properties.get(STATS_PROPERTY) != STATS_COLUMNS:
        alter = f"ALTER TABLE {table} SET TBLPROPERTIES ('{STATS_PROPERTY}' = '{STATS_COLUMNS}')"
        _committed(lambda: spark.sql(alter), attempts)
    if mine is None:
        # Nothing to replace and nothing to add (an empty topic, or no record with an event id):
        # Delta makes no commit, and the partition is empty at the table's latest version.
        return int(history.first()["version"]), 0
    return int(mine["version"]), int(mine["operationMetrics"].get("numOutputRows", 0))


def prepare(spark: SparkSession, copy: DedupCopy) -> threading.Thread | None:
    """Delta's snapshot of the copy's table made in the background while the checker reads and
    classifies, for the write to find it made: at 10M events, about 2 s in which both cores would wait
    on the driver. A table that does not exist yet has none to make."""
    if copy.store != "lakehouse":
        return None
    table = copy.sql_table

    def snapshot() -> None:
        try:
            spark.sql(f"DESCRIBE DETAIL {table}").collect()
        except Exception:  # noqa: S110 (no table yet, or unreadable: the write says why)
            pass

    thread = threading.Thread(target=snapshot, name="dedup-copy-snapshot", daemon=True)
    thread.start()
    return thread


def _committed(commit, attempts: int) -> None:
    """`commit` done, tried again while another writer's commit came first."""
    for attempt in range(attempts):
        try:
            commit()
            return
        except Exception as e:
            if attempt == attempts - 1 or not any(c in str(e) for c in _CONFLICTS):
                raise
            time.sleep(0.5 * 2**attempt)


def copy_into(rows: DataFrame, jdbc_url: str, user: str, password: str, table: str) -> int:
    """`rows` appended to an existing PostgreSQL `table` (the checker's own name) with COPY, by
    every task in parallel; the rows copied."""
    dsn = libpq_params(jdbc_url, user, password)
    columns = ", ".join(f'"{c}"' for c in rows.columns)
    statement = f"COPY {table} ({columns}) FROM STDIN WITH (FORMAT csv)"
    # As PostgreSQL's own text: bytea as \x and hex, a timestamp in UTC (the session's zone).
    as_text = rows.select(
        *[
            F.concat(F.lit("\\x"), F.lower(F.hex(c))).alias(c)
            if t == "binary"
            else F.concat(F.col(c).cast("string"), F.lit("+00")).alias(c)
            if t == "timestamp"
            else F.col(c)
            for c, t in rows.dtypes
        ]
    )

    def copy_batches(batches):
        import psycopg2
        import pyarrow as pa
        import pyarrow.csv as pcsv

        copied = 0
        with psycopg2.connect(**dsn) as conn, conn.cursor() as cur:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                buf = io.BytesIO()
                # Quoted unless null: COPY reads an unquoted empty field as NULL, a quoted one as "".
                pcsv.write_csv(batch, buf, pcsv.WriteOptions(include_header=False, quoting_style="all_valid"))
                buf.seek(0)
                cur.copy_expert(statement, buf)
                copied += batch.num_rows
        yield pa.RecordBatch.from_pydict({"copied": [copied]})

    done = as_text.mapInArrow(copy_batches, "copied long").collect()
    return sum(r["copied"] for r in done)


def sql_string(text: str) -> str:
    """A Spark SQL string literal."""
    return "'" + re.sub(r"(['\\])", r"\\\1", text) + "'"
