"""Lakehouse tables as a sink: Delta or Parquet at a path, read by Spark (Delta with its runtime,
fetched by local/setup; Iceberg waits for a runtime built for Spark 4.2). No connection: the path is
the table, and the Spark application reads it as files, which never writes to it. A relative path
is the audit file's folder's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from delivery_semantics.audit import AuditError
from delivery_semantics.audit.stores.base import Store

# What makes a folder a table of each lakehouse store, as its reader finds it.
LAYOUT = {"delta": "_delta_log", "parquet": None}
# Delta reads even a path through its session extension and catalog.
SESSION_CONF = {
    "delta": {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    },
    "parquet": {},
}


class LakehouseStore(Store):
    """A section's `store: delta` or `store: parquet`."""

    def __init__(self, audit, section: str):
        self.audit, self.section = audit, section
        self.spec = audit.spec[section]
        self.store = self.spec["store"]
        self.conn_id = None
        self.session_conf = SESSION_CONF[self.store]

    @property
    def path(self) -> Path:
        return Path(self.audit.data_path(self.spec["path"], f"{self.section}.path"))

    def check(self) -> None:
        where = self.audit.where(f"{self.section}.path")
        if not self.path.is_dir():
            raise AuditError(f"{where}: {self.spec['path']}: no such folder (the {self.store} table)")
        marker = LAYOUT[self.store]
        if marker and not (self.path / marker).is_dir():
            raise AuditError(f"{where}: {self.spec['path']}: not a {self.store} table (no {marker}/ in it)")

    @classmethod
    def spark_env(cls, conn_id: str, prefix: str) -> dict[str, str]:
        return {}

    def read(self, spark, time_column: str | None = None, since: datetime | None = None, until: datetime | None = None):
        from pyspark.sql import functions as F
        from pyspark.sql.utils import AnalysisException

        from delivery_semantics.audit.stores.spark_jdbc import InputError

        reader = spark.read.format(self.store)
        try:
            table = reader.load(str(self.path))
            missing = sorted(set(self.spec["columns"].values()) - set(table.columns))
        except AnalysisException as e:
            raise InputError(f"{self.audit.where(self.section + '.path')}: {str(e).splitlines()[0]}") from None
        if missing:
            raise InputError(
                f"{self.audit.where(self.section + '.columns')}: no column {', '.join(missing)} in the {self.store} "
                f"table at {self.spec['path']} (it has {', '.join(table.columns)})"
            )
        rows = table.select(*[F.col(f"`{col}`").alias(logical) for logical, col in self.spec["columns"].items()])
        if time_column is not None:
            at = F.col(time_column).cast("timestamp")
            bounded = at < F.lit(until.astimezone(UTC).replace(tzinfo=None))
            if since is not None:
                bounded = bounded & (at >= F.lit(since.astimezone(UTC).replace(tzinfo=None)))
            rows = rows.where(bounded)
        return rows
