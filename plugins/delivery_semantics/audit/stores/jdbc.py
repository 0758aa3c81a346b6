"""What the SQL stores share: the section's select, built in the store's dialect, read over JDBC
in read-only sessions, bounded in time when asked, and split on a partitioning column when the
section names one. A store of this kind says its dialect (quoting, time literals, JDBC driver,
read-only statement) and how to check its database before anything runs."""

from __future__ import annotations

import re
from datetime import datetime

from delivery_semantics.audit.stores.base import Store, StoreError
from delivery_semantics.audit.stores.sql import (
    PARTITION_KEY,
    outbox_select,
    quote_ident,
    sink_select,
    time_bounded,
    timestamptz,
)
from delivery_semantics.files import control


class JdbcStore(Store):
    """A store read over JDBC; its dialect is these facts, which a subclass overrides: how it quotes
    identifiers and writes a time, its JDBC driver and URL, its default port, and the statement that
    makes a session read-only. PostgreSQL's here."""

    store = "jdbc"
    dialect = "postgres"
    quote = staticmethod(quote_ident)
    timestamp = staticmethod(timestamptz)
    driver = "org.postgresql.Driver"
    default_port = 5432
    read_only_statement = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"

    @staticmethod
    def jdbc_url(db) -> str:
        return db.jdbc_url

    @classmethod
    def database(cls, conn_id: str):
        from delivery_semantics.plumbing.endpoints import database

        return database(conn_id, cls.default_port)

    def select(self) -> str:
        if self.section == "outbox":
            return outbox_select(self.audit, self.quote)
        return sink_select(self.audit, self.quote)

    # The driver options a connection may add to the URL, under `jdbc` in its extra, each value
    # matched whole: TLS and timeouts. Nothing else reaches the URL, and never from its host or schema.
    jdbc_options = {
        "ssl": r"true|false",
        "sslmode": r"disable|allow|prefer|require|verify-ca|verify-full",
        "connectTimeout": r"[0-9]{1,4}",
        "socketTimeout": r"[0-9]{1,6}",
        "loginTimeout": r"[0-9]{1,4}",
        "tcpKeepAlive": r"true|false",
        "ApplicationName": r"[A-Za-z0-9._-]{1,64}",
    }

    @classmethod
    def url_of(cls, conn_id: str, db) -> str:
        """The store's JDBC URL with the driver options the connection's extra allows (jdbc_options)."""
        from delivery_semantics.plumbing.endpoints import get_connection

        given = get_connection(conn_id).extra.get("jdbc") or {}
        if not isinstance(given, dict):
            raise StoreError(f"connection {conn_id!r}: extra.jdbc is a mapping of driver option to value")
        for key, value in given.items():
            if key not in cls.jdbc_options:
                raise StoreError(
                    f"connection {conn_id!r}: extra.jdbc.{str(key)[:40]} is not a driver option a {cls.dialect} store "
                    f"takes; allowed: {', '.join(cls.jdbc_options)}"
                )
            if not re.fullmatch(cls.jdbc_options[key], str(value)) or any(map(control, str(value))):
                raise StoreError(f"connection {conn_id!r}: extra.jdbc.{key}: not {cls.jdbc_options[key]}")
        url = cls.jdbc_url(db)
        if not given:
            return url
        return url + ("&" if "?" in url else "?") + "&".join(f"{k}={v}" for k, v in given.items())

    @classmethod
    def spark_env(cls, conn_id: str, prefix: str) -> dict[str, str]:
        db = cls.database(conn_id)
        return db.spark_env(f"{prefix}_JDBC", cls.url_of(conn_id, db))

    def read(self, spark, time_column: str | None = None, since: datetime | None = None, until: datetime | None = None):
        from delivery_semantics.audit.stores.spark_jdbc import Jdbc  # pyspark: only where Spark runs

        jdbc = Jdbc(
            spark,
            f"{self.env_prefix}_JDBC",
            read_only=True,
            driver=self.driver,
            read_only_statement=self.read_only_statement,
        )
        select = self.select()
        if time_column is not None:
            select = time_bounded(select, time_column, since, until, self.timestamp)
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
