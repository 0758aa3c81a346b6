"""MySQL and MariaDB: an outbox or a sink table, read over MariaDB's JDBC driver (which speaks to
both) in read-only sessions whose time zone is UTC. Identifiers are quoted with backticks. Free
SQL is not taken here: it is checked with PostgreSQL's parser, which does not read MySQL's
dialect."""

from __future__ import annotations

from delivery_semantics.audit.audits import AuditError
from delivery_semantics.audit.stores.jdbc import JdbcStore
from delivery_semantics.audit.stores.sql import quote_mysql, timestamp_utc

# pymysql's error codes: the field of the audit that names what is missing.
_MISSING = {1146: "table", 1054: "columns", 1049: None}


class MysqlStore(JdbcStore):
    name = "mysql"
    quote = staticmethod(quote_mysql)
    timestamp = staticmethod(timestamp_utc)
    driver = "org.mariadb.jdbc.Driver"
    read_only_statement = "SET SESSION TRANSACTION READ ONLY"

    def check(self) -> None:
        """The select with no rows, in a read-only session: the server answers, the user may
        read, and every named table and column exists."""
        import pymysql

        from delivery_semantics.plumbing.endpoints import database

        if "query" in self.spec:
            raise AuditError(
                f"{self.audit.where(self.section + '.query')}: free SQL is checked with PostgreSQL's parser; "
                "a MySQL store names its table"
            )
        db = database(self.conn_id)
        select = self.select()
        try:
            conn = pymysql.connect(**db.pymysql_kwargs())
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
