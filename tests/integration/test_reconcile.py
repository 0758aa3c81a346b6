"""The Spark checker on planted anomalies: exact counts and exact event ids, idempotent reruns,
malformed input, unreachable endpoints. Real Kafka, PostgreSQL and spark-submit."""

from __future__ import annotations

import json
import time
import uuid

import jsonschema
import psycopg2
import psycopg2.extras
import pytest
from confluent_kafka import Producer
from conftest import assert_judged, semantics, spark_cluster_apps

from delivery_semantics.entry import spark_submit
from delivery_semantics.history.ledger import Ledger, Outcome
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import ledger_database
from delivery_semantics.records.event import Event
from delivery_semantics.reporting import dedup, results_file
from delivery_semantics.workload import load


def _db():
    return psycopg2.connect(**ledger_database().psycopg2_kwargs())


def _send(producer: Producer, topic: str, event_id: str | None, key: str, seq: int, header_value: bytes | None = None):
    headers = [("seq", str(seq).encode()), ("publish_at", str(int(time.time() * 1000)).encode())]
    if event_id is not None:
        headers.append(("event_id", event_id.encode()))
    elif header_value is not None:
        headers.append(("event_id", header_value))
    positions = []
    producer.produce(
        topic,
        key=key,
        value=b"payload",
        headers=headers,
        on_delivery=lambda err, msg: positions.append((msg.partition(), msg.offset())),
    )
    producer.flush(30)
    return positions[0]


@pytest.fixture(scope="module")
def planted(kafka_conf_module):
    """A one-partition topic and a platform ledger with one of every anomaly. Its records carry
    their fields in headers, as runs recorded before the value layout (sql/V021) did: the checker
    still reads those."""
    conf = kafka_conf_module
    tag = uuid.uuid4().hex[:8]
    run_id, topic = f"plant_{tag}", f"plant-{tag}"
    topics.ensure_topic(conf, topic, partitions=1)
    e = lambda i: f"{run_id}-{i}"  # the generator's ids: the checker derives them from n
    ledger_rows = [(e(i), "kA", i, "acked") for i in range(10)] + [
        (e(10), "kB", 0, "acked"),
        (e(11), "kB", 1, "acked"),
        (e(12), "kB", 2, "acked"),
        (e(13), "kB", 3, "failed"),
        (e(14), "kB", 4, "unknown"),
        (e(15), "kB", 5, "failed"),
        (e(16), "kC", 0, "acked"),
        (e(17), "kC", 1, "acked"),
        (e(18), "kC", 2, "acked"),
        (e(19), "kD", 0, None),
        (e(20), "kE", 0, None),
        (e(21), "kF", 0, None),  # e21 and e22: one committed transaction, of which only e21 landed
        (e(22), "kF", 1, None),
    ]
    p = Producer({**conf, "acks": "all", "enable.idempotence": False, "linger.ms": 0})
    pos = {}
    for i in range(10):
        pos[e(i)] = _send(p, topic, e(i), "kA", i)
    for _ in range(2):
        _send(p, topic, e(10), "kB", 0)
    for _ in range(3):
        _send(p, topic, e(11), "kB", 1)
    _send(p, topic, e(14), "kB", 4)
    _send(p, topic, e(15), "kB", 5)
    _send(p, topic, e(16), "kC", 0)
    _send(p, topic, e(18), "kC", 2)
    _send(p, topic, e(17), "kC", 1)  # seq 1 after seq 2: out of order
    _send(p, topic, f"{run_id}-u1", "kX", 0)  # in the topic, not in the ledger
    _send(p, topic, None, "kM", 0)  # no event id header
    _send(p, topic, None, "kM", 1, b"   ")  # blank event id
    _send(p, topic, e(20), "kE", 0)  # ledger has no outcome (pending), yet it landed

    tp = Producer({**conf, "transactional.id": f"plant-{tag}"})
    tp.init_transactions(30)

    def in_transaction(commit: bool, eid: str = e(19), key: str = "kD") -> list:
        positions = []
        tp.begin_transaction()
        tp.produce(
            topic,
            key=key,
            value=b"payload",
            headers=[("event_id", eid.encode()), ("seq", b"0")],
            on_delivery=lambda err, msg: positions.append((msg.partition(), msg.offset())),
        )
        tp.flush(30)
        (tp.commit_transaction if commit else tp.abort_transaction)(30)
        return positions

    aborted_pos = in_transaction(commit=False)
    committed_pos = in_transaction(commit=True)
    torn_pos = in_transaction(commit=True, eid=e(21), key="kF")

    lg = Ledger()
    lg.migrate()
    lg.create_run(
        {
            "run_id": run_id,
            "mode": "transactional",
            "scenario": "none",
            "topic": topic,
            "partitions": 1,
            "messages": len(ledger_rows),
            "keys": 5,
            "payload_bytes": 7,
            "record_layout": "headers",
            "seed": 0,
            "producer_config": {},
            "status": "completed",
        }
    )
    now = int(time.time() * 1000)
    lg.copy_events(run_id, [Event(n, eid, key, seq, now, b"") for n, (eid, key, seq, _) in enumerate(ledger_rows)])
    pos[e(12)] = pos[e(0)]  # e12's ack at a position that holds e0: an inconsistent offset
    outcomes = [Outcome(eid, st, *(pos.get(eid, (0, None)))) for eid, _, _, st in ledger_rows if st]
    outcomes += [
        Outcome(e(19), "aborted", *aborted_pos[0], txn_no=1),
        Outcome(e(19), "acked", *committed_pos[0], txn_no=2),
        Outcome(e(21), "acked", *torn_pos[0], txn_no=3),
        Outcome(e(22), "acked", 0, None, txn_no=3),
    ]
    lg.copy_outcomes(run_id, 1, outcomes)
    lg.close()
    return {"run_id": run_id, "topic": topic, "e": e}


@pytest.fixture(scope="module")
def kafka_conf_module(stack_env):
    from delivery_semantics.plumbing.endpoints import kafka_config

    return kafka_config()


def _discrepancies(rid: str) -> dict[tuple[str, str], dict[str, int]]:
    with _db() as c, c.cursor() as cur:
        cur.execute(
            "SELECT isolation, kind, event_id, copies FROM reconcile_discrepancies WHERE reconciliation_id = %s", (rid,)
        )
        out: dict = {}
        for iso, kind, eid, copies in cur.fetchall():
            out.setdefault((iso, kind), {})[eid] = copies
        return out


def _summary(rid: str) -> dict[str, dict]:
    with _db() as c, c.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
        cur.execute("SELECT * FROM reconcile_summary WHERE reconciliation_id = %s", (rid,))
        return {r["isolation"]: dict(r) for r in cur.fetchall()}


def _snapshot(rid: str) -> dict[str, list]:
    """The results' rows, and the deduplicated copy's from whichever store holds it."""
    tables = {
        "reconcile_summary": "isolation",
        "reconcile_discrepancies": "isolation, kind, event_id",
        "reconcile_offsets": '"partition"',
    }
    with _db() as c, c.cursor() as cur:
        out = {}
        for t, order in tables.items():
            cur.execute(f"SELECT * FROM {t} WHERE reconciliation_id = %s ORDER BY {order}", (rid,))
            out[t] = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in cur.fetchall()]
    out["dedup_copy"] = [
        {k: bytes(v) if isinstance(v, memoryview) else v for k, v in r.items()} for r in dedup.rows(rid)
    ]
    return out


def test_planted_anomalies_are_found_with_exact_counts_and_event_ids(planted, tmp_path):
    """`reconcile --run-id` as a CI step runs it: it exits 1, the transactional promise being broken,
    and its results file says by what."""
    e, rid = planted["e"], planted["run_id"]
    output = tmp_path / "results.json"
    res = semantics("reconcile", "--run-id", rid, "--output", str(output))
    assert res.returncode == 1 and assert_judged(res), res.stderr[-3000:]
    doc = json.loads(output.read_text())
    jsonschema.validate(doc, results_file.schema())
    [judged] = [r for r in doc["results"] if r["verdict"] == "broken"]
    assert (judged["subject"]["kind"], judged["subject"]["name"], judged["isolation"]) == ("run", rid, "read_committed")
    assert judged["broken_by"] == ["duplicate", "lost_acked", "torn_transaction"]
    assert (judged["counts"]["lost_acked"], judged["counts"]["torn_events"]) == (2, 1)
    d = _discrepancies(rid)
    for iso in ("read_committed", "read_uncommitted"):
        assert d[(iso, "lost_acked")] == {e(12): 0, e(22): 0}
        assert d[(iso, "inconsistent_offset")] == {e(12): 0}
        assert d[(iso, "lost_unacked")] == {e(13): 0}
        assert d[(iso, "unknown_landed")] == {e(14): 1, e(15): 1, e(20): 1}
        assert d[(iso, "unexpected")] == {f"{rid}-u1": 1}
        assert d[(iso, "out_of_order")] == {e(17): 1}
        assert set(d[(iso, "malformed")]) == {"partition 0 offset 21", "partition 0 offset 22"}
    assert d[("read_committed", "duplicate")] == {e(10): 2, e(11): 3}
    assert d[("read_uncommitted", "duplicate")] == {e(10): 2, e(11): 3, e(19): 2}
    assert d[("read_uncommitted", "aborted_visible")] == {e(19): 1}
    assert ("read_committed", "aborted_visible") not in d
    assert d[("read_committed", "torn_transaction")] == {e(22): 0}
    assert ("read_uncommitted", "torn_transaction") not in d, "atomicity is read_committed's promise"

    s = _summary(rid)
    rc, ru = s["read_committed"], s["read_uncommitted"]
    assert (rc["records_read"], ru["records_read"]) == (26, 27)
    assert (rc["delivered_once"], ru["delivered_once"]) == (18, 17)
    assert (rc["duplicate_events"], rc["duplicate_copies"]) == (2, 3)
    assert (ru["duplicate_events"], ru["duplicate_copies"]) == (3, 4)
    assert (
        rc["lost_acked"],
        rc["lost_unacked"],
        rc["unknown_landed"],
        rc["unexpected"],
        rc["out_of_order"],
        rc["malformed"],
        rc["aborted_visible"],
    ) == (2, 1, 3, 1, 1, 2, 0)
    assert ru["aborted_visible"] == 1
    assert (rc["torn_events"], ru["torn_events"]) == (1, None)
    assert (rc["inconsistent_offsets"], ru["inconsistent_offsets"]) == (1, 1)
    assert (rc["verdict"], rc["broken_by"]) == ("broken", "duplicate,lost_acked,torn_transaction")
    assert ru["verdict"] == "n/a", "transactional is judged on read_committed"
    assert rc["ledger_events"] == 23 and rc["ledger_acked"] == 19  # e00-e12, e16-e18, e19, e21, e22
    # 27 records and three control markers (an abort at 25, commits at 27 and 29): the end is
    # offset 30, not a count.
    assert rc["end_offsets"] == {"0": 30}


def test_a_rerun_on_a_standalone_cluster_with_the_copy_in_postgres_leaves_every_row_unchanged(
    planted, kafka_conf_module
):
    """The first reconciliation ran in local mode with the lakehouse copy; the rerun runs on the
    stack's Spark standalone master and worker (`spark_standalone`), its executors writing the copy
    to PostgreSQL with COPY. Every row is the same."""
    rid = planted["run_id"]
    if not _summary(rid):
        assert spark_submit.run(run_id=rid).returncode == 0
    before = _snapshot(rid)
    # New records after the first reconciliation must not be read: the offset range is fixed.
    p = Producer(kafka_conf_module)
    p.produce(planted["topic"], key="late", value=b"x", headers=[("event_id", b"late-1")])
    p.flush(30)
    assert dedup.where(rid)["store"] == "lakehouse", "the default copy"
    assert f"reconcile-{rid}" not in spark_cluster_apps()
    r = spark_submit.run(run_id=rid, dedup_copy="postgres", spark_conn_id="spark_standalone")
    assert r.returncode == 0, r.error
    after = _snapshot(rid)
    assert after == before
    assert all(len(v) for v in before.values())
    with _db() as c, c.cursor() as cur:
        cur.execute("SELECT count(*) FROM reconcile_jobs WHERE reconciliation_id = %s", (rid,))
        assert cur.fetchone()[0] >= 2
        cur.execute("SELECT count(*) FROM dedup_events WHERE reconciliation_id = %s", (rid,))
        assert cur.fetchone()[0] == len(before["dedup_copy"])
    assert dedup.where(rid)["store"] == "postgres"
    assert f"reconcile-{rid}" in spark_cluster_apps(), "the rerun ran on the standalone cluster"


def test_dedup_table_keeps_the_first_copy_by_offset(planted):
    rid, e = planted["run_id"], planted["e"]
    rows = {r["event_id"]: r["offset"] for r in dedup.rows(rid)}
    assert (rows[e(10)], rows[e(11)], rows[e(19)]) == (10, 12, 26)  # first copies; e19's committed one
    assert e(12) not in rows and e(13) not in rows and rows[f"{rid}-u1"] == 20
    # read_committed, as the transactional mode's readers read: 21 distinct event ids
    assert len(rows) == 21


def test_a_clean_run_is_all_zeros_and_kept_with_or_without_the_dedup_copy():
    """Reconciled without the copy, then with it (the default): the same verdicts, all zeros, and
    the copy only the second time, one row per event."""
    s = load.start(load.LoadSpec(mode="idempotent", messages=3000, seed=5))

    def copies() -> int:
        try:
            return len(dedup.rows(s.run_id))
        except dedup.NoCopy:
            return 0

    r = spark_submit.run(run_id=s.run_id, dedup_copy="off")
    assert r.returncode == 0, r.error
    assert copies() == 0
    without = _summary(s.run_id)
    for iso, row in without.items():
        assert row["records_read"] == 3000 and row["delivered_once"] == 3000
        for k in (
            "duplicate_events",
            "lost_acked",
            "lost_unacked",
            "unknown_landed",
            "unexpected",
            "out_of_order",
            "aborted_visible",
            "malformed",
        ):
            assert row[k] == 0, (iso, k)
        assert row["verdict"] == ("kept" if iso == "read_uncommitted" else "n/a")
        assert row["meets_expectation"] is True
    assert _discrepancies(s.run_id) == {}
    # Again from the command line, with the copy: every promise kept, exit 0.
    res = semantics("reconcile", "--run-id", s.run_id)
    assert res.returncode == 0 and assert_judged(res), res.stderr[-3000:]
    counted = ("records_read", "delivered_once", "duplicate_events", "lost_acked", "verdict", "meets_expectation")
    assert {i: [row[k] for k in counted] for i, row in _summary(s.run_id).items()} == {
        i: [row[k] for k in counted] for i, row in without.items()
    }
    assert copies() == 3000


def test_unreachable_kafka_fails_with_a_clear_message(planted):
    s = load.start(load.LoadSpec(mode="at_least_once", messages=50))
    unreachable = {
        "SEMANTICS_KAFKA_CONFIG": json.dumps({"bootstrap.servers": "127.0.0.1:1"}),
        "SEMANTICS_KAFKA_SPARK_OPTIONS": json.dumps({"kafka.bootstrap.servers": "127.0.0.1:1"}),
    }
    r = spark_submit.run(run_id=s.run_id, env=unreachable, timeout=300)
    assert r.returncode == 2
    assert "reconcile: Kafka at 127.0.0.1:1 cannot be read" in r.error


def test_unreachable_database_fails_with_a_clear_message():
    r = spark_submit.run(
        run_id="whatever", env={"SEMANTICS_JDBC_URL": "jdbc:postgresql://127.0.0.1:1/semantics"}, timeout=300
    )
    assert r.returncode == 2
    assert "reconcile: the database at jdbc:postgresql://127.0.0.1:1/semantics cannot be reached" in r.error


def test_unknown_run_is_refused():
    r = spark_submit.run(run_id="no_such_run")
    assert r.returncode == 2 and "no run 'no_such_run' in the ledger" in r.error
