"""A lakehouse sink read by the store the checker uses, in local Spark: a Parquet table at a path
relative to the audit file, its columns under their logical names, bounded to [since, until)
exactly; and a path that is not such a table refused with one line before anything runs. (Delta
is read by the same code through its runtime: tests/integration/test_stores.py.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from delivery_semantics.audit import audits, stores
from delivery_semantics.audit.stores.lakehouse import LakehouseStore

T0 = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def _audit(tmp_path, sink: dict) -> audits.Audit:
    spec = {
        "topic": "orders",
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db"},
        "record": {"event_id": {"header": "event_id"}},
        "outbox": {"table": "outbox", "columns": {"event_id": "id", "publish_at": "created_at"}},
        "window": {"grace": "10m"},
        "sink": sink,
    }
    (tmp_path / "audit.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return audits.load(tmp_path / "audit.yaml")


def test_a_parquet_sink_is_read_by_logical_name_within_its_bounds(spark, tmp_path):
    rows = [(f"e{i}", f"k{i % 2}", i, (T0 + timedelta(minutes=10 * i)).replace(tzinfo=None)) for i in range(8)]
    spark.createDataFrame(rows, "evt string, order_key string, ver long, done_at timestamp").write.parquet(
        str(tmp_path / "tables" / "applies")
    )
    sink = {
        "store": "parquet",
        "path": "tables/applies",
        "columns": {"event_id": "evt", "key": "order_key", "version": "ver", "applied_at": "done_at"},
    }
    audit = _audit(tmp_path, sink)
    store = stores.for_section(audit, "sink")
    assert isinstance(store, LakehouseStore) and stores.session_conf(audit) == {}
    store.check()
    got = store.read(spark, "applied_at", T0 + timedelta(minutes=20), T0 + timedelta(minutes=50))
    assert got.columns == ["event_id", "key", "version", "applied_at"]
    assert sorted(r.event_id for r in got.collect()) == ["e2", "e3", "e4"]
    assert store.read(spark).count() == 8


@pytest.mark.parametrize(
    "sink, message",
    [
        ({"format": "parquet", "path": "nowhere"}, "sink.path: nowhere: no such folder (the parquet table)"),
        ({"store": "delta", "path": "."}, "sink.path: .: not a delta table (no _delta_log/ in it)"),
    ],
)
def test_a_path_that_is_not_the_table_is_refused_before_anything_runs(tmp_path, sink, message):
    audit = _audit(tmp_path, {**sink, "columns": {"event_id": "evt", "applied_at": "done_at"}})
    with pytest.raises(audits.AuditError) as e:
        stores.for_section(audit, "sink").check()
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "sink, connections, message",
    [
        ({"store": "delta", "table": "x"}, {}, "sink.path: a delta sink is the table at a path"),
        (
            {"format": "delta", "path": "p"},
            {"sink": "outbox_db"},
            "connections.sink: a delta sink is read from its path",
        ),
        ({"table": "public.applies"}, {}, "connections.sink: a jdbc sink needs its database's connection"),
        ({"store": "jdbc", "path": "p"}, {"sink": "outbox_db"}, "sink.table: a jdbc sink needs its table"),
    ],
)
def test_a_sink_names_a_table_with_a_connection_or_a_path_without(tmp_path, sink, connections, message):
    spec = {
        "topic": "orders",
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db", **connections},
        "record": {"event_id": {"header": "event_id"}},
        "outbox": {"table": "outbox", "columns": {"event_id": "id", "publish_at": "created_at"}},
        "window": {"grace": "10m"},
        "sink": {**sink, "columns": {"event_id": "evt", "applied_at": "done_at"}},
    }
    (tmp_path / "audit.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(audits.AuditError) as e:
        audits.load(tmp_path / "audit.yaml")
    assert message in str(e.value)
