"""Spark's JDBC reads and writes of a database named by environment variables (<prefix>_URL,
_USER, _PASSWORD, set at submit time from an Airflow connection): the platform's results database,
and an audit's outbox or sink, only ever read, in read-only sessions. The checker and the SQL
stores share it; it lives with the stores so that no plugin module imports the Spark application."""

from __future__ import annotations

import os
import re
import secrets
import zlib
from urllib.parse import parse_qsl, urlsplit

from pyspark.sql import DataFrame, SparkSession


class InputError(Exception):
    """Bad input or an endpoint that cannot be reached: exit 2 with the message."""


class DatabaseGone(Exception):
    """A database that had answered cannot be reached now: transient, not bad input."""


# What PostgreSQL and its driver say of a connection lost or refused while the server restarts:
# SQLSTATE class 08 (connection exception) and 57P01-57P03 (shut down, crashed, starting up).
_GONE_STATES = re.compile(r"^(08...|57P0[123])$")
_GONE_TEXT = re.compile(
    r"An I/O error occurred while sending to the backend|Connection to \S+ refused|This connection has been closed"
    r"|terminating connection due to administrator command|the database system is (shutting down|starting up)"
    r"|port \d+ failed: Connection refused|server closed the connection unexpectedly"  # libpq's (psycopg2)
)


def database_gone(e: BaseException) -> str | None:
    """Why `e` is the database going away (its SQLSTATE or message), or None when it is not: read
    through a Java exception's causes, or a Spark job's failure text, which names its task's."""
    if isinstance(e, DatabaseGone):
        return str(e)
    if getattr(e, "pgcode", None) and _GONE_STATES.match(e.pgcode):  # psycopg2's
        return f"SQLSTATE {e.pgcode}: {str(e).strip().splitlines()[0]}"
    cause = getattr(e, "java_exception", None) or getattr(e, "_origin", None)  # Py4J's, or PySpark's converted
    seen = 0
    while cause is not None and seen < 16:
        try:
            state = cause.getSQLState() if hasattr(cause, "getSQLState") else None
        except Exception:
            state = None
        if state and _GONE_STATES.match(str(state)):
            return f"SQLSTATE {state}: {_java_message(Exception(str(cause.toString())))}"
        cause, seen = cause.getCause(), seen + 1
    found = _GONE_TEXT.search(str(e))
    return found.group(0) if found else None


class Jdbc:
    """A database from its environment variables (<prefix>_URL, _USER, _PASSWORD): the ledger's
    (SEMANTICS_JDBC), or an audit's outbox (SEMANTICS_SOURCE_JDBC), which is only ever read, in
    read-only sessions."""

    def __init__(
        self,
        spark: SparkSession,
        prefix: str = "SEMANTICS_JDBC",
        read_only: bool = False,
        driver: str = "org.postgresql.Driver",
        read_only_statement: str = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    ):
        try:
            self.url = os.environ[f"{prefix}_URL"]
            self.user = os.environ[f"{prefix}_USER"]
            self.password = os.environ[f"{prefix}_PASSWORD"]
        except KeyError as e:
            raise InputError(f"{e.args[0]} is not set") from None
        self.spark, self.read_only, self.driver = spark, read_only, driver
        # Through Spark Connect there is no driver JVM here to run statements in (Py4J's
        # DriverManager): they go through the database's Python driver instead, same SQL, same binds.
        self.python = type(spark).__module__.startswith("pyspark.sql.connect")
        self.answered = False  # once it has, a lost connection is the database restarting, not bad input
        self.props = {"user": self.user, "password": self.password, "driver": driver}
        if driver == "org.postgresql.Driver":
            # The driver sends a batch as multi-row INSERTs, not one per row.
            self.props["reWriteBatchedInserts"] = "true"
        if read_only:
            self.props["sessionInitStatement"] = read_only_statement

    def read(self, query: str, **partitioning) -> DataFrame:
        reader = (
            self.spark.read.format("jdbc").option("url", self.url).option("query", query)
            if not partitioning
            else self.spark.read.format("jdbc").option("url", self.url).option("dbtable", f"({query}) AS q")
        )
        for k, v in {**self.props, "fetchsize": "20000", **partitioning}.items():
            reader = reader.option(k, str(v))
        return reader.load()

    def read_spread(
        self, query: str, table: str, column: str, where: str, params: list, rows_per_task: int, max_tasks: int = 64
    ) -> tuple[DataFrame, int]:
        """`query` read in tasks of about `rows_per_task` rows, split on the integer `column` of
        `table` over its range among the rows `where` selects, and how many rows those are. The
        names are the checker's own, never a user's; `params` bind the `where`."""
        lo, hi, count = self.scalar_rows(
            f"SELECT coalesce(min({column}), 0), coalesce(max({column}), 0), count(*) FROM {table} WHERE {where}",
            params,
        )[0]
        df = self.read(
            query,
            partitionColumn=column,
            lowerBound=int(lo),
            upperBound=int(hi) + 1,
            numPartitions=max(1, min(max_tasks, int(count) // rows_per_task + 1)),
        )
        return df, int(count)

    def write(self, df: DataFrame, table: str) -> None:
        (
            df.write.format("jdbc")
            .option("url", self.url)
            .option("dbtable", table)
            .option("batchsize", "20000")
            .option("truncate", "false")
            .options(**self.props)
            .mode("overwrite")
            .save()
        )

    def connection(self):
        jvm = self.spark._jvm
        # --jars puts the driver in Spark's class loader, which java.sql.DriverManager cannot see;
        # Spark's registry wraps it so that DriverManager can.
        jvm.org.apache.spark.sql.execution.datasources.jdbc.DriverRegistry.register(self.driver)
        props = jvm.java.util.Properties()
        props.setProperty("user", self.user)
        props.setProperty("password", self.password)
        if self.read_only and self.driver == "org.postgresql.Driver":
            # pgjdbc makes a session read-only only inside transactions unless told so: "always"
            # holds for autocommit statements too.
            props.setProperty("readOnlyMode", "always")
        try:
            conn = jvm.java.sql.DriverManager.getConnection(self.url, props)
        except Exception as e:
            if self.answered and database_gone(e):
                raise DatabaseGone(f"the database at {self.url} cannot be reached: {_java_message(e)}") from None
            raise InputError(f"the database at {self.url} cannot be reached: {_java_message(e)}") from None
        self.answered = True
        conn.setReadOnly(self.read_only)
        return conn

    def gone(self, e: BaseException) -> str | None:
        """Why `e` is this database restarting after it had answered, or None (retrying.riding_over)."""
        return database_gone(e) if self.answered else None

    def python_connection(self):
        """The database through its Python driver (psycopg2, pymysql), read-only when this one is."""
        try:
            if self.driver == "org.postgresql.Driver":
                import psycopg2

                conn = psycopg2.connect(**libpq_params(self.url, self.user, self.password))
                conn.set_session(readonly=self.read_only)
            else:
                import pymysql

                u = urlsplit(self.url[len("jdbc:") :])
                conn = pymysql.connect(
                    host=u.hostname,
                    port=u.port or 3306,
                    user=self.user,
                    password=self.password,
                    database=u.path.lstrip("/"),
                )
                if self.read_only:
                    with conn.cursor() as cur:
                        cur.execute("SET SESSION TRANSACTION READ ONLY")
        except Exception as e:
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if self.answered and database_gone(e):
                raise DatabaseGone(f"the database at {self.url} cannot be reached: {why}") from None
            raise InputError(f"the database at {self.url} cannot be reached: {why}") from None
        self.answered = True
        return conn

    def _python_execute(self, cur, sql: str, params: list) -> None:
        # The JDBC placeholders as the Python drivers' (a literal % doubled once there are binds).
        if params:
            cur.execute(sql.replace("%", "%%").replace("?", "%s"), list(params))
        else:
            cur.execute(sql)

    def scalar_rows(self, sql: str, params: list) -> list[list]:
        conn = self.python_connection() if self.python else self.connection()
        try:
            if self.python:
                with conn.cursor() as cur:
                    self._python_execute(cur, sql, params)
                    return [list(r) for r in cur.fetchall()]
            st = conn.prepareStatement(sql)
            for i, p in enumerate(params, 1):
                st.setObject(i, p)
            rs = st.executeQuery()
            meta = rs.getMetaData()
            rows = []
            while rs.next():
                rows.append([rs.getObject(i) for i in range(1, meta.getColumnCount() + 1)])
            return rows
        finally:
            conn.close()

    def execute_in_transaction(self, statements: list[tuple[str, list]]) -> None:
        conn = self.python_connection() if self.python else self.connection()
        try:
            if self.python:  # psycopg2 and pymysql open a transaction with the first statement
                with conn.cursor() as cur:
                    for sql, params in statements:
                        self._python_execute(cur, sql, params)
            else:
                conn.setAutoCommit(False)
                for sql, params in statements:
                    st = conn.prepareStatement(sql)
                    for i, p in enumerate(params, 1):
                        st.setObject(i, p)
                    st.execute()
                    st.close()
            conn.commit()
        except Exception:
            conn.rollback()
            raise
        finally:
            conn.close()

    def staging_token(self, owner: str) -> str:
        """The token of this attempt's staging tables (`stg_<what>_<token>`), once the tables an
        earlier attempt for the same owner (a reconciliation, a window) left behind are dropped: an
        attempt killed after staging left them, and nothing else, since its merge is one
        transaction."""
        tag = f"{zlib.crc32(owner.encode()):08x}"
        left = self.scalar_rows(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE ?",
            [f"stg\\_%\\_{tag}\\_%"],
        )
        if left:
            self.execute_in_transaction([(f'DROP TABLE IF EXISTS "{t}"', []) for (t,) in left])
        return f"{tag}_{secrets.token_hex(6)}"


def libpq_params(jdbc_url: str, user: str, password: str) -> dict:
    """psycopg2's keywords from a PostgreSQL JDBC URL (host, port, database, and the SSL settings
    libpq shares with pgjdbc)."""
    if not jdbc_url.startswith("jdbc:postgresql://"):
        raise ValueError("the postgres copy needs a PostgreSQL results database")
    u = urlsplit(jdbc_url[len("jdbc:") :])
    params = {"host": u.hostname, "port": u.port or 5432, "dbname": u.path.lstrip("/"), "user": user}
    params["password"] = password
    for k, v in parse_qsl(u.query):
        if k in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout"):
            params[k] = v
    return params


def _java_message(e: Exception) -> str:
    text = str(e)
    for line in text.splitlines():
        if "Exception:" in line:
            return line.split("Exception:", 1)[1].strip()
    return text.splitlines()[0] if text else type(e).__name__


# --------------------------------------------------------------------------- offsets
