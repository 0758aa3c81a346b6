"""The schema's migration on the real PostgreSQL, each case in a schema of its own: the versioned
files change tables only, every view comes from sql/R__views.sql; a change a view cannot take by
CREATE OR REPLACE remakes the views; a versioned file runs with the views dropped; and a team's view
on a platform view is never dropped behind its back: the migration stops in one line, and nothing
changed."""

from __future__ import annotations

import dataclasses
import shutil
import uuid

import psycopg2
import pytest

from delivery_semantics import locations
from delivery_semantics.history import schema
from delivery_semantics.plumbing.endpoints import Database, ledger_database


@dataclasses.dataclass(frozen=True)
class _InSchema(Database):
    schema_name: str = "public"

    def psycopg2_kwargs(self) -> dict:
        return {**super().psycopg2_kwargs(), "options": f"-c search_path={self.schema_name}"}


@pytest.fixture
def db():
    base = ledger_database()
    name = f"migration_{uuid.uuid4().hex[:10]}"
    with psycopg2.connect(**base.psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{name}"')
    yield _InSchema(**dataclasses.asdict(base), schema_name=name)
    with psycopg2.connect(**base.psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
def sql_dir(tmp_path):
    d = tmp_path / "sql"
    shutil.copytree(locations.sql_dir(), d)
    return d


def _query(db: Database, sql: str) -> list[tuple]:
    with psycopg2.connect(**db.psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall() if cur.description else []


def _views(db: Database) -> set[str]:
    return {n for (n,) in _query(db, "SELECT viewname FROM pg_views WHERE schemaname = current_schema()")}


def _columns(db: Database, view: str) -> list[str]:
    return [
        n
        for (n,) in _query(
            db,
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            f"AND table_name = '{view}' ORDER BY ordinal_position",
        )
    ]


def test_a_fresh_schema_gets_every_table_and_each_view_from_the_repeatable_file(db, sql_dir):
    applied = schema.migrate(db, sql_dir)
    assert applied[-1] == "R__views.sql" and len(applied) == len(schema.migrations(sql_dir)) + 1
    assert _views(db) == set(schema.view_names(sql_dir))
    assert "transaction_markers" in _columns(db, "v_pipeline_matrix")
    assert schema.migrate(db, sql_dir) == []  # current: nothing to do


def test_a_view_that_loses_a_column_is_made_again_and_a_teams_view_on_it_stops_the_migration(db, sql_dir):
    schema.migrate(db, sql_dir)
    views = sql_dir / "R__views.sql"
    views.write_text(
        views.read_text().replace("       count(*) FILTER (WHERE verdict = 'broken') AS broken_runs\n", "")
    )
    views.write_text(
        views.read_text().replace(
            "avg(records_per_sec) AS records_per_sec,\n", "avg(records_per_sec) AS records_per_sec\n", 1
        )
    )
    assert "broken_runs" in _columns(db, "v_trends")
    _query(db, "CREATE VIEW team_trends AS SELECT day, runs FROM v_trends")
    with pytest.raises(RuntimeError, match=r"view v_trends has views of yours on it"):
        schema.migrate(db, sql_dir)
    assert "broken_runs" in _columns(db, "v_trends") and "team_trends" in _views(db)  # nothing changed
    _query(db, "DROP VIEW team_trends")
    assert schema.migrate(db, sql_dir) == ["R__views.sql"]
    assert _columns(db, "v_trends")[-1] == "records_per_sec" and "broken_runs" not in _columns(db, "v_trends")
    assert _views(db) == set(schema.view_names(sql_dir))


def test_a_versioned_file_changes_a_column_a_view_reads_with_the_views_dropped_and_made_again(db, sql_dir):
    schema.migrate(db, sql_dir)
    last = max(v for v, _, _ in schema.migrations(sql_dir))
    (sql_dir / f"V{last + 1:03d}__wider_messages.sql").write_text(
        "ALTER TABLE runs ALTER COLUMN messages TYPE numeric;\n"
    )
    applied = schema.migrate(db, sql_dir)
    assert applied == [f"V{last + 1:03d}__wider_messages.sql", "R__views.sql"]
    assert _views(db) == set(schema.view_names(sql_dir))
    assert _query(
        db,
        "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'v_run_results' AND column_name = 'messages'",
    ) == [("numeric",)]


def test_a_runs_partitions_are_made_while_a_reader_holds_the_run_tables(db, sql_dir):
    """A checker reading a run's ranges and rows holds them while another run is created: the new
    run's partitions are attached without waiting for it (CREATE TABLE ... PARTITION OF waited,
    and deadlocked with a reader that took the tables in the other order)."""
    from delivery_semantics.history.ledger import Ledger

    schema.migrate(db, sql_dir)
    row = {"mode": "idempotent", "scenario": "none", "messages": 10, "partitions": 3, "keys": 2}
    row |= {"payload_bytes": 10, "seed": 0, "producer_config": {}}
    first, second = Ledger(db), Ledger(db)
    first.create_run({**row, "run_id": "r_held", "topic": "t_held"})
    with psycopg2.connect(**db.psycopg2_kwargs()) as reader, reader.cursor() as cur:
        cur.execute("SELECT count(*) FROM ledger_event_ranges WHERE run_id = 'r_held'")
        cur.execute("SELECT count(*) FROM ledger_event_rows WHERE run_id = 'r_held'")
        with second.conn.cursor() as c:
            c.execute("SET lock_timeout = '3s'")
        second.create_run({**row, "run_id": "r_new", "topic": "t_new"})
    first.close()
    second.close()
    placed = _query(db, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'ledger_event_ranges'::regclass")
    assert placed == [(2,)]


def test_init_prepares_the_schema_and_the_pool_and_can_run_again():
    """`semantics init` on the running stack: the schema current and the pool set, and again
    alike; with wrong credentials, one line and exit 2."""
    import json
    import os
    import subprocess
    import sys

    import sqlalchemy
    from conftest import REPO

    from delivery_semantics import catalog

    cli = [sys.executable, "-m", "delivery_semantics.entry.cli", "init"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "plugins")}
    res = subprocess.run(
        [*cli, "--pool-slots", str(catalog.CLUSTER_POOL_SLOTS)], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "init: schema current" in res.stdout, "the stack's schema is current already"
    assert f"init: pool kafka_cluster, {catalog.CLUSTER_POOL_SLOTS} slots" in res.stdout
    engine = sqlalchemy.create_engine(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    with engine.connect() as c:
        slots = c.execute(sqlalchemy.text("SELECT slots FROM slot_pool WHERE pool = :p"), {"p": catalog.CLUSTER_POOL})
        assert slots.scalar_one() == catalog.CLUSTER_POOL_SLOTS
    engine.dispose()
    again = subprocess.run([*cli, "--no-pool"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "init: schema current" in again.stdout, again.stderr
    wrong = json.loads(env["AIRFLOW_CONN_LEDGER_DB"]) | {"password": "not-the-password"}
    res = subprocess.run(
        [*cli, "--no-pool"],
        capture_output=True,
        text=True,
        env={**env, "AIRFLOW_CONN_LEDGER_DB": json.dumps(wrong)},
        timeout=120,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("init: the results database: "), res.stderr
    assert "not-the-password" not in res.stderr
