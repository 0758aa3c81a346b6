"""A continuous audit over the stores teams really have, for real: audits/orders_lakehouse.yaml, an
outbox in MariaDB (read in two partitions by a user that may only SELECT), a topic on the SASL_SSL
listener, and a Delta table a sink job appended to. Two hourly windows in the past, planted with
a lost-then-late event, a loss, a record never applied and a record applied twice: every case is
found exactly, by event id, in the window it belongs to. Window 1 runs from the command line,
window 2 through the audit's DAG. Bad input about these stores is refused with one line and
exit 2 before anything is written."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from conftest import REPO, assert_judged, recreate_topic, run, semantics, through_spark_connect

from delivery_semantics.audit import audits
from delivery_semantics.audit.stores.mysql import MysqlStore
from delivery_semantics.plumbing.endpoints import kafka_config
from delivery_semantics.plumbing.spark import spark_jars
from delivery_semantics.reporting import report

pytestmark = pytest.mark.timeout(1500)
AUDIT = audits.load(REPO / "audits" / "orders_lakehouse.yaml")
SINK = (AUDIT.path.parent / AUDIT.sink["path"]).resolve()
STATE_TABLES = ("audit_windows", "audit_window_offsets", "audit_sightings", "audit_pending", "audit_discrepancies")
OT, TS, OS = "outbox_topic", "topic_sink", "outbox_sink"
MIN = timedelta(minutes=1)
AIRFLOW = str(REPO / ".venv" / "bin" / "airflow")


def _owner():
    return MysqlStore.connect(MysqlStore.database("outbox_mysql_app"), autocommit=True)


def write_delta(rows: list[tuple[str, str, int, datetime]]) -> None:
    """The sink job: appends each applied record to a Delta table, as a Spark sink writes one."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("sink-job")
        .config("spark.jars", spark_jars())
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        df = spark.createDataFrame(rows, "event_id string, order_id string, version int, applied_at timestamp")
        df.write.format("delta").mode("append").save(str(SINK))
    finally:
        spark.stop()


def _found(t: datetime) -> dict:
    out: dict = {}
    for r in report.query(
        "SELECT stage, kind, event_id, copies FROM audit_discrepancies WHERE audit = %s AND window_end = %s",
        (AUDIT.name, t),
    ):
        out.setdefault((r["stage"], r["kind"]), {})[r["event_id"]] = r["copies"]
    return out


def _window(t: datetime) -> dict:
    return report.query("SELECT * FROM audit_windows WHERE audit = %s AND window_end = %s", (AUDIT.name, t))[0]


@pytest.fixture(scope="module")
def planted():
    for table in STATE_TABLES:
        report.query(f"DELETE FROM {table} WHERE audit = %s RETURNING 1", (AUDIT.name,))
    t1 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    T = [t1 - timedelta(hours=1), t1, t1 + timedelta(hours=1)]
    tag = uuid.uuid4().hex[:6]
    e = lambda name: f"{tag}-{name}"
    conf = kafka_config(AUDIT.kafka_conn_id)
    recreate_topic(conf, AUDIT.topic)
    with _owner() as db, db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS order_events")
        cur.execute(
            "CREATE TABLE order_events (seq_no bigint AUTO_INCREMENT PRIMARY KEY, id varchar(64) NOT NULL, "
            "aggregate_id varchar(64) NOT NULL, version int NOT NULL, created_at datetime(6) NOT NULL, "
            "state varchar(16) NOT NULL)"
        )
    outbox, records, applied = [], [], []

    def order(name: str, created: datetime, publish_after=MIN, apply_after=MIN, applies=1, publish=True):
        outbox.append((e(name), f"order-{name}", 1, created.replace(tzinfo=None), "SENT"))
        if publish is True:
            published = created + publish_after
            records.append((e(name), f"order-{name}", published))
            for i in range(applies):
                applied.append(
                    (e(name), f"order-{name}", 1, (published + apply_after + 4 * i * MIN).replace(tzinfo=None))
                )

    for i in range(1, 7):
        order(f"a{i}", T[0] + 5 * i * MIN)
    order("L", T[0] + 20 * MIN, publish_after=60 * MIN)  # held back: lost in window 1, late in window 2
    order("S", T[0] + 30 * MIN, applies=0)  # published, never applied to the sink
    order("D", T[0] + 35 * MIN, applies=2)  # applied twice
    for i in range(1, 6):
        order(f"b{i}", T[1] + 5 * i * MIN)
    order("Z", T[1] + 10 * MIN, publish=False)  # marked SENT, never published

    with _owner() as db, db.cursor() as cur:
        cur.executemany(
            "INSERT INTO order_events (id, aggregate_id, version, created_at, state) VALUES (%s, %s, %s, %s, %s)",
            outbox,
        )
    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    for eid, key, at in sorted(records, key=lambda r: r[2]):
        p.produce(
            AUDIT.topic,
            key=key.encode(),
            value=json.dumps({"version": 1}).encode(),
            headers=[("event_id", eid.encode())],
            timestamp=int(at.timestamp() * 1000),
        )
    assert p.flush(30) == 0
    shutil.rmtree(SINK, ignore_errors=True)
    write_delta(applied)
    return {"T": T, "e": e}


def test_a_mariadb_outbox_a_topic_and_a_delta_sink_audited_in_windows(planted):
    T, e = planted["T"], planted["e"]
    res = semantics("audit", "run", AUDIT.name, "--window-end", T[1].isoformat())
    assert res.returncode == 1 and assert_judged(res), "the planted loss breaks the promise and the sink's"
    assert _found(T[1]) == {
        (OT, "lost_acked"): {e("L"): 0},
        (OS, "lost"): {e("L"): 0, e("S"): 0},
        (TS, "lost"): {e("S"): 0},
        (TS, "duplicate"): {e("D"): 2},
    }
    w1 = _window(T[1])
    assert (w1["outbox_due"], w1["delivered"], w1["verdict"]) == (9, 8, "broken")

    failed = run([AIRFLOW, "dags", "test", AUDIT.dag_id, T[2].isoformat()], 900, through_spark_connect())
    out = failed.stdout + failed.stderr
    assert _found(T[2]) == {
        (OT, "late"): {e("L"): 1},
        (OS, "late"): {e("L"): 1},
        (OT, "lost_acked"): {e("Z"): 0},
        (OS, "lost"): {e("Z"): 0},
    }, out[-3000:]
    w2 = _window(T[2])
    assert (w2["outbox_due"], w2["delivered"], w2["late"], w2["verdict"]) == (6, 5, 1, "broken")
    assert "the at_least_once promise is broken by lost_acked" in out


def _variant(tmp_path: Path, edit) -> Path:
    spec = yaml.safe_load(AUDIT.path.read_text())
    spec["sink"]["path"] = str(SINK)
    edit(spec)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


INJECTION = "order_events` WHERE 1=0; DROP TABLE order_events; -- "


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["outbox"].update(table=INJECTION), "outbox.table: "),
        (
            lambda s: s["outbox"].update(table="no_such_table"),
            "outbox.table: Table 'outbox_demo.no_such_table' doesn't exist",
        ),
        (
            lambda s: s["outbox"]["columns"].update(seq="no_such_column"),
            "outbox.columns: Unknown column 'no_such_column'",
        ),
        (
            lambda s: s["sink"].update(path=str(SINK.parent / "no_such_table")),
            "no_such_table: no such folder (the delta table)",
        ),
        (lambda s: s["sink"].update(path="/etc"), "sink.path: /etc: outside the data roots the operator allows"),
        (lambda s: s["sink"].update(format="iceberg"), "sink.format: 'iceberg' is not one of"),
        (lambda s: s["record"].update(format="xml"), "record.format: 'xml' is not one of"),
    ],
)
def test_bad_stores_are_refused_with_one_line_and_exit_2(planted, tmp_path, edit, message):
    path = _variant(tmp_path, edit)
    before = report.query("SELECT count(*) AS n FROM audit_windows WHERE audit = 'variant'")[0]["n"]
    res = run([str(REPO / "local" / "semantics"), "audit", "validate", str(path), "--endpoints"])
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and res.stderr.strip().count("\n") == 0, res.stderr
    assert report.query("SELECT count(*) AS n FROM audit_windows WHERE audit = 'variant'")[0]["n"] == before
    with _owner() as db, db.cursor() as cur:
        cur.execute("SELECT count(*) FROM order_events")
        assert cur.fetchone()[0] == 15, "the outbox is as it was"
