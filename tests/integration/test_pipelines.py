"""Connector pipelines for real: Debezium's PostgreSQL source (outbox event router) and JDBC sink on
the stack's Kafka Connect clusters, an outbox loaded in transactions while the nemesis injects the
scenario's fault, then the run's audit. Each run's numbers are checked against independent reads:
a plain consumer's read-back of the topic (by the record's `id` header) and SQL on the outbox and
the sink table, so what the audit reports is compared id for id, not only counted."""

from __future__ import annotations

import uuid
from collections import Counter

import psycopg2
import pytest
from confluent_kafka import Consumer, TopicPartition
from conftest import run, spark_connect_default

from delivery_semantics import catalog
from delivery_semantics.audit import audits
from delivery_semantics.entry import pipeline
from delivery_semantics.faults.nemesis import poison_ids
from delivery_semantics.plumbing.connect import ConnectCluster
from delivery_semantics.plumbing.endpoints import database, kafka_config
from delivery_semantics.reporting import report
from delivery_semantics.workload.connector_pipeline import PipelineSpec

REPO_CLI = ["python", "-m", "delivery_semantics.entry.cli"]


def _rows(conn_id: str, sql: str) -> list:
    with psycopg2.connect(**database(conn_id).psycopg2_kwargs()) as c, c.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def read_back(topic: str, isolation: str) -> Counter:
    """Every record of the topic, by its `id` header, at the pipeline's isolation level."""
    conf = kafka_config()
    c = Consumer(
        {**conf, "group.id": f"readback-{uuid.uuid4()}", "enable.auto.commit": False, "isolation.level": isolation}
    )
    try:
        md = c.list_topics(topic, timeout=10)
        parts = [TopicPartition(topic, p) for p in md.topics[topic].partitions]
        ends = {p.partition: c.get_watermark_offsets(p, timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p.partition, 0) for p in parts])
        seen, done = Counter(), {p for p, end in ends.items() if end == 0}
        while len(done) < len(ends):
            m = c.poll(5)
            if m is None:
                # A transactional topic ends in a marker, past the last record a reader gets.
                done |= {p.partition for p in c.position(parts) if p.offset >= ends[p.partition]}
                continue
            if m.error():
                continue
            seen[dict(m.headers())["id"].decode()] += 1
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
        return seen
    finally:
        c.close()


def check_against_independent_reads(row: dict) -> tuple[Counter, Counter]:
    """The run's row against the outbox, the topic and the sink read directly; returns the
    topic's and the sink's copies by id."""
    p = catalog.PIPELINES[row["pipeline"]]
    outbox = {
        r[0] for r in _rows(catalog.PIPELINE_CONNECTIONS["outbox"], f'SELECT id::text FROM "{row["outbox_table"]}"')
    }
    sink = Counter(
        dict(
            _rows(
                catalog.PIPELINE_CONNECTIONS["sink"], f'SELECT event_id, count(*) FROM "{row["sink_table"]}" GROUP BY 1'
            )
        )
    )
    topic = read_back(row["topic"], p.isolation)
    assert row["status"] == "reconciled"
    assert row["outbox_rows"] == len(outbox) == row["events"], "the load committed every event once"
    assert row["lost"] == len(outbox - set(topic)), "lost: outbox rows the topic never had"
    poisoned = "poison" in [e["action"] for e in row["timeline"]["events"]]
    assert set(topic) - outbox == (set(poison_ids(row["topic"])) if poisoned else set()), (
        "no record the outbox never had, but the other writer's"
    )
    dup_ids = {e for e, n in topic.items() if n > 1}
    assert row["duplicate_events"] == len(dup_ids)
    assert row["duplicate_copies"] == sum(topic.values()) - len(topic), "records beyond each event's first"
    audited = {
        r["event_id"]
        for r in report.query(
            "SELECT event_id FROM audit_discrepancies WHERE audit = %s AND stage = 'outbox_topic' AND kind = 'duplicate'",
            (row["audit"],),
        )
    }
    assert audited == dup_ids, "the audit's duplicate ids are the read-back's, exactly"
    # The JDBC sink appends each record it applies: its own behaviour, reported exactly.
    assert row["sink_rows"] == sum(sink.values())
    assert row["sink_duplicates"] == sum(1 for n in sink.values() if n > 1)
    assert row["end_to_end_lost"] == len(outbox - set(sink))
    assert row["sink_lost"] == len(set(topic) - set(sink))
    # The worker setting the pipeline names, seen in the topic: transaction markers, or none.
    assert (row["transaction_markers"] > 0) is p.transactional, row["transaction_markers"]
    windows = report.query("SELECT count(*) AS n FROM audit_windows WHERE audit = %s", (row["audit"],))[0]["n"]
    assert windows == 2, "a mid-load window and a final one"
    return topic, sink


def run_pipeline(name: str, scenario: str, events: int = 3000) -> dict:
    with spark_connect_default():  # the pipeline's audit windows
        row = pipeline.run(PipelineSpec(name, scenario, events))
    print(pipeline.summary_line(row))
    # Judged by the definition it recorded when it was made.
    defined = catalog.get_pipeline(name).definition(scenario)
    assert (row["definition"], row["definition_hash"]) == (defined.to_json(), defined.digest)
    assert (row["promise"], row["expectation"]) == (defined.promise, defined.expectation_text)
    return row


# The demo test (test_dags.py) runs this pair through the matrix DAG with the same checks.
@pytest.mark.faults
@pytest.mark.slow
def test_at_least_once_pipeline_duplicates_after_a_worker_kill_and_loses_nothing(healthy_cluster_after):
    row = run_pipeline("debezium_outbox", "connect_worker_kill")
    check_against_independent_reads(row)
    # The killed source task resends what it sent since its last offset commit: they come every 5 s,
    # and 100 events a second flow, so some are always sent and not yet committed.
    assert row["duplicate_events"] > 0 and row["lost"] == 0
    assert row["verdict"] == "kept" and row["meets_expectation"] is True
    kills = [e for e in row["timeline"]["events"] if e["action"] == "kill_worker"]
    assert len(kills) == 1 and kills[0]["signal"] == "SIGKILL"
    assert [e["action"] for e in row["timeline"]["events"]].count("start_worker") == 1


@pytest.mark.faults
# coordinator_kill is in the slow suite (CI's budget; it passed in every run of issue 41's notes).
@pytest.mark.parametrize("scenario", ["connect_worker_kill", pytest.param("coordinator_kill", marks=pytest.mark.slow)])
def test_exactly_once_pipeline_keeps_every_event_once_under_connector_faults(scenario, healthy_cluster_after):
    row = run_pipeline("debezium_outbox_eos", scenario)
    topic, _ = check_against_independent_reads(row)
    assert set(topic.values()) == {1}, "read_committed, every event exactly once"
    assert (row["duplicate_events"], row["lost"]) == (0, 0)
    assert row["verdict"] == "kept" and row["meets_expectation"] is True
    # The faults were really injected: the worker of the source task, or its transaction coordinator.
    actions = [e["action"] for e in row["timeline"]["events"]]
    assert ("kill_worker" if scenario == "connect_worker_kill" else "kill") in actions, actions
    # The run's audit is done: its totals are recorded and its state forgotten, its results kept.
    prefix = audits.sightings_partition(row["audit"])
    assert report.query(audits.SIGHTINGS_PARTITIONS.format(mark="%s"), (prefix,)) == []
    assert report.query("SELECT count(*) AS n FROM audit_windows WHERE audit = %s", (row["audit"],))[0]["n"] >= 1


@pytest.mark.faults
@pytest.mark.slow  # CI's budget: the exactly-once pipeline above and the demo's pipeline stay in CI
def test_at_least_once_pipeline_loses_nothing_when_the_outbox_database_restarts(healthy_cluster_after):
    row = run_pipeline("debezium_outbox", "outbox_db_restart")
    check_against_independent_reads(row)
    assert row["lost"] == 0 and row["end_to_end_lost"] == 0
    assert row["meets_expectation"] is True
    assert "restart_outbox_db" in [e["action"] for e in row["timeline"]["events"]]


@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "scenario"),
    [pair for pair in catalog.pipeline_pairs() if pair[1] not in ("connect_worker_kill", "coordinator_kill")],
)
def test_every_pipeline_pair_meets_its_expectation(name, scenario, healthy_cluster_after):
    row = run_pipeline(name, scenario)
    check_against_independent_reads(row)
    assert row["meets_expectation"] is True, pipeline.summary_line(row)


def test_a_pipeline_run_is_refused_before_anything_is_made():
    before = ConnectCluster("kafka_connect").call("GET", "/connectors")
    for args, message in (
        (["--pipeline", "debezium"], "unknown pipeline 'debezium'"),
        (["--pipeline", "debezium_outbox", "--scenario", "coordinator_kill"], "needs a transactional source"),
        (["--pipeline", "debezium_outbox", "--events", "-1"], "events must be an integer from 1"),
        (["--pipeline", "debezium_outbox", "--rate", "0"], "rate must be a positive number"),
    ):
        res = run([*REPO_CLI, "pipeline", "run", *args])
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().splitlines() == [f"pipeline: {res.stderr.strip().split('pipeline: ', 1)[1]}"]
        assert message in res.stderr
    down = {"AIRFLOW_CONN_KAFKA_CONNECT": '{"conn_type": "http", "host": "127.0.0.1", "port": 1}'}
    res = run([*REPO_CLI, "pipeline", "run", "--pipeline", "debezium_outbox"], env=down)
    assert res.returncode == 2 and "Kafka Connect (kafka_connect) cannot be reached" in res.stderr
    assert ConnectCluster("kafka_connect").call("GET", "/connectors") == before, "nothing was registered"
