"""Fault scenarios on the real stack: the expected loss or duplication shows up, and the mode's
guarantee still holds. Each test leaves the cluster whole (3 brokers, full ISR), asserted."""

from __future__ import annotations

import json

import pytest
from direct_check import observe

from delivery_semantics import catalog
from delivery_semantics.faults.nemesis import wait_healthy
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.workload import client, load, readback, scenarios

pytestmark = pytest.mark.faults

MESSAGES = 15_000


@pytest.fixture
def ledger():
    lg = Ledger()
    yield lg
    lg.close()


@pytest.fixture(autouse=True)
def cluster_is_whole_afterwards(kafka_conf):
    yield
    wait_healthy(kafka_conf, timeout=120)


def run_pair(mode: str, scenario: str, ledger: Ledger, kafka_conf: dict, **spec):
    s = scenarios.run(load.LoadSpec(mode=mode, messages=spec.pop("messages", MESSAGES), seed=3, **spec), scenario)
    run = ledger.get_run(s.run_id)
    timeline = run["timeline"]
    assert timeline["scenario"] == scenario and timeline["events"][-1]["action"] == "healthy"
    assert run["scenario"] == scenario, "the run is recorded under its scenario, even when a forked load made it"
    seen = observe(kafka_conf, ledger, s.run_id, catalog.MODES[mode].isolation)
    print(f"\n{mode} + {scenario}: {seen}\n timeline: {json.dumps(timeline['events'])}")
    return s, seen, timeline


def actions(timeline) -> list[str]:
    return [e["action"] for e in timeline["events"]]


# CI's budget: the demo's matrix runs at_least_once under lost_ack on both clients and idempotent on
# librdkafka, and asserts these two claims (duplicates > 0 and = 0, no acked loss, as DESIGN.md §3
# expects).
@pytest.mark.slow
def test_lost_ack_duplicates_without_idempotence(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_least_once", "lost_ack", ledger, kafka_conf)
    assert "drop_responses" in actions(tl) and "restore_responses" in actions(tl)
    assert seen.duplicates > 0, "retried requests whose acks were lost must be written twice"
    assert seen.lost_acked == 0, "the promise: no acked event lost while the leader lives"
    assert seen.acked == MESSAGES


@pytest.mark.slow  # CI's budget: the demo's matrix, as above
def test_lost_ack_no_duplicates_with_idempotence(ledger, kafka_conf):
    _s, seen, tl = run_pair("idempotent", "lost_ack", ledger, kafka_conf)
    assert "drop_responses" in actions(tl)
    assert (seen.duplicates, seen.lost_acked) == (0, 0)
    assert seen.acked == MESSAGES


def test_leader_kill_loses_fire_and_forget_events(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_most_once", "leader_kill", ledger, kafka_conf)
    assert actions(tl)[1:4] == ["pause", "kill", "restart"]
    assert seen.lost_unacked > 0, "acks=0 writes to a stalled, then killed, leader are lost"
    assert seen.duplicates == 0, "at most once: never a duplicate"


def test_leader_kill_loses_no_acked_event_with_acks_all(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_least_once_all", "leader_kill", ledger, kafka_conf)
    assert "kill" in actions(tl)
    assert seen.lost_acked == 0
    assert seen.acked == MESSAGES


# CI's budget: test_modes.py's mode file (acks=1, Java) runs the isolated leader through its DAG and
# asserts the acked loss, its inconsistent offsets and the verdict naming acks=1.
@pytest.mark.slow
def test_isolated_leader_loses_acked_events_with_acks_1(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_least_once", "isolated_leader", ledger, kafka_conf)
    assert actions(tl)[1:7] == ["pause", "pause", "kill", "resume", "resume", "restart"]
    assert seen.lost_acked > 0, "writes acked by the isolated leader alone die with it"


def test_isolated_leader_loses_no_acked_event_with_acks_all(ledger, kafka_conf):
    _s, seen, _tl = run_pair("at_least_once_all", "isolated_leader", ledger, kafka_conf)
    assert seen.lost_acked == 0, "acks=all with min ISR 2: writes are refused or retried, never acked then lost"


def test_partitioned_leader_keeps_acking_acks_1_writes_that_are_then_lost(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_least_once", "partitioned_leader", ledger, kafka_conf)
    assert actions(tl)[1:3] == ["partition", "heal_partition"] and tl["events"][1]["links"] == 8
    assert "kill" not in actions(tl) and "pause" not in actions(tl), "a network fault only"
    assert seen.acked == MESSAGES
    assert seen.lost_acked > 0, "writes acked by the deposed leader, which its clients still reached, are truncated"


# CI's budget: acks=all keeps every acked event under the isolated leader and the leader kill
# above; the partition itself is in CI with acks=1.
@pytest.mark.slow
def test_partitioned_leader_loses_no_acked_event_with_acks_all(ledger, kafka_conf):
    _s, seen, tl = run_pair("at_least_once_all", "partitioned_leader", ledger, kafka_conf)
    assert "partition" in actions(tl)
    assert seen.lost_acked == 0, "acks=all: followers that cannot fetch never ack, so nothing acked is lost"
    assert seen.acked == MESSAGES


def test_producer_crash_of_one_of_two_producers_resumes_its_slice_alone(ledger, kafka_conf):
    s, seen, tl = run_pair("idempotent", "producer_crash", ledger, kafka_conf, producers=2)
    slices = ledger.producers(s.run_id)
    assert "kill_producer" in actions(tl)
    assert [(p["status"], p["sessions"]) for p in slices] == [("completed", 2), ("completed", 1)]
    assert s.sessions == 3 and s.producers == 2
    assert seen.lost_acked == 0 and seen.acked == MESSAGES
    # A restarted producer has a new PID: copies it resends of events that had landed are
    # duplicates. Only the killed producer resent, and only events of its own slice.
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            """SELECT count(DISTINCT o.event_id), max(e.n), bool_and(o.producer = 0)
               FROM ledger_outcomes o JOIN ledger_events e USING (run_id, event_id)
               WHERE o.run_id = %s AND o.session = 2""",
            (s.run_id,),
        )
        resent, highest, only_the_killed = cur.fetchone()
    assert resent > 0 and only_the_killed and highest < slices[0]["n_stop"]
    assert seen.duplicated_events <= resent, "only events resent by the new session can be duplicated"
    # Each producer writes keys of its own: a key has one writer, and the order Kafka keeps for it.
    records = readback.read_topic(kafka_conf, s.topic)
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute("SELECT event_id, key, seq, n FROM ledger_events WHERE run_id = %s", (s.run_id,))
        events = cur.fetchall()
    assert {(r.event_id, r.key, r.seq) for r in records} == {(e, k, q) for e, k, q, _ in events}
    writers = {}
    for _, key, _, n in events:
        writers.setdefault(key, set()).add(0 if n < slices[0]["n_stop"] else 1)
    assert len(writers) == 2 * ledger.get_run(s.run_id)["keys"] and all(len(w) == 1 for w in writers.values())


# The transactional mode under producer_crash: test_dags.py, with two producers as mapped Airflow
# tasks, the first killed; test_load.py, a kill -9 of a single producer and the transaction in doubt.


def test_txn_abort_is_exactly_once_for_read_committed(ledger, kafka_conf):
    s, seen, _tl = run_pair("transactional", "txn_abort", ledger, kafka_conf, messages=5000, txn_size=50)
    assert s.aborted_attempts > 0
    assert (seen.duplicates, seen.lost_acked, seen.records_in_topic) == (0, 0, 5000)
    everything = observe(kafka_conf, ledger, s.run_id, "read_uncommitted")
    assert everything.records_in_topic == 5000 + s.aborted_attempts


@pytest.mark.parametrize(
    "mode, scenario, reason",
    [
        ("at_least_once", "txn_abort", "needs the transactional mode"),
        ("at_most_once", "lost_ack", "never waits for one"),
        ("at_least_once", "earthquake", "unknown scenario"),
    ],
)
def test_incompatible_pairs_are_refused_before_anything_starts(mode, scenario, reason, ledger):
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs")
        before = cur.fetchone()[0]
    with pytest.raises(catalog.ScenarioError, match=reason):
        scenarios.run(load.LoadSpec(mode=mode, messages=100), scenario)
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs")
        assert cur.fetchone()[0] == before


# The Java client (kafka-clients in a JVM) under the same faults: the same load session, ledger and
# checks, another producer. Its defaults differ from librdkafka's (idempotence on), the presets set
# the semantics keys explicitly.
@pytest.mark.slow  # CI's budget: the demo's matrix runs the Java at_least_once pair under lost_ack
def test_java_lost_ack_duplicates_without_idempotence(ledger, kafka_conf):
    s, seen, tl = run_pair("at_least_once_all", "lost_ack", ledger, kafka_conf, client="java")
    assert ledger.get_run(s.run_id)["producer_config"]["enable.idempotence"] == "false"
    assert "drop_responses" in actions(tl)
    assert seen.duplicates > 0, "the Java client retries a request whose ack was lost: written twice"
    assert seen.lost_acked == 0 and seen.acked == MESSAGES


# CI's budget: the Java client's idempotence is in CI under its transactional producer's crash
# (below) and `make demo` runs this pair; the demo's test runs the Java at_least_once twin only.
@pytest.mark.slow
def test_java_lost_ack_no_duplicates_with_idempotence(ledger, kafka_conf):
    s, seen, tl = run_pair("idempotent", "lost_ack", ledger, kafka_conf, client="java")
    assert ledger.get_run(s.run_id)["client"] == "java"
    assert "drop_responses" in actions(tl)
    assert (seen.duplicates, seen.lost_acked, seen.acked) == (0, 0, MESSAGES)


# CI's budget: librdkafka's leader_kill pair stays in CI, and the Java client's own session,
# ledger and fencing under a fault stay in its crash inside an open transaction below.
@pytest.mark.slow
def test_java_leader_kill_idempotent_is_exactly_once(ledger, kafka_conf):
    _s, seen, tl = run_pair("idempotent", "leader_kill", ledger, kafka_conf, client="java")
    assert actions(tl)[1:4] == ["pause", "kill", "restart"]
    assert (seen.duplicates, seen.lost_acked, seen.acked) == (0, 0, MESSAGES)


def _aborts_by_cause(ledger: Ledger, run_id: str, session: int) -> dict:
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "SELECT error, count(*) FROM ledger_outcomes WHERE run_id = %s AND session = %s AND status = 'aborted' "
            "GROUP BY error",
            (run_id, session),
        )
        return dict(cur.fetchall())


def test_java_producer_crash_in_an_open_transaction_is_exactly_once(ledger, kafka_conf):
    """The load process kills itself between a transaction's flush and its commit: its JVM sees its
    stdin close and halts, and the next session's JVM fences the transactional.id."""
    s, seen, tl = run_pair("transactional", "producer_crash", ledger, kafka_conf, client="java", producers=1)
    [crash] = [e for e in tl["events"] if e["action"] == "kill_producer"]
    assert crash["point"] == "before_commit" and crash["written"] > 0
    assert s.sessions == 2
    assert (seen.duplicates, seen.lost_acked, seen.acked) == (0, 0, MESSAGES)
    # The crashed transaction, settled by the next session: the coordinator aborted it at the fence.
    assert _aborts_by_cause(ledger, s.run_id, 2) == {client.FENCED_AT_RESTART: crash["written"]}


@pytest.mark.slow  # CI's budget: the ledger's words are asserted in CI (test_load's transaction in doubt)
def test_a_transaction_the_fence_aborted_and_never_sent_again_is_counted_as_coordinator_aborted(ledger, kafka_conf):
    """A producer killed inside an open transaction, by an application that does not send again what
    failed: the next session's producer fences the transactional.id, the coordinator aborts the open
    transaction, and the checker names exactly its events coordinator_aborted, within lost_unacked."""
    from delivery_semantics.entry import spark_submit
    from delivery_semantics.reporting import report

    s, seen, tl = run_pair(
        "transactional", "producer_crash", ledger, kafka_conf, producers=1, messages=3000, resends_failed=False
    )
    [crash] = [e for e in tl["events"] if e["action"] == "kill_producer"]
    assert crash["point"] == "before_commit" and crash["written"] > 0 and s.sessions == 2
    assert _aborts_by_cause(ledger, s.run_id, 2) == {client.FENCED_AT_RESTART: crash["written"]}
    res = spark_submit.run(run_id=s.run_id)
    assert res.returncode == 0, res.error
    (summary,) = [r for r in res.summaries if r["isolation"] == "read_committed"]
    assert (summary["lost_acked"], summary["duplicate_events"]) == (0, 0), summary
    # Exactly the fenced transaction's events; what was being written beside it, never acked, is
    # lost_unacked alone.
    named = report.query(
        "SELECT event_id FROM reconcile_discrepancies WHERE reconciliation_id = %s AND isolation = 'read_committed' "
        "AND kind = 'coordinator_aborted'",
        (s.run_id,),
    )
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "SELECT event_id FROM ledger_outcomes WHERE run_id = %s AND session = 2 AND status = 'aborted'", (s.run_id,)
        )
        fenced = {r[0] for r in cur.fetchall()}
    assert {r["event_id"] for r in named} == fenced and len(fenced) == crash["written"]
    assert summary["coordinator_aborted"] == crash["written"] <= summary["lost_unacked"], summary
    assert summary["lost_unacked"] == 3000 - seen.acked, summary


@pytest.mark.slow  # CI's budget: librdkafka's producer_crash and the Java crash above stay in CI
def test_java_producer_crash_without_idempotence_loses_no_acked_event(ledger, kafka_conf):
    s, seen, tl = run_pair("at_least_once_all", "producer_crash", ledger, kafka_conf, client="java", producers=1)
    assert "kill_producer" in actions(tl) and s.sessions == 2
    assert seen.lost_acked == 0 and seen.acked == MESSAGES


# Records in Avro (Confluent's wire format), as teams with a schema registry write them: the same
# faults do the same, and the Spark checker, decoding with from_avro, finds exactly the duplicated
# event ids that a plain consumer's read-back finds. In the slow suite for CI's budget: the Avro
# decoder's known-answer test is test_record_formats.py's, and lost_ack's is the text runs' above.
@pytest.mark.slow
def test_avro_lost_ack_duplicates_found_by_id_by_the_checker(ledger, kafka_conf):
    from delivery_semantics.entry import spark_submit
    from delivery_semantics.reporting import report

    s, seen, tl = run_pair("at_least_once_all", "lost_ack", ledger, kafka_conf, record_format="avro")
    run = ledger.get_run(s.run_id)
    assert run["record_layout"] == "avro" and "drop_responses" in actions(tl)
    assert seen.duplicates > 0 and seen.lost_acked == 0 and seen.acked == MESSAGES
    isolation = catalog.MODES["at_least_once_all"].isolation
    copies = readback.copies_by_event(readback.read_topic(kafka_conf, run["topic"], isolation))
    res = spark_submit.run(run_id=s.run_id)
    assert res.returncode == 0, res.error
    (summary,) = [r for r in res.summaries if r["isolation"] == isolation]
    assert (summary["records_read"], summary["malformed"], summary["lost_acked"]) == (seen.records_in_topic, 0, 0)
    found = report.query(
        "SELECT event_id, copies FROM reconcile_discrepancies WHERE reconciliation_id = %s AND isolation = %s "
        "AND kind = 'duplicate'",
        (s.run_id, isolation),
    )
    assert {r["event_id"]: r["copies"] for r in found} == {e: c for e, c in copies.items() if c > 1}
