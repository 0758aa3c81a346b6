"""PostgreSQL, the first store: a table or a checked free SELECT, read over JDBC in read-only
sessions (pgjdbc's readOnlyMode=always), split on a partitioning column when the outbox names one.
Its preflight speaks the extended protocol (psycopg 3), one statement per call."""

from __future__ import annotations

import sys

from delivery_semantics.audit import AuditError
from delivery_semantics.audit.stores.jdbc import JdbcStore

# Whether the session's role may write anywhere in the database: a superuser, or a role with any
# write privilege on a table. An audit reads; a role that can write is the operator's to narrow.
ROLE_CAN_WRITE = """
SELECT r.rolsuper OR EXISTS (
    SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
      AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))
FROM pg_roles r WHERE r.rolname = current_user
"""


class PostgresStore(JdbcStore):
    dialect = "postgres"

    # ------------------------------------------------------------------ before anything runs

    def check(self) -> None:
        """The select with no rows, in a read-only transaction: the database answers, the role may
        read, and every named table and column exists. Sent as one prepared statement (the extended
        protocol, psycopg 3): the server itself refuses a second statement, whatever the text."""
        import psycopg

        db = self.database(self.conn_id)
        select = self.select()
        kwargs = db.psycopg2_kwargs()
        try:
            conn = psycopg.connect(**kwargs)
        except psycopg.OperationalError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise AuditError(
                f"{self.audit.path}: {self.connection_label}: the database cannot be reached: {first}"
            ) from None
        try:
            conn.read_only = True
            with conn.cursor() as cur:
                cur.execute(f"SELECT * FROM ({select}) AS checked LIMIT 0", prepare=True)
                cur.execute(ROLE_CAN_WRITE, prepare=True)
                (can_write,) = cur.fetchone() or (False,)
        except psycopg.Error as e:
            field = f"{self.section}.query" if "query" in self.spec else self.section
            if isinstance(e, psycopg.errors.UndefinedColumn):
                field = f"{self.section}.columns"
            elif isinstance(e, psycopg.errors.UndefinedTable) and "table" in self.spec:
                field = f"{self.section}.table"
            msg = (e.diag.message_primary or str(e)).strip().splitlines()[0]
            raise AuditError(f"{self.audit.path}: {field}: {msg} (in database {db.database})") from None
        finally:
            conn.close()
        if can_write:
            print(
                f"WARNING: {self.audit.path}: {self.connection_label}: role {db.user} can write in database "
                f"{db.database}: an audit only reads; give it a role with SELECT alone",
                file=sys.stderr,
            )
