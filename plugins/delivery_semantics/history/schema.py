"""Applies the versioned SQL in sql/ (V<NNN>__<name>.sql) once each, in order, under a lock; then
each repeatable file (R__<name>.sql: every view's one definition) whenever its text changed; then
writes the catalog's modes and strategies to `catalog_judged`, its anomaly kinds to `catalog_kinds`
and its producer clients to `catalog_clients`, which the views and SQL users read."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import psycopg2
import psycopg2.extras

from delivery_semantics import catalog, clients, modes
from delivery_semantics.plumbing.endpoints import Database, ledger_database

SQL_DIR = Path(os.environ.get("SEMANTICS_SQL_DIR", Path(__file__).resolve().parents[3] / "sql"))
_VERSIONED = re.compile(r"^V(\d{3})__([a-z0-9_]+)\.sql$")
_REPEATABLE = re.compile(r"^R__([a-z0-9_]+)\.sql$")
# Any constant: serialises concurrent migrators (parallel Airflow tasks) on one database.
_LOCK_KEY = 0x5E3A771C


def migrations(sql_dir: Path = SQL_DIR) -> list[tuple[int, str, Path]]:
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


def migrate(db: Database | None = None) -> list[str]:
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
        for version, name, path in migrations():
            text = path.read_text()
            checksum = hashlib.sha256(text.encode()).hexdigest()[:16]
            if version in done:
                if done[version] != checksum:
                    raise RuntimeError(f"{path.name} changed after it was applied; add a new version instead")
                continue
            cur.execute(text)
            cur.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)", (version, name, checksum)
            )
            applied_now.append(path.name)
        applied_now += _apply_repeatables(cur)
        _write_catalog(cur)
    return applied_now


def repeatables(sql_dir: Path = SQL_DIR) -> list[Path]:
    found = sorted(sql_dir.glob("R__*.sql"))
    for p in found:
        if not _REPEATABLE.match(p.name):
            raise ValueError(f"{p.name}: repeatable SQL files are named R__<name>.sql")
    return found


def _apply_repeatables(cur) -> list[str]:
    cur.execute("""CREATE TABLE IF NOT EXISTS schema_repeatables (
                     name text PRIMARY KEY, checksum text NOT NULL,
                     applied_at timestamptz NOT NULL DEFAULT now())""")
    cur.execute("SELECT name, checksum FROM schema_repeatables")
    done = dict(cur.fetchall())
    applied = []
    for path in repeatables():
        text = path.read_text()
        checksum = hashlib.sha256(text.encode()).hexdigest()[:16]
        if done.get(path.name) == checksum:
            continue
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
