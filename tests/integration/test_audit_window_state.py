"""A continuous audit's windows judge each event with the state the earlier windows left, whatever
brought the event into the window: two hourly windows of a pipeline on the plaintext listener,
with its outbox and the log a consumer applies in the outbox database, planted with the cases that
need that state.

- `slow`: its relay took 20 minutes, so its record lands within the grace at the first window's
  end and is applied in that window; the second window reads none of its ids (its outbox row is
  too old to read again), yet the record falls due for the sink there. Applied once: no loss.
- `v5`, `v4`: versions 5 and 4 of one key, in the first and the second window. Out of order in
  the topic (and a stale overwrite in the sink), across the windows.
- `d1`, `d2`: versions 1 and 2 of another key in the first window; d1's record comes again in the
  second. A duplicate, not out of order: a copy after the first is no first copy.
Every other event is clean. Each window's kinds and event ids are compared exactly."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
import yaml
from confluent_kafka import Producer
from conftest import assert_judged, recreate_topic, semantics, spark_connect_default

import devstack
from delivery_semantics.audit import audits
from delivery_semantics.entry import spark_submit
from delivery_semantics.faults.nemesis import Nemesis
from delivery_semantics.plumbing.endpoints import database, kafka_config
from delivery_semantics.reporting import report

MIN = timedelta(minutes=1)
OT, TS = "outbox_topic", "topic_sink"
NAME = "window_state"
TOPIC = "window_state"


def _audit_file(tmp_path) -> str:
    spec = {
        "description": "two windows that need the earlier windows' state",
        "topic": TOPIC,
        "mode": "at_least_once",
        "connections": {"kafka": "kafka_default", "outbox": "outbox_db", "sink": "outbox_db"},
        "record": {"event_id": {"header": "event_id"}, "key": {"record_key": True}, "seq": {"json": "$.version"}},
        "outbox": {
            "table": "public.ws_events",
            "columns": {"event_id": "id", "key": "aggregate_id", "seq": "version", "publish_at": "created_at"},
        },
        "window": {"grace": "10m"},
        "sink": {
            "table": "public.ws_applies",
            "columns": {"event_id": "event_id", "key": "order_id", "version": "version", "applied_at": "applied_at"},
        },
    }
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    for table in ("audit_windows", "audit_window_offsets", "audit_sightings", "audit_pending", "audit_discrepancies"):
        report.query(f"DELETE FROM {table} WHERE audit = %s RETURNING 1", (NAME,))
    conf = kafka_config("kafka_default")
    recreate_topic(conf, TOPIC)
    tag = uuid.uuid4().hex[:6]
    e = lambda name: f"{tag}-{name}"
    t2 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    t1 = t2 - timedelta(hours=1)
    # name, key, version, outbox row's time, record's time (None: the row only), applied after the record
    events = [
        *((f"a{i}", f"order-a{i}", 1, t1 - (50 - i) * MIN, t1 - (49 - i) * MIN) for i in range(5)),
        ("slow", "order-slow", 1, t1 - 25 * MIN, t1 - 5 * MIN),
        ("v5", "order-v", 5, t1 - 40 * MIN, t1 - 39 * MIN),
        ("d1", "order-d", 1, t1 - 35 * MIN, t1 - 34 * MIN),
        ("d2", "order-d", 2, t1 - 33 * MIN, t1 - 32 * MIN),
        ("v4", "order-v", 4, t1 + 20 * MIN, t1 + 21 * MIN),
        *((f"b{i}", f"order-b{i}", 1, t1 + (10 + i) * MIN, t1 + (11 + i) * MIN) for i in range(5)),
    ]
    owner = psycopg2.connect(**database("outbox_app").psycopg2_kwargs())
    owner.autocommit = True
    with owner.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS public.ws_events, public.ws_applies")
        cur.execute(
            "CREATE TABLE public.ws_events (id text PRIMARY KEY, aggregate_id text NOT NULL, version int NOT NULL, "
            "created_at timestamptz NOT NULL)"
        )
        cur.execute(
            "CREATE TABLE public.ws_applies (apply_no bigserial PRIMARY KEY, event_id text NOT NULL, order_id text, "
            "version int, applied_at timestamptz NOT NULL)"
        )
        for name, key, version, created, published in events:
            cur.execute("INSERT INTO public.ws_events VALUES (%s, %s, %s, %s)", (e(name), key, version, created))
            cur.execute(
                "INSERT INTO public.ws_applies (event_id, order_id, version, applied_at) VALUES (%s, %s, %s, %s)",
                (e(name), key, version, published + MIN),
            )
    owner.close()
    p = Producer({**conf, "acks": "all", "enable.idempotence": True})
    redelivered = [("d1", "order-d", 1, None, t1 + 30 * MIN)]  # d1's record again, in the second window
    for name, key, version, _, published in sorted(events + redelivered, key=lambda ev: ev[4]):
        p.produce(
            TOPIC,
            key=key.encode(),
            value=json.dumps({"version": version}).encode(),
            headers=[("event_id", e(name).encode())],
            timestamp=int(published.timestamp() * 1000),
        )
    assert p.flush(30) == 0
    return {"path": _audit_file(tmp_path_factory.mktemp("audits")), "T": (t1, t2), "e": e}


def _found(t: datetime) -> dict:
    out: dict = {}
    for r in report.query(
        "SELECT stage, kind, event_id, copies FROM audit_discrepancies WHERE audit = %s AND window_end = %s", (NAME, t)
    ):
        out.setdefault((r["stage"], r["kind"]), {})[r["event_id"]] = r["copies"]
    return out


def test_each_window_judges_its_events_with_the_earlier_windows_state(planted):
    (t1, t2), e = planted["T"], planted["e"]
    res = semantics("audit", "run", planted["path"], *[a for t in (t1, t2) for a in ("--window-end", t.isoformat())])
    assert_judged(res)

    assert _found(t1) == {}
    assert _found(t2) == {
        (OT, "out_of_order"): {e("v4"): 1},  # version 5 of its key was read in the first window
        (TS, "stale_overwrite"): {e("v4"): 1},
        (OT, "duplicate"): {e("d1"): 1},  # read in the first window; no first copy, so not out of order
    }
    [w2] = report.query(
        "SELECT verdict, sink_verdict, sink_lost, out_of_order FROM audit_windows WHERE audit = %s AND window_end = %s",
        (NAME, t2),
    )
    # slow's record, seen within the grace of the first window and applied there, fell due for the
    # sink in the second: it is not lost
    assert (w2["sink_lost"], w2["out_of_order"]) == (0, 1)
    # neither at_least_once nor process_then_commit promises order: both kept
    assert (w2["verdict"], w2["sink_verdict"]) == ("kept", "kept")


def _snapshot() -> dict:
    tables = ("audit_windows", "audit_window_offsets", "audit_sightings", "audit_pending", "audit_discrepancies")
    return {
        t: sorted(
            json.dumps(r, default=str, sort_keys=True)
            for r in report.query(f"SELECT * FROM {t} WHERE audit = %s", (NAME,))
        )
        for t in tables
    }


@pytest.mark.slow  # minutes: three brokers stopped and started in turn
def test_both_windows_run_again_through_a_rolling_restart_leave_every_row_as_the_quiet_run_did(
    planted, healthy_cluster_after
):
    """The nemesis's rolling restart (each broker stopped, started, and the cluster in sync again
    before the next) while both windows run again, as often as it lasts: every row of the
    window state and results is the quiet run's."""
    audit = audits.load(planted["path"])
    ends = [t.isoformat() for t in planted["T"]]
    quiet = spark_submit.run(audit=audit, window_ends=ends)
    assert quiet.returncode == 0, quiet.error
    before = _snapshot()
    assert before["audit_windows"] and before["audit_discrepancies"]
    nemesis = Nemesis(kafka_config("kafka_default"), devstack.ProcessBackend())
    thread = threading.Thread(target=nemesis.rolling_restart)
    thread.start()
    runs = 0
    try:
        while thread.is_alive() or runs == 0:
            again = spark_submit.run(audit=audit, window_ends=ends)
            assert again.returncode == 0, again.error
            assert _snapshot() == before, f"run {runs} under the rolling restart"
            runs += 1
    finally:
        thread.join()
    assert [e["action"] for e in nemesis.timeline.entries].count("in_sync") == 3


def _staged_results() -> list[str]:
    """The staging tables of a window's discrepancies: written once it has read and classified."""
    return [
        r["tablename"]
        for r in report.query("SELECT tablename FROM pg_tables WHERE tablename LIKE %s", ("stg\\_window\\_disc\\_%",))
    ]


@pytest.mark.serial  # PostgreSQL restarted: every other test's connections would go with it
def test_a_window_rides_over_a_restart_of_the_results_database_between_its_read_and_its_write(planted):
    """PostgreSQL (the results database, and here the outbox's and sink's too) stopped and started
    again once the first window has read the topic, the outbox and the sink and classified them,
    as it begins to write: the application waits for the database, reads and writes that window
    again, and exits 0, with every row of the window state and results the quiet run's."""
    audit = audits.load(planted["path"])
    ends = [planted["T"][0].isoformat()]
    with spark_connect_default():  # the quiet run's rows; the restart is the checker's own, below
        quiet = spark_submit.run(audit=audit, window_ends=ends)
    assert quiet.returncode == 0, quiet.error
    before = _snapshot()
    assert before["audit_windows"] and before["audit_sightings"]
    assert not _staged_results()

    restarted = threading.Event()

    def restart_once_classified() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if _staged_results():
                devstack.stop_postgres()
                time.sleep(3)
                devstack.start_postgres()
                restarted.set()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=restart_once_classified, daemon=True)
    watcher.start()
    again = spark_submit.run(audit=audit, window_ends=ends)
    watcher.join(timeout=60)
    out = again.stdout + again.stderr
    assert restarted.is_set(), "the database was never restarted: no staged discrepancies seen"
    assert again.returncode == 0, again.error
    assert "results database: audit:window_state:" in out and "trying again in" in out, out[-3000:]
    assert _snapshot() == before
    assert not _staged_results(), "an attempt's staging tables are dropped by the next"
