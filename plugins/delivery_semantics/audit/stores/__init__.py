"""Where an audit's outbox and sink rows live, in the audit file's words (a section's `store`):
`jdbc`, a table in a database, read in the dialect of the section's connection (PostgreSQL,
MySQL/MariaDB: DIALECTS, by the connection's type, as Debezium's JDBC sink picks its dialect), or a
lakehouse table at a path, `delta` or `parquet`. Each is a `Store` subclass (stores/base.py) in its
module; a new dialect is its module and one line in DIALECTS: nothing else names one.
"""

from __future__ import annotations

import importlib

from delivery_semantics.audit.stores.base import SECTIONS, Store, StoreError

DIALECTS = {  # an Airflow connection type: the jdbc store of its dialect, as module:Class
    "postgres": "delivery_semantics.audit.stores.postgres:PostgresStore",
    "mysql": "delivery_semantics.audit.stores.mysql:MysqlStore",
}


def store_class(conn_type: str) -> type[Store]:
    if conn_type not in DIALECTS:
        raise StoreError(
            f"a connection of type {conn_type!r} holds no store the audits read; one of: {', '.join(sorted(DIALECTS))}"
        )
    module, _, cls = DIALECTS[conn_type].partition(":")
    return getattr(importlib.import_module(module), cls)


def for_section(audit, section: str, conn_type: str | None = None) -> Store:
    """The store of an audit's `section` (outbox or sink). A lakehouse table (`store: delta`,
    or `parquet`) is its path; a JDBC one is its connection's, whose type is the
    caller's when it knows it, else looked up, or, in a Spark application, read from the
    environment the submitter set (Store.spark_env)."""
    if audit.spec[section].get("store", "jdbc") != "jdbc":
        from delivery_semantics.audit.stores.lakehouse import LakehouseStore

        return LakehouseStore(audit, section)
    if conn_type is None:
        conn_type = Store.env_dialect(section)
        if conn_type is None:
            from delivery_semantics.plumbing.endpoints import get_connection

            conn_type = get_connection(Store.conn_id_of(audit, section)).conn_type or ""
    return store_class(conn_type)(audit, section)


def session_conf(audit) -> dict[str, str]:
    """The Spark settings an audit's stores need before its session starts."""
    conf: dict[str, str] = {}
    for section in SECTIONS:
        if audit.spec.get(section) and audit.spec[section].get("store", "jdbc") != "jdbc":
            conf.update(for_section(audit, section).session_conf)
    return conf


def spark_env(conn_id: str, section: str) -> dict[str, str]:
    """What a Spark application needs to read a section's jdbc store, by environment: its dialect
    (the connection's type) and its connection."""
    from delivery_semantics.plumbing.endpoints import get_connection

    conn = get_connection(conn_id)
    cls = store_class(conn.conn_type or "")
    return {f"{SECTIONS[section]}_DIALECT": conn.conn_type, **cls.spark_env(conn_id, SECTIONS[section])}


__all__ = ["DIALECTS", "SECTIONS", "Store", "StoreError", "for_section", "session_conf", "spark_env", "store_class"]
