"""A continuous audit of a real pipeline, across five hourly windows: audits/orders_stream.yaml.

The pipeline is a team's, built here from real parts: an outbox table in its own database, a
relay that publishes it at least once over SASL_SSL and marks rows SENT afterwards (a crash in
between publishes a batch twice), and a consumer that applies the topic to a projection log and
commits its offsets after the writes (a crash in between applies a batch twice, the older version
of a key over the newer). It runs on a clock five hours in the past, one round per window, with
records and rows planted across window boundaries: a record held back two windows (lost, then
late), rows and records within the grace at a window's end, a record ahead of its outbox row, a
record with no outbox row, and a final loss.

Windows 1-4 run from the command line (one Spark application). The audit DAG's check task passes
on window 4, whose events are only pending; window 5 runs through the whole DAG, whose check
fails on the planted loss and mails the audit's notifier through a mail catcher. Every window's counts and event ids
are checked exactly, and a rerun of windows 1, 3 and 5 leaves every row as it was."""

from __future__ import annotations

import json
import re
import threading
import uuid
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from confluent_kafka import Consumer, Producer
from conftest import REPO, assert_judged, recreate_topic, run, semantics, spark_connect_default, through_spark_connect

from delivery_semantics.audit import audits
from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing.endpoints import database, kafka_config
from delivery_semantics.reporting import report
from devstack import mail as stack_mail

AUDIT = audits.load(REPO / "audits" / "orders_stream.yaml")
GRACE = AUDIT.grace
MIN = timedelta(minutes=1)
STATE_TABLES = ("audit_windows", "audit_window_offsets", "audit_sightings", "audit_pending", "audit_discrepancies")
OT, TS, OS = "outbox_topic", "topic_sink", "outbox_sink"


# --------------------------------------------------------------------------- the team's pipeline


class RelayCrash(Exception):
    pass


class Pipeline:
    """The outbox, its relay, and the consumer that writes the projection log, on a clock given
    by each call. Every produce and apply is logged, to say what the audit must find."""

    def __init__(self, tag: str):
        self.tag = tag
        self.kafka = kafka_config(AUDIT.kafka_conn_id)
        self.db = psycopg2.connect(**database("outbox_app").psycopg2_kwargs())
        self.db.autocommit = True
        recreate_topic(self.kafka, AUDIT.topic)
        with self.db.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS public.order_events, public.order_applies")
            cur.execute(
                "CREATE TABLE public.order_events (seq_no bigserial PRIMARY KEY, id text NOT NULL, "
                "aggregate_id text NOT NULL, version int NOT NULL, created_at timestamptz NOT NULL, state text NOT NULL)"
            )
            cur.execute(
                "CREATE TABLE public.order_applies (apply_no bigserial PRIMARY KEY, event_id text NOT NULL, "
                "order_id text, version int, applied_at timestamptz NOT NULL)"
            )
        self.producer = Producer({**self.kafka, "acks": "all", "enable.idempotence": True})
        self.produced: list[str] = []
        self.applied: list[str] = []
        self.group = f"projection-{tag}"
        self.n = 0

    def eid(self, name: str) -> str:
        return f"{self.tag}-{name}"

    # the service writes its outbox
    def write(self, name: str, created_at: datetime, key: str | None = None, version: int = 1, state="PENDING"):
        with self.db.cursor() as cur:
            cur.execute(
                "INSERT INTO public.order_events (id, aggregate_id, version, created_at, state) VALUES (%s, %s, %s, %s, %s)",
                (self.eid(name), key or f"order-{name}", version, created_at, state),
            )
        return self.eid(name)

    def orders(self, prefix: str, start: datetime, count: int, every: timedelta = 3 * MIN) -> list[str]:
        return [self.write(f"{prefix}{i}", start + i * every) for i in range(1, count + 1)]

    def publish(self, event_id: str, key: str, version: int, at: datetime) -> None:
        self.producer.produce(
            AUDIT.topic,
            key=key.encode(),
            value=json.dumps({"version": version}).encode(),
            headers=[("event_id", event_id.encode())],
            timestamp=int(at.timestamp() * 1000),
        )
        self.produced.append(event_id)

    def relay(self, until: datetime, delay=MIN, delays=None, hold=(), crash=False) -> None:
        """Publishes the PENDING rows created before `until`, each stamped created_at + delay, then
        marks them SENT. `hold`: marked SENT, never published (stuck in a queue). `crash`: dies
        after the flush, before marking."""
        delays = delays or {}
        with self.db.cursor() as cur:
            cur.execute(
                "SELECT seq_no, id, aggregate_id, version, created_at FROM public.order_events "
                "WHERE state = 'PENDING' AND created_at < %s ORDER BY seq_no",
                (until,),
            )
            rows = cur.fetchall()
        for _, eid, key, version, created in rows:
            if eid not in hold:
                self.publish(eid, key, version, created + delays.get(eid, delay))
        assert self.producer.flush(30) == 0
        if crash:
            raise RelayCrash()
        with self.db.cursor() as cur:
            cur.execute("UPDATE public.order_events SET state = 'SENT' WHERE seq_no = ANY(%s)", ([r[0] for r in rows],))

    def consume(self, crash=False, redelivered_after=4 * MIN) -> None:
        """Applies every record to the projection log, applied_at = the record's time plus a
        minute (plus `redelivered_after` for a record applied before), committing after each
        write. `crash`: writes everything, commits nothing, and dies."""
        c = Consumer(
            {**self.kafka, "group.id": self.group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
        )
        assigned = threading.Event()
        c.subscribe([AUDIT.topic], on_assign=lambda *_: assigned.set())
        idle = 0
        try:
            while idle < 2:  # two empty polls after the partitions were assigned: drained
                m = c.poll(2)
                if m is None:
                    idle += assigned.is_set()
                    continue
                idle = 0
                assert m.error() is None, m.error()
                eid = dict(m.headers())["event_id"].decode()
                at = datetime.fromtimestamp(m.timestamp()[1] / 1000, UTC) + MIN
                if eid in self.applied:
                    at += redelivered_after
                with self.db.cursor() as cur:
                    cur.execute(
                        "INSERT INTO public.order_applies (event_id, order_id, version, applied_at) VALUES (%s, %s, %s, %s)",
                        (eid, m.key().decode(), json.loads(m.value())["version"], at),
                    )
                self.applied.append(eid)
                if not crash:
                    c.commit(m, asynchronous=False)
        finally:
            c.close()

    def close(self):
        self.db.close()


# --------------------------------------------------------------------------- the five rounds


def _window(t: datetime) -> dict:
    rows = report.query("SELECT * FROM audit_windows WHERE audit = %s AND window_end = %s", (AUDIT.name, t))
    assert rows, f"no window ending {t}"
    return rows[0]


def _found(t: datetime) -> dict:
    out: dict = {}
    for r in report.query(
        "SELECT stage, kind, event_id, copies FROM audit_discrepancies WHERE audit = %s AND window_end = %s",
        (AUDIT.name, t),
    ):
        out.setdefault((r["stage"], r["kind"]), {})[r["event_id"]] = r["copies"]
    return out


def _snapshot() -> dict:
    return {
        t: sorted(
            json.dumps(r, default=str, sort_keys=True)
            for r in report.query(f"SELECT * FROM {t} WHERE audit = %s", (AUDIT.name,))
        )
        for t in STATE_TABLES
    }


AIRFLOW = [str(REPO / ".venv" / "bin" / "airflow")]


def _dags_test(t: datetime):
    return run([*AIRFLOW, "dags", "test", AUDIT.dag_id, t.isoformat()], timeout=900, env=through_spark_connect())


@pytest.fixture(scope="module")
def pipeline():
    for table in STATE_TABLES:
        report.query(f"DELETE FROM {table} WHERE audit = %s RETURNING 1", (AUDIT.name,))
    with psycopg2.connect(**database("ledger_db").psycopg2_kwargs()) as c, c.cursor() as cur:
        audits.forget_state(cur, AUDIT.name)
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    T = [end - timedelta(hours=5 - i) for i in range(6)]  # T[0] .. T[5] = end
    p = Pipeline(uuid.uuid4().hex[:6])
    e = p.eid
    ids: dict = {"T": T}

    # Round 1. L is marked SENT but stuck in a queue; X crosses into window 2 within the grace.
    ids["w1"] = p.orders("a", T[0], 10)
    p.write("L", T[1] - 30 * MIN)
    p.write("X", T[1] - 5 * MIN)
    p.relay(T[1], delays={e("X"): 7 * MIN}, hold={e("L")})
    p.consume()

    # Round 2. The relay dies after publishing its first five rows; its restart publishes all ten.
    # B's row is within the grace at the window's end; its record comes in window 3.
    ids["w2"] = p.orders("b", T[1], 10)
    p.write("B", T[2] - 5 * MIN)
    with pytest.raises(RelayCrash):
        p.relay(T[1] + 16 * MIN, crash=True)
    p.relay(T[2], delay=6 * MIN, delays={e("B"): 7 * MIN})
    ids["relay_twice"] = sorted(ids["w2"][:5])
    p.consume()

    # Round 3. L's record finally lands; R has no outbox row at all. The consumer writes the
    # last four records (K's versions 1 and 2 among them) and dies before committing.
    ids["w3"] = p.orders("c", T[2], 10)
    p.publish(e("L"), "order-L", 1, T[2] + 20 * MIN)
    p.publish(e("R"), "order-R", 1, T[2] + 10 * MIN)
    p.relay(T[3])
    p.consume()
    crashed = [p.write("K1", T[2] + 40 * MIN, "order-K", 1), p.write("K2", T[2] + 41 * MIN, "order-K", 2)]
    crashed += p.orders("d", T[2] + 41 * MIN, 2, MIN)
    p.relay(T[3])
    p.consume(crash=True)
    p.consume()
    ids["applied_twice"] = sorted(crashed)

    # Round 4, pending only: P's record comes ahead of its outbox row (written in round 5), and
    # Q's row is published a minute after the window's end.
    ids["w4"] = p.orders("e", T[3], 10)
    p.publish(e("P"), "order-P", 1, T[4] - 3 * MIN)
    p.write("Q", T[4] - 4 * MIN)
    p.relay(T[4], delays={e("Q"): 5 * MIN})
    p.consume()

    # Round 5: P's row commits; Z is marked SENT and never published.
    p.write("P", T[4] + MIN, state="SENT")
    ids["w5"] = p.orders("f", T[4], 10)
    p.write("Z", T[5] - 30 * MIN)
    p.relay(T[5], hold={e("Z")})
    p.consume()
    p.close()
    ids["e"] = e
    ids["produced"] = p.produced
    ids["applied"] = p.applied
    return ids


def test_the_pipeline_did_what_was_planted(pipeline):
    """The relay crash published five events twice; the consumer crash applied four twice."""
    produced, applied = pipeline["produced"], pipeline["applied"]
    assert sorted(i for i in set(produced) if produced.count(i) > 1) == pipeline["relay_twice"]
    twice = sorted(i for i in set(applied) if applied.count(i) > 1)
    assert twice == sorted(set(pipeline["relay_twice"]) | set(pipeline["applied_twice"]))


def test_five_windows_find_exactly_what_was_planted(pipeline):
    T, e = pipeline["T"], pipeline["e"]
    minutes = 60_000

    # Windows 1 to 4: one Spark application, from the command line.
    res = semantics("audit", "run", AUDIT.name, *[a for t in T[1:5] for a in ("--window-end", t.isoformat())])
    assert_judged(res)

    w1 = _window(T[1])
    assert _found(T[1]) == {(OT, "lost_acked"): {e("L"): 0}, (OS, "lost"): {e("L"): 0}}
    assert (w1["window_start"], w1["outbox_due"], w1["delivered"], w1["pending_outbox"]) == (None, 11, 10, 1)
    assert (w1["verdict"], w1["broken_by"], w1["sink_verdict"], w1["open_discrepancies"]) == (
        "broken",
        "lost_acked",
        "kept",
        2,
    )

    delays = report.query("SELECT * FROM v_audit_delays WHERE audit = %s ORDER BY window_end", (AUDIT.name,))
    assert delays[0]["window_end"] == T[1] and delays[0]["outbox_topic_p50_ms"] == minutes  # the relay's minute

    w2 = _window(T[2])
    twice = {i: 2 for i in pipeline["relay_twice"]}
    assert _found(T[2]) == {(OT, "duplicate"): twice, (TS, "duplicate"): twice}
    assert (w2["window_start"], w2["records_read"], w2["outbox_due"], w2["delivered"]) == (T[1], 16, 11, 11)
    assert (w2["duplicate_copies"], w2["pending_outbox"], w2["pending_records"]) == (5, 1, 0)
    # L's two losses are still open, with this window's ten duplicates
    assert (w2["verdict"], w2["sink_verdict"], w2["open_discrepancies"]) == ("kept", "kept", 12)

    w3 = _window(T[3])
    k1 = e("K1")
    assert _found(T[3]) == {
        (OT, "late"): {e("L"): 1},
        (OT, "unexpected"): {e("R"): 1},
        (TS, "duplicate"): {i: 2 for i in pipeline["applied_twice"]},
        (TS, "stale_overwrite"): {k1: 1},
        (OS, "late"): {e("L"): 1},
    }
    late = {
        r["stage"]: (r["delay_ms"], r["lost_in_window"])
        for r in report.query(
            "SELECT stage, delay_ms, lost_in_window FROM audit_discrepancies WHERE audit = %s AND kind = 'late'",
            (AUDIT.name,),
        )
    }
    # L's outbox row was written 30 minutes before T1; its record is stamped 20 minutes after
    # T2 and applied a minute later.
    assert late == {OT: (110 * minutes, T[1]), OS: (111 * minutes, T[1])}
    losses = report.query(
        "SELECT stage, resolved_in_window FROM v_audit_losses WHERE audit = %s AND event_id = %s", (AUDIT.name, e("L"))
    )
    assert {r["stage"]: r["resolved_in_window"] for r in losses} == {OT: T[3], OS: T[3]}
    assert (w3["outbox_due"], w3["delivered"], w3["late"], w3["verdict"]) == (15, 15, 1, "kept")
    assert (w3["sink_duplicates"], w3["stale_overwrites"], w3["open_discrepancies"]) == (4, 1, 6)

    # Window 4 holds only pending events (P's record, Q's row): the DAG's check task passes.
    # Window 5: Z is lost past the grace; the check fails and the notifier mails on-call.
    with stack_mail.catcher() as mails:
        ok = run([*AIRFLOW, "tasks", "test", AUDIT.dag_id, "check", T[4].isoformat()], 300, through_spark_connect())
        w4 = _window(T[4])
        assert _found(T[4]) == {}, ok.stdout[-3000:]
        assert (w4["pending_records"], w4["pending_outbox"], w4["open_discrepancies"]) == (1, 1, 0)
        assert (w4["verdict"], w4["sink_verdict"]) == ("kept", "kept")
        assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
        assert mails == []
        assert [
            r["event_id"] for r in report.query("SELECT event_id FROM audit_pending WHERE audit = %s", (AUDIT.name,))
        ] == [e("P")]

        failed = _dags_test(T[5])
        out = failed.stdout + failed.stderr
        assert _found(T[5]) == {(OT, "lost_acked"): {e("Z"): 0}, (OS, "lost"): {e("Z"): 0}}
        w5 = _window(T[5])
        assert (w5["outbox_due"], w5["delivered"], w5["pending_records"], w5["verdict"]) == (13, 12, 0, "broken")
        assert "BrokenPromise" in out and "the at_least_once promise is broken by lost_acked" in out
        assert len(mails) == 1, out[-3000:]
        assert "orders-oncall@example.com" in mails[0] and AUDIT.dag_id in mails[0]

    # The views SQL users read.
    kinds = report.query(
        "SELECT window_end, stage, kind, events FROM v_audit_window_kinds WHERE audit = %s", (AUDIT.name,)
    )
    assert {(r["window_end"], r["stage"], r["kind"]): r["events"] for r in kinds}[(T[3], TS, "duplicate")] == 4
    still_open = report.query(
        "SELECT event_id FROM v_audit_open_discrepancies WHERE audit = %s AND kind LIKE 'lost%%'", (AUDIT.name,)
    )
    assert sorted(r["event_id"] for r in still_open) == [e("Z"), e("Z")]
    delays = report.query("SELECT * FROM v_audit_delays WHERE audit = %s ORDER BY window_end", (AUDIT.name,))
    # The 3-hour horizon: the fifth window's merge dropped the first window's sightings, by partition.
    assert [d["window_end"] for d in delays] == T[2:]
    partitions = report.query(audits.SIGHTINGS_PARTITIONS.format(mark="%s"), (audits.sightings_partition(AUDIT.name),))
    assert [r["relname"] for r in partitions] == [audits.sightings_partition(AUDIT.name, t) for t in T[2:]]
    assert {w["window_end"]: w["dedup_horizon_seconds"] for w in map(_window, T[1:])} == dict.fromkeys(T[1:], 3 * 3600)
    trend = report.query(
        "SELECT at, events, lost, late FROM v_audit_trends WHERE audit = %s AND source = 'window' ORDER BY at",
        (AUDIT.name,),
    )
    assert [t["at"] for t in trend] == T[1:], "a trend point per window"
    assert (trend[-1]["events"], trend[-1]["lost"]) == (13, 1), "the fifth window: 13 due, Z lost"

    # A rerun leaves every row as it was: the first window (which reads everything before its
    # end), the third (a late record, a consumer crash) and the fifth (a carried record resolved,
    # a loss), in one application, after the windows that followed them.
    before = _snapshot()
    with spark_connect_default():
        again = spark_submit.run(audit=AUDIT, window_ends=[T[1].isoformat(), T[3].isoformat(), T[5].isoformat()])
    assert again.returncode == 0, again.error
    assert _snapshot() == before


def test_a_window_before_the_latest_recorded_one_is_refused(pipeline):
    T = pipeline["T"]
    before = _snapshot()
    res = run(
        [str(REPO / "local" / "semantics"), "audit", "run", AUDIT.name, "--window-end", (T[2] + 30 * MIN).isoformat()]
    )
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "windows run in order" in res.stderr
    assert _snapshot() == before


def test_the_continuous_audit_commands_in_the_docs_run(pipeline):
    """The `sh` block of docs/RECONCILE.md's continuous-audit section: validate, then the window
    ending at the current hour (the one after the five above)."""
    text = (REPO / "docs" / "RECONCILE.md").read_text()
    commands = [ln for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S) for ln in block.splitlines() if ln]
    assert len(commands) == 2

    def hour() -> datetime:
        return datetime.now(UTC).replace(minute=0, second=0, microsecond=0)

    # The command reads the clock itself: an hour may turn while it runs.
    first = hour()
    for line in commands:
        res = run(["bash", "-c", line], timeout=900)
        if " audit run " in line:
            assert_judged(res)
        else:
            assert res.returncode == 0, (line, res.stderr[-2000:])
    windows = report.query(
        "SELECT * FROM audit_windows WHERE audit = %s AND window_end BETWEEN %s AND %s", (AUDIT.name, first, hour())
    )
    assert len(windows) == 1, windows
    assert windows[0]["window_start"] == pipeline["T"][5]


def test_an_audit_that_stops_is_forgotten_by_command_and_its_results_stay(pipeline):
    """`audit forget NAME` drops the state the last windows kept (sightings partitions, pending
    records) and keeps every window's results; forgetting again is refused, with nothing left."""

    def rows(table: str) -> int:
        return report.query(f"SELECT count(*) AS n FROM {table} WHERE audit = %s", (AUDIT.name,))[0]["n"]

    def partitions() -> list:
        return report.query(audits.SIGHTINGS_PARTITIONS.format(mark="%s"), (audits.sightings_partition(AUDIT.name),))

    results = {t: rows(t) for t in ("audit_windows", "audit_discrepancies")}
    assert partitions(), "the horizon's partitions"
    res = run([str(REPO / "local" / "semantics"), "audit", "forget", AUDIT.name])
    assert res.returncode == 0, res.stderr
    assert "sightings partitions" in res.stdout and "results are kept" in res.stdout
    assert partitions() == []
    assert rows("audit_sightings") == 0
    assert rows("audit_pending") == 0
    assert {t: rows(t) for t in results} == results
    again = run([str(REPO / "local" / "semantics"), "audit", "forget", AUDIT.name])
    assert again.returncode == 2 and "has no state to forget" in again.stderr
    assert again.stderr.strip().count("\n") == 0
