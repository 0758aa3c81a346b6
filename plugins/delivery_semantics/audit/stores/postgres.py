"""PostgreSQL, the first store: a table or a checked free SELECT, read over JDBC in read-only
sessions (pgjdbc's readOnlyMode=always), split on a partitioning column when the outbox names one."""

from __future__ import annotations

from datetime import datetime

from delivery_semantics.audit.audits import AuditError
from delivery_semantics.audit.stores.base import Store
from delivery_semantics.audit.stores.sql import PARTITION_KEY, outbox_select, sink_select, time_bounded


class PostgresStore(Store):
    name = "postgres"

    def select(self) -> str:
        return outbox_select(self.audit) if self.section == "outbox" else sink_select(self.audit)

    # ------------------------------------------------------------------ before anything runs

    def check(self) -> None:
        """The select with no rows, in a read-only transaction: the database answers, the role may
        read, and every named table and column exists."""
        import psycopg2
        import psycopg2.errors

        from delivery_semantics.plumbing.endpoints import database

        db = database(self.conn_id)
        select = self.select()
        try:
            conn = psycopg2.connect(**db.psycopg2_kwargs())
        except psycopg2.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise AuditError(
                f"{self.audit.path}: {self.connection_label}: the database cannot be reached: {first}"
            ) from None
        try:
            conn.set_session(readonly=True)
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM ({select}) AS checked LIMIT 0")
        except psycopg2.Error as e:
            field = f"{self.section}.query" if "query" in self.spec else self.section
            if isinstance(e, psycopg2.errors.UndefinedColumn):
                field = f"{self.section}.columns"
            elif isinstance(e, psycopg2.errors.UndefinedTable):
                field = f"{self.section}.table"
            msg = (e.diag.message_primary or str(e)).strip().splitlines()[0]
            raise AuditError(f"{self.audit.path}: {field}: {msg} (in database {db.database})") from None
        finally:
            conn.close()

    @classmethod
    def spark_env(cls, conn_id: str, prefix: str) -> dict[str, str]:
        from delivery_semantics.plumbing.endpoints import database

        return database(conn_id).spark_env(f"{prefix}_JDBC")

    # ------------------------------------------------------------------ in the Spark application

    def read(self, spark, time_column: str | None = None, since: datetime | None = None, until: datetime | None = None):
        from checker.sources import Jdbc  # the Spark application's JDBC reader

        jdbc = Jdbc(spark, f"{self.env_prefix}_JDBC", read_only=True)
        select = self.select()
        if time_column is not None:
            select = time_bounded(select, time_column, since, until)
        part = self.spec.get("partitioning")
        if not part:
            return jdbc.read(select)
        lo, hi = part.get("lower_bound"), part.get("upper_bound")
        if lo is None:
            lo, hi = jdbc.scalar_rows(f"SELECT min({PARTITION_KEY}), max({PARTITION_KEY}) FROM ({select}) AS o", [])[0]
        return jdbc.read(
            select,
            partitionColumn=PARTITION_KEY,
            lowerBound=int(lo or 0),
            upperBound=int(hi or 0) + 1,
            numPartitions=part.get("num_partitions", 8),
        )
