"""`local/semantics gc`: the platform's own runs kept for the retention after their last use, then
their topics deleted and their records with them (ledger partitions, per-event results and the
deduplicated copies, in PostgreSQL or the lakehouse), each with its size recorded; the run's
verdict stays, and a team's topic is never a candidate. The runs here are made 30 days old, so a
20-day retention takes them and nothing another test of the suite made today: the file runs in
the parallel phase."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from conftest import REPO, run, spark_connect_default

from delivery_semantics.entry import spark_submit
from delivery_semantics.plumbing import topics
from delivery_semantics.plumbing.endpoints import kafka_config
from delivery_semantics.plumbing.spark import lakehouse
from delivery_semantics.reporting import retention
from delivery_semantics.reporting.report import query
from delivery_semantics.workload import load

GC = [str(REPO / "local" / "semantics"), "gc"]
KEEP = ["--keep-days", "20"]


def _copy_first_record_again(kafka_conf: dict, topic: str) -> None:
    """The record at offset 0 of partition 0 written once more, byte for byte: a duplicate."""
    c = Consumer({**kafka_conf, "group.id": "retention-test", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msg = None
        while msg is None or msg.error():
            msg = c.poll(10)
    finally:
        c.close()
    p = Producer({**kafka_conf, "acks": "all"})
    p.produce(topic, key=msg.key(), value=msg.value(), headers=msg.headers(), partition=0)
    assert p.flush(30) == 0


def _made_30_days_ago(run_ids: list[str]) -> None:
    query(
        "UPDATE runs SET created_at = created_at - interval '30 days', ended_at = ended_at - interval '30 days' "
        "WHERE run_id = ANY (%s) RETURNING 1",
        (run_ids,),
    )
    query(
        "UPDATE reconcile_jobs SET finished_at = finished_at - interval '30 days' "
        "WHERE reconciliation_id = ANY (%s) RETURNING 1",
        (run_ids,),
    )


def _held(run_id: str) -> dict:
    """What the database and the lakehouse hold of a run."""
    partitions = query(
        """SELECT count(*) AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
           WHERE i.inhparent = ANY (%s::regclass[]) AND pg_get_expr(c.relpartbound, c.oid) = %s""",
        ([t for ts in retention.RUN_PARTITIONS.values() for t in ts], f"FOR VALUES IN ('{run_id}')"),
    )[0]["n"]
    one = lambda sql: query(sql, (run_id,))[0]["n"]
    return {
        "partitions": partitions,
        "ledger_events": one("SELECT count(*) AS n FROM ledger_events WHERE run_id = %s"),
        "results": one("SELECT count(*) AS n FROM reconcile_discrepancies WHERE reconciliation_id = %s"),
        "copy_rows": one("SELECT count(*) AS n FROM dedup_events WHERE reconciliation_id = %s"),
        "copies": one("SELECT count(*) AS n FROM dedup_copies WHERE reconciliation_id = %s"),
        "summaries": one("SELECT count(*) AS n FROM reconcile_summary WHERE reconciliation_id = %s"),
        "lakehouse_folder": (Path(lakehouse()) / "dedup_events" / f"reconciliation_id={run_id}").is_dir(),
    }


def _removed_in_delta(run_id: str) -> int:
    """The files of `run_id`'s partition that the lakehouse table's log says were removed."""
    log = Path(lakehouse()) / "dedup_events" / "_delta_log"
    removed = 0
    for commit in sorted(log.glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line).get("remove")
            if action and action.get("partitionValues", {}).get("reconciliation_id") == run_id:
                removed += 1
    return removed


@pytest.fixture(scope="module")
def old_runs(stack_env):
    """Two runs made 30 days ago, each reconciled: `lake` (2,000 events, one written twice, so a
    duplicate is among its results) with its copy in the lakehouse, `pg` (500 events) with its copy
    in PostgreSQL."""
    conf = kafka_config()
    lake = load.start(load.LoadSpec(mode="at_least_once", messages=2000, seed=5)).run_id
    pg = load.start(load.LoadSpec(mode="at_least_once", messages=500, seed=6)).run_id
    names = {rid: query("SELECT topic FROM runs WHERE run_id = %s", (rid,))[0]["topic"] for rid in (lake, pg)}
    _copy_first_record_again(conf, names[lake])
    with spark_connect_default():
        r = spark_submit.run(run_id=lake, dedup_copy="lakehouse")
        assert r.returncode == 0, r.error
        r = spark_submit.run(run_id=pg, dedup_copy="postgres")
    assert r.returncode == 0, r.error
    _made_30_days_ago([lake, pg])
    return {"lake": lake, "pg": pg, "topics": names, "conf": conf}


def test_gc_lists_then_retires_old_runs_topics_and_records_and_keeps_their_verdicts(old_runs, fresh_topic):
    lake, pg, names, conf = old_runs["lake"], old_runs["pg"], old_runs["topics"], old_runs["conf"]
    team_topic = fresh_topic("team")
    before = {rid: _held(rid) for rid in (lake, pg)}
    assert before[lake]["partitions"] == 4 and before[lake]["ledger_events"] == 2000
    assert before[lake]["results"] >= 2, "the duplicate, at each isolation level"
    assert before[lake]["lakehouse_folder"] and before[lake]["copies"] == 1
    assert before[pg]["copy_rows"] == 500 and before[pg]["copies"] == 1
    verdicts = query(
        "SELECT reconciliation_id, isolation, verdict, duplicate_events FROM reconcile_summary "
        "WHERE reconciliation_id = ANY (%s) ORDER BY 1, 2",
        ([lake, pg],),
    )

    today = run([*GC, "--keep-days", "31", "--dry-run"], check=True)
    assert not set(names.values()) & set(today.stdout.split()), "inside a 31-day retention"

    listed = run([*GC, *KEEP, "--dry-run"], check=True)
    for rid, topic in names.items():
        [line] = [ln for ln in listed.stdout.splitlines() if ln.startswith(topic + "\t")]
        assert re.fullmatch(r"[0-9.]+ (KiB|MiB)", line.split("\t")[3]), line  # measured on the brokers
        [records] = [ln for ln in listed.stdout.splitlines() if ln.startswith(f"records of producer run {rid}\t")]
        db_size, lake_size = records.split("\t")[1:]
        assert re.fullmatch(r"[0-9.]+ (KiB|MiB) in the database", db_size), records
        assert (
            re.fullmatch(r"[0-9.]+ (KiB|MiB) in the lakehouse", lake_size)
            if rid == lake
            else lake_size == ("0 B in the lakehouse")
        ), records
    assert "(dry run)" in listed.stderr and team_topic not in listed.stdout
    assert {rid: _held(rid) for rid in (lake, pg)} == before, "a dry run deletes nothing"
    assert set(names.values()) <= set(topics.admin_client(conf).list_topics(timeout=10).topics)

    done = run([*GC, *KEEP])
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(
        r"gc: \d+ topics unused for over 20 days, .*; \d+ runs' records, .*: deleted$", done.stderr.strip()
    )
    held = set(topics.admin_client(conf).list_topics(timeout=10).topics)
    assert not set(names.values()) & held and team_topic in held
    gone = {"partitions": 0, "ledger_events": 0, "results": 0, "copy_rows": 0, "copies": 0, "lakehouse_folder": False}
    for rid in (lake, pg):
        assert _held(rid) == {**gone, "summaries": before[rid]["summaries"]}, rid
    assert _removed_in_delta(lake) >= 1, "deleted in Delta's log first, then from the disk"
    # The verdicts outlive the records, and say when the records went.
    assert (
        query(
            "SELECT reconciliation_id, isolation, verdict, duplicate_events FROM reconcile_summary "
            "WHERE reconciliation_id = ANY (%s) ORDER BY 1, 2",
            ([lake, pg],),
        )
        == verdicts
    )
    assert all(v["duplicate_events"] == 1 for v in verdicts if v["reconciliation_id"] == lake), verdicts
    history = query("SELECT run_id, details_retired_at FROM v_run_history WHERE run_id = ANY (%s)", ([lake, pg],))
    assert len(history) == 2 and all(h["details_retired_at"] for h in history)
    retired = {r["run_id"]: r for r in query("SELECT * FROM retired_runs WHERE run_id = ANY (%s)", ([lake, pg],))}
    assert retired[lake]["result_rows"] == before[lake]["results"] and retired[lake]["copy_rows"] == 2000
    assert retired[lake]["lakehouse_bytes"] > 0 and retired[pg]["lakehouse_bytes"] == 0
    assert retired[pg]["copy_rows"] == 500 and retired[pg]["database_bytes"] > 0
    [topic_row] = query("SELECT owner, bytes FROM retired_topics WHERE topic = %s", (names[lake],))
    assert topic_row["owner"] == f"run {lake}" and topic_row["bytes"] > 2000 * 3 * 100

    again = run([*GC, *KEEP, "--dry-run"], check=True)
    assert not set(names.values()) & set(again.stdout.split()) and lake not in again.stdout, "retired once"


def test_gc_refuses_bad_input_in_one_line_before_deleting_anything():
    for args, message in (
        (["--keep-days", "-1"], "not a whole number"),
        (["--keep-days", "x"], "not a whole number"),
        (["--keep-days", "99999999"], "out of range"),
    ):
        res = run([*GC, *args])
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) <= 3, res.stderr
