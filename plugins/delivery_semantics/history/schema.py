"""Applies the versioned SQL in sql/ (V<NNN>__<name>.sql) once each, in order, under a lock; then
each repeatable file (R__<name>.sql: every view's one definition) whenever its text changed; then
writes the catalog's modes and strategies to `catalog_judged`, its anomaly kinds to `catalog_kinds`
and its producer clients to `catalog_clients`, which the views and SQL users read."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import psycopg2
import psycopg2.errors
import psycopg2.extras

from delivery_semantics import catalog, clients, locations, modes
from delivery_semantics.plumbing.endpoints import Database, ledger_database

_VERSIONED = re.compile(r"^V(\d{3})__([a-z0-9_]+)\.sql$")
_REPEATABLE = re.compile(r"^R__([a-z0-9_]+)\.sql$")
# Any constant: serialises concurrent migrators (parallel Airflow tasks) on one database.
_LOCK_KEY = 0x5E3A771C
# The checksums these files were applied with before their view statements moved to R__views.sql
# (issue 57): their tables are unchanged, so a database that applied the earlier text is current.
_BEFORE_VIEWS_MOVED = {
    2: "eb8c035f495131f5",
    5: "08cc9a8da8393b2e",
    6: "1cc998c507a6bd8a",
    7: "ffe65c2f21448e5e",
    9: "4f97e53ab045a094",
    10: "47ec76c65ee75660",
    11: "2a616350a2c08ed0",
    12: "314c5245cac2678f",
    15: "632859d9808b8ed8",
    16: "d970701866fc247f",
    17: "7630b8ea782865c1",
    18: "f0417c6e4bfab5bd",
    20: "38a77851af143ab2",
    26: "7c00d90bbaf5d2ee",
    28: "7177d3ad3669c19b",
    31: "4694cd262de1225c",
    33: "3a9cc84a84bef4b5",
    34: "a747f374a223e44b",
    35: "c82ed2ad9f2568eb",
}
_VIEW = re.compile(r"^CREATE OR REPLACE VIEW (\w+)", re.M)
_STATEMENT = re.compile(r"^\s*[^-\s]", re.M)


def migrations(sql_dir: Path | None = None) -> list[tuple[int, str, Path]]:
    sql_dir = sql_dir or locations.sql_dir()
    found = []
    for p in sorted(sql_dir.glob("V*.sql")):
        m = _VERSIONED.match(p.name)
        if not m:
            raise ValueError(f"{p.name}: versioned SQL files are named V<NNN>__<name>.sql")
        found.append((int(m.group(1)), m.group(2), p))
    versions = [v for v, _, _ in found]
    if len(versions) != len(set(versions)):
        raise ValueError(f"duplicate migration versions in {sql_dir}")
    return found


def migrate(db: Database | None = None, sql_dir: Path | None = None) -> list[str]:
    """Returns the names of the migrations applied now (empty when already current)."""
    db = db or ledger_database()
    applied_now = []
    with psycopg2.connect(**db.psycopg2_kwargs()) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        cur.execute("""CREATE TABLE IF NOT EXISTS schema_migrations (
                         version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                         applied_at timestamptz NOT NULL DEFAULT now())""")
        cur.execute("SELECT version, checksum FROM schema_migrations")
        done = dict(cur.fetchall())
        pending = []
        for version, name, path in migrations(sql_dir):
            text = path.read_text()
            checksum = hashlib.sha256(text.encode()).hexdigest()[:16]
            if version not in done:
                pending.append((version, name, path, text, checksum))
            elif done[version] not in (checksum, _BEFORE_VIEWS_MOVED.get(version)):
                raise RuntimeError(f"{path.name} changed after it was applied; add a new version instead")
        if pending:
            # The versioned files change tables only, and a view may stand on a table they change:
            # the views go first and come back from R__views.sql, as defined now.
            _drop_views(cur, sql_dir)
        for version, name, path, text, checksum in pending:
            if _STATEMENT.search(text):
                cur.execute(text)
            cur.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)", (version, name, checksum)
            )
            applied_now.append(path.name)
        applied_now += _apply_repeatables(cur, sql_dir, again=bool(pending))
        _write_catalog(cur)
    return applied_now


def repeatables(sql_dir: Path | None = None) -> list[Path]:
    found = sorted((sql_dir or locations.sql_dir()).glob("R__*.sql"))
    for p in found:
        if not _REPEATABLE.match(p.name):
            raise ValueError(f"{p.name}: repeatable SQL files are named R__<name>.sql")
    return found


def view_names(sql_dir: Path | None = None) -> list[str]:
    """The views the repeatable files define, in the order they are made."""
    return [name for path in repeatables(sql_dir) for name in _VIEW.findall(path.read_text())]


def _drop_views(cur, sql_dir: Path | None) -> None:
    cur.execute("SELECT viewname FROM pg_views WHERE schemaname = current_schema()")
    present = {name for (name,) in cur.fetchall()}
    for name in reversed(view_names(sql_dir)):
        if name in present:
            try:
                cur.execute(f'DROP VIEW "{name}"')
            except psycopg2.errors.DependentObjectsStillExist:
                raise RuntimeError(
                    f"view {name} has views of yours on it: drop them, migrate, and make them again "
                    "(the platform's views are remade from sql/R__views.sql when the schema changes)"
                ) from None


def _apply_repeatables(cur, sql_dir: Path | None, again: bool = False) -> list[str]:
    cur.execute("""CREATE TABLE IF NOT EXISTS schema_repeatables (
                     name text PRIMARY KEY, checksum text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())""")
    cur.execute("SELECT name, checksum FROM schema_repeatables")
    done = dict(cur.fetchall())
    applied = []
    for path in repeatables(sql_dir):
        text = path.read_text()
        checksum = hashlib.sha256(text.encode()).hexdigest()[:16]
        if done.get(path.name) == checksum and not again:
            continue
        cur.execute("SAVEPOINT repeatable")
        try:
            cur.execute(text)
        except (psycopg2.errors.InvalidTableDefinition, psycopg2.errors.DatatypeMismatch):
            # CREATE OR REPLACE may only append a view's columns: remake them all.
            cur.execute("ROLLBACK TO SAVEPOINT repeatable")
            _drop_views(cur, sql_dir)
            cur.execute(text)
        cur.execute(
            "INSERT INTO schema_repeatables (name, checksum) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()",
            (path.name, checksum),
        )
        applied.append(path.name)
    return applied


def _write_catalog(cur) -> None:
    # Kinds are only added or updated: a discrepancy recorded under a kind refers to its row.
    psycopg2.extras.execute_values(
        cur,
        "INSERT INTO catalog_kinds (name, jepsen, summary_column, stages, breaks, description) VALUES %s "
        "ON CONFLICT (name) DO UPDATE SET jepsen = EXCLUDED.jepsen, summary_column = EXCLUDED.summary_column, "
        "stages = EXCLUDED.stages, breaks = EXCLUDED.breaks, description = EXCLUDED.description",
        catalog.kind_rows(),
    )
    # Clients too: a run refers to its client's row.
    psycopg2.extras.execute_values(
        cur,
        "INSERT INTO catalog_clients (name, description) VALUES %s "
        "ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description",
        [(spec.name, spec.description) for spec in clients.REGISTRY.values()],
    )
    # Only added or updated: a run of a mode file since removed keeps its row, and its results.
    rows = modes.judged_rows()
    psycopg2.extras.execute_values(
        cur,
        "INSERT INTO catalog_judged (name, side, isolation, promise) VALUES %s ON CONFLICT (name) DO UPDATE "
        "SET side = EXCLUDED.side, isolation = EXCLUDED.isolation, promise = EXCLUDED.promise",
        rows,
    )
