"""The interface of a store an audit reads its outbox or its sink from.

A store answers four questions, and nothing else in the product knows how:
- `check`: before anything runs, can the rows be read, read-only, and are the mapped table and
  columns there? One line (AuditError) when not;
- `spark_env`: how does a Spark application reach the store? By environment, never by its
  arguments, which `ps` shows;
- `read`: in the Spark application, the rows under their logical names (the section's `columns`
  keys: event_id, key, seq, publish_at, status for an outbox; event_id, key, version, applied_at
  for a sink), a time column bounded to [since, until) when asked, read-only;
- how a user's table and column names are quoted, which stays inside the store.
"""

from __future__ import annotations

import os
from datetime import datetime

from delivery_semantics.plumbing.endpoints import EndpointError

# A section of an audit file: the prefix of the environment a Spark application reads it with.
SECTIONS = {"outbox": "SEMANTICS_SOURCE", "sink": "SEMANTICS_SINK"}


class StoreError(EndpointError):
    """A store that cannot be used: one line."""


class Store:
    # The audit file's word for it (a section's `store`): jdbc, delta or parquet.
    store = "abstract"

    def __init__(self, audit, section: str):
        if section not in SECTIONS:
            raise StoreError(f"{section!r} is not an audit section with a store ({', '.join(SECTIONS)})")
        self.audit, self.section = audit, section
        self.spec: dict = audit.spec[section]
        self.conn_id = self.conn_id_of(audit, section)
        self.env_prefix = SECTIONS[section]

    @staticmethod
    def conn_id_of(audit, section: str) -> str:
        return audit.spec["connections"][section]

    @staticmethod
    def env_dialect(section: str) -> str | None:
        """A jdbc store's dialect (its connection's type), as the submitter handed it to a Spark
        application."""
        return os.environ.get(f"{SECTIONS[section]}_DIALECT")

    @property
    def connection_label(self) -> str:
        return f"connections.{self.section} ({self.conn_id})"

    def check(self) -> None:
        raise NotImplementedError

    @classmethod
    def spark_env(cls, conn_id: str, prefix: str) -> dict[str, str]:
        raise NotImplementedError

    def read(self, spark, time_column: str | None = None, since: datetime | None = None, until: datetime | None = None):
        raise NotImplementedError
