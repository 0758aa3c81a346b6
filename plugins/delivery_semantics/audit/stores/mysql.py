"""MySQL and MariaDB: an outbox or a sink table, read over MariaDB's JDBC driver (which speaks to
both) in read-only sessions whose time zone is UTC. Identifiers are quoted with backticks. Free
SQL is not taken here: it is checked with PostgreSQL's parser, which does not read MySQL's
dialect."""

from __future__ import annotations

from datetime import UTC, datetime

from delivery_semantics.audit import AuditError
from delivery_semantics.audit.stores.jdbc import JdbcStore
from delivery_semantics.audit.stores.sql import quote_ident

# pymysql's error codes: the field of the audit that names what is missing.
_MISSING = {1146: "table", 1054: "columns", 1049: None}


def quote_mysql(name: str) -> str:
    return quote_ident(name, "`")


def timestamp_utc(t: datetime) -> str:
    """A time as MySQL reads it in a session whose time zone is UTC (MysqlStore.jdbc_url)."""
    return f"TIMESTAMP '{t.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"


class MysqlStore(JdbcStore):
    dialect = "mysql"
    quote = staticmethod(quote_mysql)
    timestamp = staticmethod(timestamp_utc)
    driver = "org.mariadb.jdbc.Driver"
    default_port = 3306
    read_only_statement = "SET SESSION TRANSACTION READ ONLY"
    jdbc_options = {
        "sslMode": r"disable|trust|verify-ca|verify-full",
        "connectTimeout": r"[0-9]{1,6}",
        "socketTimeout": r"[0-9]{1,6}",
        "tcpKeepAlive": r"true|false",
    }

    @staticmethod
    def jdbc_url(db) -> str:
        # MySQL's scheme, so that Spark speaks MySQL's dialect (backticks, not double quotes, around
        # the columns it selects); the session in UTC, the checker's clock.
        return (
            f"jdbc:mysql://{db.host}:{db.port}/{db.database}"
            "?permitMysqlScheme&connectionTimeZone=UTC&forceConnectionTimeZoneToSession=true"
        )

    @staticmethod
    def connect(db, **options):
        """A pymysql connection to the store's database (its check, and the tests that fill it)."""
        import pymysql

        return pymysql.connect(
            host=db.host,
            port=db.port,
            user=db.user,
            password=db.password,
            database=db.database,
            connect_timeout=5,
            **options,
        )

    def check(self) -> None:
        """The select with no rows, in a read-only session: the server answers, the user may
        read, and every named table and column exists."""
        import pymysql

        if "query" in self.spec:
            raise AuditError(
                f"{self.audit.where(self.section + '.query')}: free SQL is checked with PostgreSQL's parser; "
                "a MySQL store names its table"
            )
        db = self.database(self.conn_id)
        select = self.select()
        try:
            conn = self.connect(db)
        except pymysql.err.OperationalError as e:
            raise AuditError(
                f"{self.audit.path}: {self.connection_label}: the database cannot be reached: {e.args[-1]}"
            ) from None
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION READ ONLY")
                cur.execute(f"SELECT * FROM ({select}) AS checked LIMIT 0")
        except pymysql.err.MySQLError as e:
            code, msg = (*e.args, "")[:2]
            field = _MISSING.get(code)
            where = f"{self.section}.{field}" if field else self.section
            raise AuditError(f"{self.audit.where(where)}: {msg} (in database {db.database})") from None
        finally:
            conn.close()
