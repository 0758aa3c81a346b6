"""The consumer side on the real stack: each strategy's consumer process is killed (SIGKILL) at its
crash point and restarted in the same group; the Spark checker reconciles what it wrote against
the input run's ledger. Every test asserts the damage the crash must do (or must not do) and that
the strategy's promise still holds, and cross-checks the checker against a direct count."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import spark_connect_default

from delivery_semantics.entry import spark_submit
from delivery_semantics.history.ledger import Ledger
from delivery_semantics.plumbing.endpoints import kafka_config, ledger_database
from delivery_semantics.reporting.report import query
from delivery_semantics.workload import consumer_workload, load, readback
from delivery_semantics.workload.consumer_workload import ConsumerSpec, WorkloadError
from delivery_semantics.workload.sink import Sink, SinkRecord

MESSAGES = 6000


@pytest.fixture(scope="module")
def input_run(stack_env) -> str:
    """A fault-free idempotent run: whatever the checker finds downstream is the consumer's doing."""
    s = load.start(load.LoadSpec(mode="idempotent", messages=MESSAGES, seed=11))
    assert (s.status, s.acked) == ("completed", MESSAGES)
    return s.run_id


# Each test's consumer run: (strategy, scenario, crashes). They run first, one after another, and
# the checker reconciles them all in one Spark application, as the matrix DAG does.
CONSUMER_RUNS = {
    "commit_before_process": ("commit_before_process", "consumer_crash", 1),
    "process_then_commit": ("process_then_commit", "consumer_crash", 1),
    "dedup_two_crashes": ("process_then_commit_dedup", "consumer_crash", 2),
    "transactional_copy": ("transactional_copy", "consumer_crash", 2),
    "no_crash": ("process_then_commit", "none", 1),
}


@pytest.fixture(scope="module")
def consumed(input_run) -> dict:
    """Each of CONSUMER_RUNS run, then all reconciled in one application: by name, (consumer run
    row, summaries by isolation, its v_run_results row)."""
    runs = {}
    for name, (strategy, scenario, crashes) in CONSUMER_RUNS.items():
        s = consumer_workload.start(ConsumerSpec(strategy, input_run, scenario=scenario, crashes=crashes))
        assert s.status == "completed", name
        runs[name] = query("SELECT * FROM consumer_runs WHERE consumer_run_id = %s", (s.consumer_run_id,))[0]
    with spark_connect_default():
        r = spark_submit.run(run_id=[run["consumer_run_id"] for run in runs.values()])
    assert r.returncode == 0, r.error
    out = {}
    for name, run in runs.items():
        cid = run["consumer_run_id"]
        summaries = {x["isolation"]: x for x in r.summaries if x["reconciliation_id"] == cid}
        row = query("SELECT * FROM v_run_results WHERE run_id = %s", (cid,))[0]
        out[name] = (run, summaries, row)
    return out


def consume(consumed: dict, name: str):
    """A consumer run of CONSUMER_RUNS and what the checker found: (consumer run row, crash
    records, summaries by isolation, its v_run_results row)."""
    run, summaries, row = consumed[name]
    _strategy, scenario, crashes = CONSUMER_RUNS[name]
    killed = [e for e in run["timeline"] if e["action"] == "consumer_killed"]
    assert len(killed) == run["crashes"] == (crashes if scenario == "consumer_crash" else 0)
    assert all(e["signal"] == "SIGKILL" for e in killed)
    assert run["sessions"] == run["crashes"] + 1, "each crash is followed by a new process in the same group"
    # Every poll of every session, the killed ones too, is in the poll log, and none skipped a
    # record or went back: a crash ends a session, it does not make its polls skip.
    polls = query(
        "SELECT count(DISTINCT session) AS sessions, sum(cardinality(offsets)) AS polled FROM consumer_polls "
        "WHERE consumer_run_id = %s",
        (run["consumer_run_id"],),
    )[0]
    assert (polls["sessions"], polls["polled"]) == (run["sessions"], run["processed"])
    rc = summaries["read_committed"]
    assert (rc["poll_skips"], rc["nonmonotonic_polls"]) == (0, 0)
    print(f"\n{name}: {summaries}\n crashes: {killed}")
    return run, killed, summaries, row


def sink_copies(consumer_run_id: str) -> Counter:
    return Counter(
        {
            r["event_id"]: r["n"]
            for r in query(
                "SELECT event_id, count(*) AS n FROM sink_events WHERE consumer_run_id = %s GROUP BY 1",
                (consumer_run_id,),
            )
        }
    )


def test_commit_before_process_loses_the_batch_it_committed_before_the_crash(consumed):
    run, killed, summaries, row = consume(consumed, "commit_before_process")
    lost_batch = killed[0]["batch"]
    s = summaries["read_committed"]
    assert lost_batch > 0
    assert s["lost_acked"] == lost_batch, "exactly the batch committed but never written is lost"
    assert s["duplicate_events"] == 0, "the promise: at most once"
    assert (s["verdict"], row["meets_expectation"]) == ("kept", True)
    copies = sink_copies(run["consumer_run_id"])
    assert (len(copies), max(copies.values())) == (MESSAGES - lost_batch, 1)


def test_process_then_commit_duplicates_the_batch_written_before_the_crash(consumed):
    run, killed, summaries, row = consume(consumed, "process_then_commit")
    redelivered = killed[0]["batch"]
    s = summaries["read_committed"]
    assert s["duplicate_events"] == redelivered > 0, "the batch written but not committed is written again"
    assert s["lost_acked"] + s["lost_unacked"] == 0, "the promise: at least once"
    assert s["stale_overwrites"] > 0, "replaying the batch rolls each key's state back to older versions"
    assert (s["verdict"], row["meets_expectation"]) == ("kept", True)
    copies = sink_copies(run["consumer_run_id"])
    assert (len(copies), sum(copies.values())) == (MESSAGES, MESSAGES + redelivered)


def test_dedup_sink_stays_exactly_once_and_fresh_across_two_crashes(consumed, input_run):
    run, killed, summaries, row = consume(consumed, "dedup_two_crashes")
    s = summaries["read_committed"]
    assert run["processed"] == MESSAGES + sum(k["batch"] for k in killed), "the crashed batches were redelivered"
    assert (s["duplicate_events"], s["lost_acked"], s["lost_unacked"], s["stale_overwrites"]) == (0, 0, 0, 0)
    assert (s["verdict"], row["meets_expectation"]) == ("kept", True)
    copies = sink_copies(run["consumer_run_id"])
    assert (len(copies), max(copies.values())) == (MESSAGES, 1)
    # Every key's state is its newest event in the ledger.
    stale = query(
        """
        SELECT st.key FROM sink_state st
        JOIN LATERAL (SELECT e.event_id FROM ledger_events e WHERE e.run_id = %s AND e.key = st.key
                      ORDER BY e.publish_at DESC, e.seq DESC LIMIT 1) newest ON true
        WHERE st.consumer_run_id = %s AND st.event_id <> newest.event_id""",
        (input_run, run["consumer_run_id"]),
    )
    assert stale == []
    assert (
        query("SELECT count(*) AS n FROM sink_state WHERE consumer_run_id = %s", (run["consumer_run_id"],))[0]["n"]
        == 16
    )


def test_transactional_copier_output_is_exactly_once_for_read_committed(consumed, input_run):
    run, killed, summaries, row = consume(consumed, "transactional_copy")
    rc, ru = summaries["read_committed"], summaries["read_uncommitted"]
    assert (rc["delivered_once"], rc["duplicate_events"], rc["lost_acked"], rc["aborted_visible"]) == (
        MESSAGES,
        0,
        0,
        0,
    )
    assert (rc["verdict"], row["meets_expectation"]) == ("kept", True)
    in_open_txns = sum(k["produced_in_open_transaction"] for k in killed)
    assert ru["aborted_visible"] == in_open_txns > 0, "what the killed copiers wrote was aborted, not committed"
    # The checker's verdict against a plain read_committed consumer.
    records = readback.read_topic(kafka_config(), run["output_topic"], "read_committed")
    ids = Counter(r.event_id for r in records)
    acked = {eid for eid, _, _ in _acked(input_run)}
    assert set(ids) == acked and max(ids.values()) == 1


def _acked(run_id: str):
    lg = Ledger()
    try:
        return lg.acked_positions(run_id)
    finally:
        lg.close()


def test_without_a_crash_process_then_commit_is_exactly_once(consumed, input_run):
    _run, _, summaries, row = consume(consumed, "no_crash")
    s = summaries["read_committed"]
    assert (s["delivered_once"], s["duplicate_events"], s["lost_acked"], s["stale_overwrites"]) == (MESSAGES, 0, 0, 0)
    assert (row["verdict"], row["meets_expectation"], row["side"], row["source_run_id"]) == (
        "kept",
        True,
        "consumer",
        input_run,
    )


def test_dedup_sink_skips_a_seen_event_and_never_applies_an_older_version(input_run):
    lg = Ledger()
    cid = "c-sink-test-" + input_run[-6:]
    try:
        lg.drop_consumer_run(cid)
        lg.create_consumer_run(
            {
                "consumer_run_id": cid,
                "source_run_id": input_run,
                "strategy": "process_then_commit_dedup",
                "batch_size": 10,
                "input_topic": "t",
                "input_end_offsets": {},
                "group_id": cid,
            }
        )
        sink = Sink(ledger_database(), cid, dedup=True)
        newer = SinkRecord("e2", "k", 2, 2_000, 0, 2)
        older = SinkRecord("e1", "k", 1, 1_000, 0, 1)
        tie_lower_seq = SinkRecord("e0", "k", 0, 2_000, 0, 0)
        assert sink.apply([newer], session=1) == 1
        assert sink.apply([newer, older, tie_lower_seq], session=2) == 2, "the seen event id is skipped"
        sink.close()
        state = query("SELECT event_id FROM sink_state WHERE consumer_run_id = %s", (cid,))
        assert state == [{"event_id": "e2"}], "an older version (or an equal time, lower seq) never overwrites"
        applied = query(
            "SELECT event_id, state_applied FROM sink_events WHERE consumer_run_id = %s ORDER BY apply_no", (cid,)
        )
        assert applied == [
            {"event_id": "e2", "state_applied": True},
            {"event_id": "e1", "state_applied": False},
            {"event_id": "e0", "state_applied": False},
        ]
    finally:
        lg.drop_consumer_run(cid)
        lg.close()


@pytest.mark.parametrize(
    "spec, message",
    [
        (dict(strategy="exactly_once_please"), "unknown consumer strategy"),
        (dict(scenario="consumer_kill"), "unknown consumer scenario"),
        (dict(crashes=0, scenario="consumer_crash"), "crashes must be an integer in [1, 5]"),
        (dict(batch_size=-3), "batch_size must be an integer in [1, 10000]"),
        (dict(source_run_id="r20990101t000000_000000"), "no producer run"),
    ],
)
def test_bad_input_is_refused_before_any_side_effect(input_run, spec, message):
    before = query("SELECT count(*) AS n FROM consumer_runs")[0]["n"]
    args = {"strategy": "process_then_commit", "source_run_id": input_run, **spec}
    with pytest.raises(WorkloadError, match=message.replace("[", r"\[").replace("]", r"\]")):
        consumer_workload.start(ConsumerSpec(**args))
    assert query("SELECT count(*) AS n FROM consumer_runs")[0]["n"] == before


def test_unreachable_broker_is_refused_before_any_side_effect(input_run):
    before = query("SELECT count(*) AS n FROM consumer_runs")[0]["n"]
    with pytest.raises(WorkloadError, match="did not answer"):
        consumer_workload.start(
            ConsumerSpec("process_then_commit", input_run), kafka_conf={"bootstrap.servers": "127.0.0.1:1"}
        )
    assert query("SELECT count(*) AS n FROM consumer_runs")[0]["n"] == before
