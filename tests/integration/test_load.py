"""Delivery modes, the load generator and the write-ahead ledger, against the real stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psycopg2
import pytest
from conftest import REPO
from direct_check import written_ends

import devstack
from checker import sources
from delivery_semantics import catalog
from delivery_semantics.faults.nemesis import wait_healthy
from delivery_semantics.history.ledger import DuplicateEvent, Ledger
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import Database, ledger_database
from delivery_semantics.workload import client, load, readback
from delivery_semantics.workload.generator import new_run_id


@pytest.fixture
def ledger():
    lg = Ledger()
    yield lg
    lg.close()


def _made(run_id: str) -> bool:
    """Whether a run of this id has a row. Refusals are checked by the id their spec named, since
    other files make runs beside these (the parallel phase)."""
    with psycopg2.connect(**ledger_database().psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute("SELECT count(*) FROM runs WHERE run_id = %s", (run_id,))
        return cur.fetchone()[0] > 0


@pytest.mark.parametrize("mode", list(catalog.MODES))
def test_every_mode_without_fault_delivers_each_event_once(mode, kafka_conf, ledger):
    s = load.start(
        load.LoadSpec(mode=mode, messages=4000, partitions=3, keys=8, payload_bytes=120, seed=7, txn_size=40)
    )
    assert s.status == "completed"
    assert (s.failed, s.unknown, s.pending) == (0, 0, 0)
    # acks=0 and acks=1 records are acked before the followers have them: read once they do.
    records = readback.read_topic(
        kafka_conf, s.topic, catalog.MODES[mode].isolation, covering=written_ends(ledger, s.run_id)
    )
    copies = readback.copies_by_event(records)
    assert len(records) == 4000 and len(copies) == 4000 and set(copies.values()) == {1}
    if mode == "at_most_once":
        assert (s.acked, s.sent_unacked) == (0, 4000), "acks=0 reports are sends, never acks"
    else:
        assert (s.acked, s.sent_unacked) == (4000, 0)
        in_kafka = sorted((r.event_id, r.partition, r.offset) for r in records)
        assert ledger.acked_positions(s.run_id) == in_kafka, "ledger partition/offset must match Kafka's"
    # event id, key and per-key sequence travel in the record's value and key (the run's record
    # layout) and match the ledger's rows
    assert ledger.get_run(s.run_id)["record_layout"] == "value"
    with ledger.conn.cursor() as cur:
        cur.execute("SELECT event_id, key, seq FROM ledger_events WHERE run_id = %s", (s.run_id,))
        assert sorted(cur.fetchall()) == sorted((r.event_id, r.key, r.seq) for r in records)


@pytest.mark.serial  # a follower paused
def test_an_acks_1_record_is_read_once_the_high_watermark_reaches_it_not_taken_for_lost(kafka_conf, ledger):
    """acks=1: the leader acks a record its followers do not have yet, and readers see it only
    once the high watermark passes it. Planted: a follower in the ISR paused while the run
    writes, so the watermark stays behind what was acked until the leader drops the follower
    from the ISR (replica.lag.time.max.ms, 10 s here). The checker's end offsets and readback
    wait for the run's acked ends; without them the topic ends short."""
    run_id = load.create(load.LoadSpec(mode="at_least_once", messages=300, partitions=1, keys=4, seed=5))
    topic = ledger.get_run(run_id)["topic"]
    md = topics.admin_client(kafka_conf).list_topics(topic, timeout=10).topics[topic].partitions[0]
    follower = next(b for b in md.replicas if b not in (md.leader, devstack.quorum_leader()))
    backend = devstack.ProcessBackend()
    backend.pause(follower)
    try:
        s = load.resume(run_id)
        assert (s.status, s.acked) == ("completed", 300)
        run = ledger.get_run(run_id)
        assert run["acked_ends"] == {"0": 300}
        assert readback.end_offsets(kafka_conf, topic)[0] < 300, "planted: the watermark behind the acks"
        src = sources.platform_source(
            {**run, "findings": None, "acked_ends": json.dumps(run["acked_ends"])},
            sources.Kafka(kafka_conf, {}),
        )
        assert src.ledger.acked_ends == {"0": 300}
        assert sources.topic_offsets(src, covering=src.ledger.acked_ends)[0][1] == 300
        records = readback.read_topic(kafka_conf, topic, covering=run["acked_ends"])
        assert sorted(r.offset for r in records) == list(range(300))
    finally:
        backend.resume(follower)
        wait_healthy(kafka_conf, timeout=120)


def test_run_row_holds_the_effective_config_and_summary(ledger):
    s = load.start(load.LoadSpec(mode="idempotent", messages=500, overrides={"linger.ms": "15"}))
    run = ledger.get_run(s.run_id)
    assert run["producer_config"]["enable.idempotence"] == "true"
    assert run["producer_config"]["acks"] == "all"
    assert run["producer_config"]["linger.ms"] == "15"
    assert "bootstrap.servers" not in run["producer_config"]
    assert run["status"] == "completed" and run["acked"] == 500 and run["sessions"] == 1
    assert run["records_per_sec"] > 0 and 0 < run["ack_p50_ms"] <= run["ack_p99_ms"]
    assert run["started_at"] <= run["ended_at"]
    assert _sealed(ledger, s.run_id), "a completed run is sealed"
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "SELECT status, attempts, count(*) FROM ledger_event_status WHERE run_id = %s GROUP BY status, attempts",
            (s.run_id,),
        )
        assert cur.fetchall() == [("acked", 1, 500)]


@pytest.mark.serial  # ack latency, which the parallel phase's Spark applications would slow
def test_a_paced_load_reports_ack_latency_without_its_pauses(ledger):
    # At 5 records/s the runner sends a record, then pauses 200 ms. An ack takes the linger (5 ms)
    # and a round trip, 10-40 ms on this machine; a report served only once the pause ended would
    # read about 200 ms. (At 1,000 records/s the pause was 100 ms, and a slow hour's acks took 41 ms.)
    s = load.start(load.LoadSpec(mode="idempotent", messages=40, rate=5, overrides={"linger.ms": "5"}))
    assert s.acked == 40
    assert s.ack_p50_ms < 100, s.line()


def _sealed(ledger: Ledger, run_id: str) -> bool:
    """Whether the run's events partition has its index on n."""
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            """SELECT EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = part.oid)
                       FROM pg_inherits i JOIN pg_class part ON part.oid = i.inhrelid
                       WHERE i.inhparent = 'ledger_event_rows'::regclass
                         AND pg_get_expr(part.relpartbound, part.oid) = format('FOR VALUES IN (%%L)', %s::text)""",
            (run_id,),
        )
        return cur.fetchone()[0]


def test_sealing_a_run_rejects_a_duplicate_event(ledger):
    run_id = "rtestseal_" + os.urandom(3).hex()
    ledger.create_run(
        {
            "run_id": run_id,
            "mode": "idempotent",
            "topic": "unused",
            "partitions": 1,
            "messages": 2,
            "keys": 1,
            "payload_bytes": 0,
            "seed": 0,
            "producer_config": {},
        }
    )
    try:
        ledger.record_event_range(run_id, 0, 2, keys=1, publish_at_ms=0)
        ledger.record_event_range(run_id, 1, 2, keys=1, publish_at_ms=0)  # n = 1 again
        assert not _sealed(ledger, run_id)
        with pytest.raises(DuplicateEvent, match=f"run {run_id} records event 1 more than once"):
            ledger.seal(run_id)
        assert not _sealed(ledger, run_id), "a run that repeats an event stays unsealed"
    finally:
        ledger.conn.rollback()
        ledger.drop_run(run_id)


def test_transactional_aborts_are_invisible_to_read_committed_and_visible_to_read_uncommitted(kafka_conf, ledger):
    s = load.start(load.LoadSpec(mode="transactional", messages=3000, txn_size=50, abort_ratio=0.3, seed=11))
    assert s.status == "completed" and s.acked == 3000
    assert s.aborted_attempts > 0, "an abort ratio of 0.3 over 60 transactions must abort some"
    committed = readback.read_topic(kafka_conf, s.topic, "read_committed")
    assert len(committed) == 3000 and set(readback.copies_by_event(committed).values()) == {1}
    everything = readback.read_topic(kafka_conf, s.topic, "read_uncommitted")
    assert len(everything) == 3000 + s.aborted_attempts
    with ledger.conn.cursor() as cur:
        cur.execute(
            """SELECT event_id, "partition", "offset" FROM ledger_outcomes
                       WHERE run_id = %s AND status = 'aborted'""",
            (s.run_id,),
        )
        aborted = set(cur.fetchall())
    committed_positions = {(r.event_id, r.partition, r.offset) for r in committed}
    uncommitted_only = {(r.event_id, r.partition, r.offset) for r in everything} - committed_positions
    assert uncommitted_only == aborted, "the aborted copies are exactly what the ledger recorded as aborted"


def test_a_commit_the_broker_refuses_takes_the_transaction_written_beside_it_and_order_holds(
    kafka_conf, ledger, monkeypatch
):
    """The next transaction is written under the other id while one commits. When that commit
    ends in an abort, the next is aborted too and both go again in order: every event once for
    read_committed, and each key's events in sequence order."""
    real = client.ProducerClient.commit
    calls = []

    def commit(self, written, before_commit):
        calls.append(written.txn_no)
        if len(calls) == 3:  # what a commit does when the broker requires the abort
            self.abort(written, client.coordinator_aborted("the commit was refused: in the test"))
            return False
        return real(self, written, before_commit)

    monkeypatch.setattr(client.ProducerClient, "commit", commit)
    s = load.start(load.LoadSpec(mode="transactional", messages=2000, txn_size=100))
    assert (s.status, s.acked, s.pending) == ("completed", 2000, 0)
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "SELECT txn_no, error, count(*) FROM ledger_outcomes WHERE run_id = %s AND status = 'aborted' "
            "GROUP BY txn_no, error",
            (s.run_id,),
        )
        # Each abort says why: the coordinator's refusal, and the transaction aborted behind it.
        assert {(t, e): n for t, e, n in cur.fetchall()} == {
            (3, "coordinator aborted: the commit was refused: in the test"): 100,
            (4, client.ABORTED_BEHIND): 100,
        }
    records = readback.read_topic(kafka_conf, s.topic, "read_committed")
    assert len(records) == 2000 and set(readback.copies_by_event(records).values()) == {1}
    by_key: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        by_key.setdefault(r.key, []).append((r.offset, r.seq))
    for key, positions in by_key.items():
        seqs = [seq for _, seq in sorted(positions)]
        assert seqs == sorted(seqs), f"{key}: sequence out of order in the log"


@pytest.mark.parametrize("mode", ["at_least_once", "transactional"])
def test_kill9_mid_run_loses_no_ledger_row_and_resume_completes(mode, kafka_conf, ledger):
    messages = 60_000
    run_id = new_run_id()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "delivery_semantics.entry.cli",
            "load",
            "run",
            "--mode",
            mode,
            "--messages",
            str(messages),
            "--rate",
            "15000",
            "--txn-size",
            "200",
            "--run-id",
            run_id,
            "--no-progress",
            "--json",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_outcomes(ledger, proc, run_id, min_outcomes=20_000)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    run = ledger.get_run(run_id)
    assert run["status"] == "running", "a killed producer cannot have marked its run"
    assert not _sealed(ledger, run_id), "killed before its seal"

    records = readback.read_topic(kafka_conf, run["topic"], "read_uncommitted")
    with ledger.conn.cursor() as cur:
        cur.execute("SELECT event_id FROM ledger_events WHERE run_id = %s", (run_id,))
        in_ledger = {r[0] for r in cur.fetchall()}
    assert records, "the killed run had written records"
    assert len(in_ledger) < messages
    missing = {r.event_id for r in records} - in_ledger
    assert not missing, f"{len(missing)} records in the topic have no ledger row (write-ahead broken)"

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "delivery_semantics.entry.cli",
            "load",
            "resume",
            "--run-id",
            run_id,
            "--no-progress",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    s = json.loads(res.stdout)
    assert (s["status"], s["acked"], s["failed"], s["unknown"], s["pending"], s["sessions"]) == (
        "completed",
        messages,
        0,
        0,
        0,
        2,
    )
    isolation = catalog.MODES[mode].isolation
    covering = ledger.get_run(run_id)["acked_ends"]
    copies = readback.copies_by_event(readback.read_topic(kafka_conf, run["topic"], isolation, covering=covering))
    assert len(copies) == messages
    assert _sealed(ledger, run_id), "the resume sealed it"
    if mode == "transactional":
        assert set(copies.values()) == {1}, "same transactional.id: the restart fences the old producer"


def _wait_for_outcomes(ledger: Ledger, proc, run_id: str, min_outcomes: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the load process ended early: {proc.stderr.read()[-2000:]}"
        with ledger.conn, ledger.conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM ledger_outcomes WHERE run_id = %s", (run_id,))
            if cur.fetchone()[0] >= min_outcomes:
                return
        time.sleep(0.5)
    raise AssertionError("the load never reached the kill point")


def test_a_second_producer_cannot_take_a_run_held_by_a_live_one(ledger):
    s = load.start(load.LoadSpec(mode="at_least_once", messages=100))
    holder = Ledger()
    try:
        holder.claim_run(s.run_id)
        with pytest.raises(Exception, match="held by a live producer"):
            load.resume(s.run_id)
    finally:
        holder.close()
    assert load.resume(s.run_id).status == "completed"


# ------------------------------------------------------------------------ bad input


def test_a_crash_point_is_refused_where_it_cannot_apply_before_any_side_effect(ledger):
    s = load.start(load.LoadSpec(mode="at_least_once", messages=100))
    before = ledger.get_run(s.run_id)
    with pytest.raises(load.LoadError, match=r"needs the transactional mode; run .* is at_least_once"):
        load.resume(s.run_id, crash_before_commit_at=5)
    t = load.create(load.LoadSpec(mode="transactional", messages=100))
    with pytest.raises(load.LoadError, match="the crash point must be >= 0, got -1"):
        load.resume(t, crash_before_commit_at=-1)
    assert ledger.get_run(s.run_id) == before and ledger.get_run(t)["status"] == "created"


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(mode="exactly_once_please", messages=10), "unknown mode 'exactly_once_please'"),
        (dict(mode="idempotent", messages=0), "messages must be a positive integer"),
        (dict(mode="idempotent", messages=-5), "messages must be a positive integer"),
        (dict(mode="idempotent", messages=10, payload_bytes=2_000_000), "does not fit message.max.bytes"),
        (dict(mode="idempotent", messages=10, topic="bad topic!"), "invalid topic name"),
        (dict(mode="idempotent", messages=10, overrides={"acks": "0"}), "enable.idempotence=true needs acks=all"),
        (
            dict(mode="at_least_once", messages=10, overrides={"enable.idempotence": "true", "acks": "1"}),
            "enable.idempotence=true needs acks=all",
        ),
        (
            dict(mode="transactional", messages=10, overrides={"enable.idempotence": "false"}),
            "a transactional producer needs enable.idempotence=true",
        ),
        (dict(mode="at_least_once", messages=10, abort_ratio=0.2), "abort_ratio needs the transactional mode"),
        (dict(mode="at_least_once", messages=10, overrides={"no.such.key": "1"}), "is not a setting a form"),
        (dict(mode="at_least_once", messages=10, overrides={"bootstrap.servers": "x:1"}), "cannot be set by a mode"),
        (dict(mode="idempotent", messages=10, record_format="protobuf"), "record format 'protobuf': use one of"),
    ],
)
def test_bad_input_is_refused_before_any_side_effect(spec, message):
    run_id = new_run_id()
    with pytest.raises((load.LoadError, catalog.ModeError), match=message):
        load.start(load.LoadSpec(**spec, run_id=run_id))
    assert not _made(run_id)


def test_unreachable_kafka_fails_within_a_bounded_time_and_writes_nothing():
    run_id = new_run_id()
    t0 = time.monotonic()
    with pytest.raises(load.LoadError, match="did not answer within 10s"):
        load.start(
            load.LoadSpec(mode="at_least_once", messages=10, run_id=run_id),
            kafka_conf={"bootstrap.servers": "127.0.0.1:1"},
        )
    assert time.monotonic() - t0 < 20
    assert not _made(run_id)


def test_unreachable_postgres_is_refused_and_writes_nothing(kafka_conf):
    real = ledger_database()
    dead = Database(real.host, 1, real.user, real.password, real.database)
    run_id = new_run_id()
    with pytest.raises(load.LoadError, match=r"ledger database at 127\.0\.0\.1:1/semantics cannot be reached"):
        load.start(load.LoadSpec(mode="at_least_once", messages=10, run_id=run_id), db=dead)
    assert not _made(run_id)


def test_a_load_whose_settings_would_hold_it_for_hours_ends_at_its_budget(monkeypatch, ledger):
    """The slowest settings a form may give (a 10 s linger, the smallest queue) make a batch of
    records wait for each linger: 20,000 events would take hours. The run's deadline ends it (here
    the operator's maximum, 15 s): failed, with the budget named, and every event it recorded kept."""
    monkeypatch.setenv("SEMANTICS_RUN_MAX_SECONDS", "15")
    run_id = new_run_id()
    slow = {"linger.ms": "10000", "queue.buffering.max.messages": "1000"}
    spec = load.LoadSpec(mode="at_least_once", messages=20_000, rate=2000, producers=1, overrides=slow, run_id=run_id)
    started = time.monotonic()
    with pytest.raises(load.RunBudgetExceeded, match="went past its budget of 15 s"):
        load.start(spec)
    assert time.monotonic() - started < 90
    run = ledger.get_run(run_id)
    assert run["status"] == "failed" and "past its budget of 15 s" in run["error"]
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM ledger_events WHERE run_id = %s", (run_id,))
        recorded = cur.fetchone()[0]
    assert 0 < recorded < 20_000, "what was recorded before the deadline is kept; the rest was never sent"


def test_a_rewritten_runs_settings_cross_the_allowlist_again_when_it_resumes(ledger):
    """A row of the ledger is data: a key no file or form may give, written into a stored run's
    settings, is refused when a producer resumes it, before any record is sent."""
    run_id = load.create(load.LoadSpec(mode="at_least_once", messages=50, producers=1))
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            "UPDATE runs SET producer_config = producer_config || %s::jsonb WHERE run_id = %s",
            (json.dumps({"plugin.library.paths": "/tmp/evil"}), run_id),
        )
    with pytest.raises(
        catalog.ModeError, match=r"plugin.library.paths cannot be set by a mode or a run: it loads code"
    ):
        load.resume(run_id)
    assert ledger.producers(run_id)[0]["produced"] == 0


def test_cli_refuses_bad_input_with_exit_2_and_a_clear_message():
    res = subprocess.run(
        [sys.executable, "-m", "delivery_semantics.entry.cli", "load", "run", "--mode", "nope", "--messages", "10"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "load: unknown mode 'nope': choose one of at_most_once, at_least_once" in res.stderr


_CRASH_AT = r"""
import os, signal, sys
from delivery_semantics.workload import client, load

where, at, run_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
real = client.ProducerClient.commit
calls = []

def commit(self, written, before_commit):
    calls.append(written.txn_no)
    def durable_then_maybe_die(outcomes):
        before_commit(outcomes)
        if where == "before_commit" and len(calls) == at:
            os.kill(os.getpid(), signal.SIGKILL)
    committed = real(self, written, durable_then_maybe_die)
    if where == "after_commit" and len(calls) == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return committed

client.ProducerClient.commit = commit
load.start(load.LoadSpec(mode="transactional", messages=2000, txn_size=100, run_id=run_id))
"""


# The transactions take turns between the producer's two transactional.ids: the fifth is the first
# id's, the sixth the second's.
@pytest.mark.parametrize(
    "where, at, resolved_as",
    [("after_commit", 5, "acked"), ("before_commit", 5, "aborted"), ("before_commit", 6, "aborted")],
)
def test_a_transaction_in_doubt_at_the_crash_is_settled_from_the_topic(where, at, resolved_as, kafka_conf, ledger):
    """kill -9 between the durable `written` outcomes and the durable acks: the resume reads the
    exact positions with read_committed and neither loses nor duplicates that transaction, whichever
    transactional.id held it."""
    run_id = f"indoubt_{where}_{at}_{os.getpid()}_{int(time.time())}"
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_AT, where, str(at), run_id], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert len(ledger.in_doubt(run_id)) == 100, "the crashed transaction's 100 events are in doubt"

    s = load.resume(run_id)
    assert (s.status, s.acked, s.pending, s.sessions) == ("completed", 2000, 0, 2)
    with ledger.conn, ledger.conn.cursor() as cur:
        cur.execute(
            """SELECT status, error, count(*) FROM ledger_outcomes
                       WHERE run_id = %s AND session = 2 AND txn_no = %s GROUP BY status, error""",
            (run_id, at),
        )
        # A transaction the new producer's fence aborted says so, in the coordinator's words.
        why = client.FENCED_AT_RESTART if resolved_as == "aborted" else None
        assert {(st, e): n for st, e, n in cur.fetchall()} == {(resolved_as, why): 100}
    # Both ids were fenced: an open transaction left on either would hold read_committed readers
    # below it, and some of the 2,000 would be missing.
    copies = readback.copies_by_event(readback.read_topic(kafka_conf, s.topic, "read_committed"))
    assert len(copies) == 2000 and set(copies.values()) == {1}
