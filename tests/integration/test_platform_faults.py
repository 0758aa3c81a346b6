"""Faults on the platform itself, not on Kafka: its own database restarted under a load, a load
task's process killed and retried, the checker killed once it has staged its results. Each
asserted with nothing lost and nothing counted twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib

import pytest
from conftest import REPO
from direct_check import observe

import devstack
from delivery_semantics.entry import orchestration, spark_submit
from delivery_semantics.entry.spark_submit import spark_application_env
from delivery_semantics.history.ledger import Ledger, LedgerUnavailable
from delivery_semantics.reporting import dedup
from delivery_semantics.reporting.report import query
from delivery_semantics.workload import load, readback

MESSAGES = 20_000


def _wait_for_outcomes(run_id: str, at_least: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ledger = Ledger()
        try:
            if ledger.get_run(run_id) is not None and ledger.outcome_count(run_id) >= at_least:
                return
        finally:
            ledger.close()
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, f"the load never reached {at_least} outcomes"
        time.sleep(0.2)


def _ledger_when_back(timeout: float = 60) -> Ledger:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return Ledger()
        except (LedgerUnavailable, OSError):
            assert time.monotonic() < deadline, "PostgreSQL did not come back"
            time.sleep(0.5)


def test_postgres_restarted_mid_load_stops_the_producer_and_the_resume_completes(kafka_conf):
    """The transactional mode, paced: PostgreSQL is stopped and started again a fifth of the way
    in. The producer stops at its next ledger write, having sent nothing the ledger had not
    recorded first; the resume fences its open transaction and completes the run, exactly once
    for read_committed."""
    run_id = f"pgrestart_{os.getpid()}_{int(time.time())}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "delivery_semantics.entry.cli",
            "load",
            "run",
            "--mode",
            "transactional",
            "--messages",
            str(MESSAGES),
            "--rate",
            "2000",
            "--txn-size",
            "100",
            "--run-id",
            run_id,
            "--no-progress",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_outcomes(run_id, MESSAGES // 5, proc)
        devstack.stop_postgres()
        time.sleep(2)
        devstack.start_postgres()
        proc.wait(timeout=120)
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None), "the producer must stop when its ledger goes away"
    assert "OperationalError" in stderr or "ledger" in stderr.lower(), stderr[-2000:]

    ledger = _ledger_when_back()
    try:
        # Nothing in the topic that the write-ahead ledger does not hold.
        with ledger.conn, ledger.conn.cursor() as cur:
            cur.execute("SELECT count(*), max(n) FROM ledger_events WHERE run_id = %s", (run_id,))
            recorded, highest = cur.fetchone()
        topic = ledger.get_run(run_id)["topic"]
        sent = readback.copies_by_event(readback.read_topic(kafka_conf, topic, "read_uncommitted"))
        assert len(sent) > 0 and max(int(eid.rsplit("-", 1)[1]) for eid in sent) <= highest < MESSAGES - 1
        assert recorded == highest + 1

        s = load.resume(run_id)
        assert (s.status, s.acked, s.pending, s.sessions) == ("completed", MESSAGES, 0, 2)
        seen = observe(kafka_conf, ledger, run_id, "read_committed")
        assert (seen.lost_acked, seen.duplicates, seen.unexpected, seen.records_in_topic) == (0, 0, 0, MESSAGES)
        # Counted once: the run's totals are its two sessions' sums.
        with ledger.conn, ledger.conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM ledger_event_status WHERE run_id = %s AND status = 'acked'", (run_id,))
            assert cur.fetchone()[0] == MESSAGES
        assert s.produced >= MESSAGES
    finally:
        ledger.close()


_PRODUCE_TASK = """
import sys
from delivery_semantics.entry import orchestration
orchestration.produce(sys.argv[1], 0)
"""


def test_a_killed_produce_task_is_resumed_by_its_retry(kafka_conf):
    """What a `produce` task does, in a process of its own as a worker runs it, killed (SIGKILL)
    a fifth in; then what Airflow's retry of the same task instance does: `start_run` finds the
    run under the task's key (no second run), `produce` resumes the slice, `finish_run` totals it.
    Transactional, so exactly once for read_committed."""
    messages = 200_000
    key = f"semantics_single_run/manual__retry_{os.getpid()}_{int(time.time())}/start_run/-1"
    params = {"mode": "transactional", "scenario": "none", "messages": messages, "txn_size": 1000, "producers": 1}
    [task] = orchestration.start_run(params, key)
    run_id = task["ledger_run"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _PRODUCE_TASK, run_id],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_outcomes(run_id, messages // 5, proc)
    finally:
        proc.kill()
        proc.wait(30)

    assert orchestration.start_run(params, key) == [task], "the retry finds the run its first try made"
    orchestration.produce(run_id, 0)
    summary = orchestration.finish_run(run_id)
    assert (summary["status"], summary["acked"], summary["sessions"]) == ("completed", messages, 2)
    assert summary["produced"] >= messages, "the killed session's produce() calls are counted too"
    ledger = Ledger()
    try:
        seen = observe(kafka_conf, ledger, run_id, "read_committed")
    finally:
        ledger.close()
    assert (seen.lost_acked, seen.duplicates, seen.unexpected, seen.records_in_topic) == (0, 0, 0, messages)


def _results(rid: str) -> dict[str, list]:
    order = {"reconcile_summary": "isolation", "reconcile_discrepancies": "isolation, kind, event_id"}
    order |= {"reconcile_offsets": '"partition"'}
    out = {
        t: [tuple(r.values()) for r in query(f"SELECT * FROM {t} WHERE reconciliation_id = %s ORDER BY {o}", (rid,))]
        for t, o in order.items()
    }
    try:  # the copy a reconciliation's results record, from its store (the lakehouse by default)
        out["dedup_copy"] = [tuple(r.values()) for r in dedup.rows(rid)]
    except dedup.NoCopy:
        out["dedup_copy"] = []
    return out


def _staged(rid: str) -> list[str]:
    tag = f"{zlib.crc32(rid.encode()):08x}"
    return [r["tablename"] for r in query("SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"stg%{tag}%",))]


def test_a_checker_killed_once_it_staged_its_results_leaves_no_result_and_the_rerun_writes_them_whole():
    """spark-submit killed (SIGKILL, its whole process group) as soon as its first staging table
    exists, so during the staging writes or the merge: no summary, discrepancy, copy or offset row
    of the run is written, only the staging tables are left over; the rerun drops them and writes
    every row. (That a rerun then changes no row is test_reconcile.py's standalone rerun.)"""
    s = load.start(load.LoadSpec(mode="at_least_once", messages=3000, seed=8))
    rid = s.run_id
    proc = subprocess.Popen(
        spark_submit.command(spark_submit.reconcile_args([rid])),
        cwd=REPO,
        env={**os.environ, **spark_application_env()},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while not _staged(rid):
            assert proc.poll() is None, "the checker ended before it staged anything"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(60)
    empty = {t: [] for t in ("reconcile_summary", "reconcile_discrepancies", "reconcile_offsets", "dedup_copy")}
    assert _results(rid) == empty, "a killed checker leaves no result"
    assert _staged(rid), "only its staging tables"

    first = spark_submit.run(run_id=rid)
    assert first.returncode == 0, first.error
    assert _staged(rid) == [], "the rerun dropped what the killed attempt staged"
    after_first = _results(rid)
    assert after_first["reconcile_offsets"], "the offset range it read"
    summary = {r[1]: r for r in after_first["reconcile_summary"]}
    assert set(summary) == {"read_committed", "read_uncommitted"} and len(after_first["dedup_copy"]) == 3000
    [row] = query(
        "SELECT records_read, delivered_once FROM reconcile_summary WHERE reconciliation_id = %s "
        "AND isolation = 'read_uncommitted'",
        (rid,),
    )
    assert row == {"records_read": 3000, "delivered_once": 3000}


@pytest.fixture(autouse=True)
def postgres_is_up_afterwards():
    yield
    devstack.start_postgres()
    _ledger_when_back().close()
