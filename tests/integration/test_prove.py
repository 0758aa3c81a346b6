"""Predict, then prove, for real: `local/semantics prove` on a configuration that trips a rule of
each family a platform run exercises (a producer without idempotence, a topic with
min.insync.replicas=1 under acks=all, a consumer that auto-commits), its runs made and reconciled
by the checker, and each finding's observed count compared with its prediction."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run

from delivery_semantics import catalog, rule_catalog
from delivery_semantics.entry import prove
from delivery_semantics.reporting import report

pytestmark = [pytest.mark.timeout(2400), pytest.mark.serial]

SEMANTICS = str(REPO / "local" / "semantics")


def _judged(sql: str, params) -> bool:
    return bool(report.query(sql, params))


@pytest.fixture(scope="module")
def runs_the_suite_judged():
    """The runs the demo's test (test_dags.py, earlier in CI's serial phase) leaves judged: an
    at_least_once run under lost acks, a process_then_commit consumer run under a crash, and a
    Debezium outbox pipeline under a worker kill. Made here only when this file runs alone."""
    from delivery_semantics.entry import pipeline, spark_submit
    from delivery_semantics.workload import consumer_workload, load, scenarios
    from delivery_semantics.workload.connector_pipeline import PipelineSpec

    fresh = []
    if not _judged(
        """SELECT 1 FROM runs r JOIN reconcile_summary s ON s.reconciliation_id = r.run_id
           WHERE r.mode = 'at_least_once' AND r.client = 'librdkafka' AND r.scenario = 'lost_ack'
             AND r.settings = '{}' AND r.topic_config = '{}'""",
        (),
    ):
        fresh.append(scenarios.run(load.LoadSpec(mode="at_least_once", messages=3000), "lost_ack").run_id)
    if not _judged(
        """SELECT 1 FROM consumer_runs c JOIN reconcile_summary s ON s.reconciliation_id = c.consumer_run_id
           WHERE c.strategy = 'process_then_commit' AND c.scenario = 'consumer_crash' AND c.status = 'completed'""",
        (),
    ):
        source = scenarios.run(load.LoadSpec(mode=catalog.CONSUMER_INPUT_MODE, messages=3000), "none").run_id
        spec = consumer_workload.ConsumerSpec("process_then_commit", source, scenario="consumer_crash")
        fresh += [source, consumer_workload.start(spec).consumer_run_id]
    if fresh:
        assert spark_submit.run(run_id=fresh).returncode == 0
    if not _judged(
        "SELECT 1 FROM pipeline_runs WHERE pipeline = 'debezium_outbox' AND scenario = 'connect_worker_kill' "
        "AND status = 'reconciled'",
        (),
    ):
        pipeline.run(PipelineSpec("debezium_outbox", "connect_worker_kill"))


def _prove(*args: str) -> tuple[dict[str, dict], str]:
    res = run([SEMANTICS, "prove", *args, "--json"], timeout=600)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    return {r["rule"]: r for r in map(json.loads, res.stdout.splitlines())}, res.stderr


def test_a_proof_of_each_family_reads_the_runs_the_suite_already_judged(runs_the_suite_judged):
    """CI's proofs make no run: a producer's finding, a consumer's and a connector's, each read
    from a run the suite had already judged with the same settings, and confirmed by its count."""
    rows, err = _prove("--mode", "at_least_once", "--set", "consumer.enable.auto.commit=false", "--only-reuse")
    assert [n for n, r in rows.items() if r["confirmed"] is False] == [], err
    retries = rows["retries_without_idempotence"]
    assert (retries["scenario"], retries["reused"], retries["confirmed"]) == ("lost_ack", True, True), retries
    [made] = report.query(
        "SELECT mode, client, scenario, settings, topic_config FROM runs WHERE run_id = %s", (retries["run_id"],)
    )
    assert made == {
        "mode": "at_least_once",
        "client": "librdkafka",
        "scenario": "lost_ack",
        "settings": {},
        "topic_config": {},
    }
    [summary] = report.query(
        "SELECT duplicate_events FROM reconcile_summary WHERE reconciliation_id = %s AND isolation = %s",
        (retries["run_id"], retries["isolation"]),
    )
    assert retries["observed"] == summary["duplicate_events"] > 0
    consumer = rows["commit_after_process_without_dedup"]
    assert (consumer["scenario"], consumer["reused"], consumer["confirmed"]) == (
        "process_then_commit x consumer_crash",
        True,
        True,
    ), consumer
    # What no judged run shows is left, with why; nothing is made.
    assert all(r["reused"] for r in rows.values() if r["run_id"]), rows
    latest = rows["auto_offset_reset_latest"]
    assert latest["reused"] or (latest["run_id"], latest["why"]) == (None, prove.NOTHING_TO_REUSE), latest
    assert "auto_commit" not in rows
    unrun = {name for name, r in rows.items() if r["run_id"] is None}
    assert all(rows[n]["why"] for n in unrun)

    rows, _ = _prove("--pipeline", "debezium_outbox", "--only-reuse")
    source = rows["source_without_exactly_once"]
    assert (source["scenario"], source["reused"], source["confirmed"]) == ("connect_worker_kill", True, True), source
    [p] = report.query("SELECT duplicate_events FROM pipeline_runs WHERE run_id = %s", (source["run_id"],))
    assert source["observed"] == p["duplicate_events"] > 0
    # Every proof is kept: the report's table reads them back.
    kept = report.query("SELECT rule, confirmed, reused FROM v_latest_proofs WHERE subject = 'debezium_outbox'")
    assert {"rule": "source_without_exactly_once", "confirmed": True, "reused": True} in kept
    text = run([SEMANTICS, "report", "--proofs"], timeout=120)
    assert text.returncode == 0 and "source_without_exactly_once" in text.stdout, text.stderr
    # The calibration table: each rule beside its newest proof that ran, these runs among them.
    table = run([SEMANTICS, "report", "--calibration"], timeout=120)
    assert table.returncode == 0, table.stderr
    lines = {ln.split("|")[1].strip(" `"): ln for ln in table.stdout.splitlines()[2:]}
    assert set(lines) == {r.name for r in rule_catalog.RULES}, "every rule, proven or not"
    assert f"`{source['run_id']}` | {source['observed']} | yes |" in lines["source_without_exactly_once"]
    assert "not proven yet" in lines["read_uncommitted_on_a_transactional_topic"], "no run of it: no strategy reads so"


# A consumer that reads committed records and skips what it applied: no consumer finding but those
# the settings after it make.
QUIET_CONSUMER = (
    "consumer.isolation.level=read_committed",
    "consumer.enable.auto.commit=false",
    "consumer.auto.offset.reset=earliest",
    "consumer.app.dedup=true",
)


def _sets(*pairs: str) -> list[str]:
    return [arg for pair in pairs for arg in ("--set", pair)]


def test_a_consumers_settings_and_a_compacted_topic_are_proved_by_runs_that_do_what_they_do():
    """CI's proof of the findings only a consumer or a topic can show: librdkafka's auto-commit, a
    new group at latest and a poll loop slower than its interval, each run as the consumer strategy
    that does it with the settings given, over one fresh input run; and a compacted topic, its
    records read once the cleaner has run. One Spark application judges the four runs."""
    rows, err = _prove(
        "--mode",
        "transactional",
        *_sets(
            "consumer.isolation.level=read_committed",
            "consumer.app.dedup=true",
            "consumer.enable.auto.commit=true",
            "consumer.auto.commit.interval.ms=1000",
            "consumer.auto.offset.reset=latest",
            "consumer.max.poll.interval.ms=7000",
            "consumer.app.processing.ms=12000",
            "topic.cleanup.policy=compact",
        ),
        "--messages",
        "3000",
    )
    assert {n: (r["scenario"], r["confirmed"]) for n, r in rows.items()} == {
        "auto_commit": ("auto_commit x consumer_crash", True),
        "auto_offset_reset_latest": ("start_at_latest x none", True),
        "max_poll_interval_shorter_than_processing": ("slow_poll_loop x none", True),
        "compacted_topic": ("none", True),
    }, err[-3000:]
    runs = {
        r["strategy"]: r
        for r in report.query(
            "SELECT consumer_run_id, strategy, source_run_id, settings, crashes FROM consumer_runs "
            "WHERE consumer_run_id = ANY(%s)",
            (
                [
                    rows[n]["run_id"]
                    for n in ("auto_commit", "auto_offset_reset_latest", "max_poll_interval_shorter_than_processing")
                ],
            ),
        )
    }
    assert {s: r["settings"] for s, r in runs.items()} == {
        "auto_commit": {"auto.commit.interval.ms": "1000"},
        "start_at_latest": {},
        "slow_poll_loop": {"max.poll.interval.ms": "7000", "app.processing.ms": "12000"},
    }
    assert len({r["source_run_id"] for r in runs.values()}) == 1, "one input run for the proof's consumers"
    [source] = report.query("SELECT acked FROM runs WHERE run_id = %s", (runs["start_at_latest"]["source_run_id"],))
    # The timer committed a polled batch before the crash: that batch, and nothing else, is lost.
    assert 0 < rows["auto_commit"]["observed"] <= 500 and runs["auto_commit"]["crashes"] == 1
    # A new group at latest joined once all 3,000 were written: it read none.
    assert rows["auto_offset_reset_latest"]["observed"] == source["acked"] == 3000
    # The stalled batch's commit was refused, and the batch read and written again.
    assert rows["max_poll_interval_shorter_than_processing"]["observed"] == 500
    # The compacted topic keeps only the newest record of each key.
    compacted = rows["compacted_topic"]
    [made] = report.query(
        "SELECT keys, acked, topic_config, target_rate FROM runs WHERE run_id = %s", (compacted["run_id"],)
    )
    assert made["topic_config"] == {**prove.CLEANED_TOPIC, "cleanup.policy": "compact"}
    # Spread over several segments, so that the cleaner has rolled ones to clean.
    assert made["target_rate"] == 3000 // prove.CLEANED_LOAD_S
    assert compacted["isolation"] == "read_committed" and 0 < compacted["observed"] <= made["acked"] - made["keys"]


@pytest.mark.slow  # six runs, four under faults, an input and one Spark application: about nine minutes
def test_a_rule_of_each_family_is_put_to_its_run_and_confirmed_by_what_the_checker_observed(healthy_cluster_after):
    res = run(
        [
            SEMANTICS,
            "prove",
            "--mode",
            "at_least_once_all",
            "--set",
            "topic.min.insync.replicas=1",
            "--set",
            "producer.enable.idempotence=false",
            "--set",
            "consumer.enable.auto.commit=true",
            "--messages",
            "6000",
            "--json",
        ],
        timeout=2400,
    )
    (REPO / "artifacts" / "prove.json").write_text(res.stdout)
    rows = {r["rule"]: r for r in map(json.loads, res.stdout.splitlines())}
    assert set(rows) == {
        "retries_without_idempotence",
        "in_flight_without_idempotence",
        "min_insync_one",
        "auto_commit",
        "commit_after_process_without_dedup",
        "auto_offset_reset_latest",
    }, res.stderr[-3000:]
    # Each planned finding read from its own run's summary, at the isolation its kind is read at.
    for name, r in rows.items():
        [summary] = report.query(
            "SELECT * FROM reconcile_summary WHERE reconciliation_id = %s AND isolation = %s",
            (r["run_id"], r["isolation"]),
        )
        assert r["observed"] is not None, name
        assert r["confirmed"] == (r["observed"] > 0), name
        assert summary["reconciliation_id"] == r["run_id"]
    assert {name: r["scenario"] for name, r in rows.items() if r["run_id"]} == {
        "retries_without_idempotence": "lost_ack",
        "in_flight_without_idempotence": "rolling_restart",
        "min_insync_one": "shrunk_isr_leader_kill",
        "auto_commit": "auto_commit x consumer_crash",
        "commit_after_process_without_dedup": "process_then_commit x consumer_crash",
        "auto_offset_reset_latest": "start_at_latest x none",
    }
    # The topic's run was made with the topic settings given, over the scenario's own.
    [topic] = report.query("SELECT topic_config FROM runs WHERE run_id = %s", (rows["min_insync_one"]["run_id"],))
    assert topic["topic_config"] == {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    # Five batches in flight reorder only where a leader moves with batches in flight: a rule of what
    # can happen, confirmed by some runs and not others (docs/CHECKER.md, "1 of 2"). The rest must be.
    refuted = [n for n, r in rows.items() if r["confirmed"] is False]
    assert set(refuted) <= {"in_flight_without_idempotence"}, rows
    assert res.returncode == (1 if refuted else 0), res.stderr[-2000:]


@pytest.mark.slow  # two runs with no fault, each read once the broker has deleted from it: about three minutes
@pytest.mark.parametrize(
    ("topic", "rule"),
    [
        (("topic.retention.ms=5000", "topic.app.audit.window.ms=20000"), "retention_shorter_than_the_audit"),
        (("topic.retention.bytes=20000", "topic.app.audit.window.ms=10000"), "retention_by_size"),
    ],
)
def test_a_retention_shorter_than_the_audit_is_proved_by_the_records_the_broker_deleted(topic, rule):
    rows, err = _prove("--mode", "transactional", *_sets(*QUIET_CONSUMER, *topic), "--messages", "3000")
    assert list(rows) == [rule], err[-2000:]
    found = rows[rule]
    [made] = report.query("SELECT acked, topic_config FROM runs WHERE run_id = %s", (found["run_id"],))
    kafka_keys = dict(q.removeprefix("topic.").split("=") for q in topic if not q.startswith("topic.app."))
    assert made["topic_config"] == {**prove.CLEANED_TOPIC, **kafka_keys}, "the window is the proof's wait, not a key"
    assert found["scenario"] == "none" and 0 < found["observed"] <= made["acked"] and found["confirmed"], found


@pytest.mark.slow  # a run under a leader's kill: about two minutes
def test_a_single_replica_is_proved_by_the_sends_that_outwaited_its_brokers_restart(healthy_cluster_after):
    # A delivery timeout longer than a failover (no delivery_timeout finding) and shorter than a
    # restart: the sends to the killed broker's partition fail, and only because it has no other replica.
    # An application that drops what failed: the platform's load sends it again unless told not to
    # (and a transactional one always does, whole).
    rows, err = _prove(
        "--mode",
        "idempotent",
        *_sets(
            *QUIET_CONSUMER,
            "topic.replication.factor=1",
            "producer.delivery.timeout.ms=15000",
            "producer.app.resends_failed=false",
        ),
        "--messages",
        "3000",
    )
    assert set(rows) == {"replication_factor_one", "idempotence_across_restarts"}, err[-2000:]
    found = rows["replication_factor_one"]
    [made] = report.query(
        "SELECT topic_config, settings, resends_failed, produced, acked FROM runs WHERE run_id = %s",
        (found["run_id"],),
    )
    assert made["topic_config"] == {"replication.factor": "1", "min.insync.replicas": "1"}
    assert (made["settings"], made["resends_failed"]) == ({"message.timeout.ms": "15000"}, False), "librdkafka's name"
    assert found["scenario"] == "leader_kill" and found["confirmed"], found
    # The sends that outwaited the restart failed and were dropped, none sent again: lost, but for
    # any the paused broker had written before its kill.
    assert made["produced"] == 3000 and 0 < found["observed"] <= made["produced"] - made["acked"], (found, made)


@pytest.mark.slow  # a pipeline run under a sink worker's kill: about two minutes
def test_a_sinks_insert_mode_is_proved_by_its_workers_kill(healthy_cluster_after):
    rows, _ = _prove("--pipeline", "debezium_outbox_eos")
    sink = rows["jdbc_sink_insert"]
    assert (sink["scenario"], sink["reused"]) == ("sink_worker_kill", False), sink
    [p] = report.query(
        "SELECT sink_duplicates, duplicate_events FROM pipeline_runs WHERE run_id = %s", (sink["run_id"],)
    )
    # The topic holds each event once (exactly-once source); the sink applied some twice.
    assert p["duplicate_events"] == 0 and sink["observed"] == p["sink_duplicates"] > 0 and sink["confirmed"]


@pytest.mark.slow  # a pipeline run with records the sink cannot convert: about two minutes
def test_a_sink_that_tolerates_errors_without_a_dead_letter_queue_is_proved_by_records_it_cannot_convert():
    from delivery_semantics.faults.nemesis import POISON_RECORDS

    rows, _ = _prove("--pipeline", "debezium_outbox_tolerant")
    tolerated = rows["errors_tolerated_without_a_dead_letter_queue"]
    assert (tolerated["scenario"], tolerated["reused"]) == ("poison_records", False), tolerated
    [p] = report.query(
        "SELECT outbox_rows, sink_lost, end_to_end_lost, lost, duplicate_events, audit FROM pipeline_runs "
        "WHERE run_id = %s",
        (tolerated["run_id"],),
    )
    # Exactly the records the sink could not convert are lost, and nothing else: every outbox row
    # reached the topic and the sink, the skipped records did not stop the task.
    assert tolerated["observed"] == p["sink_lost"] == POISON_RECORDS and tolerated["confirmed"], (tolerated, p)
    assert (p["end_to_end_lost"], p["lost"], p["duplicate_events"]) == (0, 0, 0), p
    [unexpected] = report.query(
        "SELECT count(DISTINCT event_id) AS n FROM audit_discrepancies WHERE audit = %s AND kind = 'unexpected' "
        "AND stage = 'outbox_topic'",
        (p["audit"],),
    )
    assert unexpected["n"] == POISON_RECORDS, "in the topic with no outbox row: the other writer's"


def test_predict_on_the_live_cluster_names_the_brokers_settings_and_the_feature_levels_it_used():
    """`predict --kafka --topic`: the broker's configuration and the cluster's finalized features,
    read live, each value with where the cluster says it comes from; a topic's own setting named as
    the topic's, and a finding computed from them (the failover from the broker's session timeout)."""
    import uuid

    from confluent_kafka.admin import NewTopic

    from delivery_semantics.plumbing import topics
    from delivery_semantics.plumbing.endpoints import kafka_config

    conf = kafka_config()
    topic = f"semantics-predict-{uuid.uuid4().hex[:6]}"
    admin = topics.admin_client(conf)
    made = NewTopic(topic, num_partitions=1, replication_factor=3, config={"cleanup.policy": "compact"})
    admin.create_topics([made])[topic].result(timeout=30)
    try:
        given = ["--kafka", "kafka_default", "--topic", topic, "--set", "producer.delivery.timeout.ms=7000"]
        res = run([SEMANTICS, "predict", *given, "--json"], timeout=120)
    finally:
        topics.delete_topic(conf, topic)
    assert res.returncode == 0, res.stderr
    found = {r["rule"]: r for r in map(json.loads, res.stdout.splitlines())}
    compacted = found["compacted_topic"]
    assert compacted["settings"]["topic.cleanup.policy"] == "compact"
    assert compacted["sources"]["topic.cleanup.policy"] == "topic"
    timeout = found["delivery_timeout_shorter_than_failover"]
    # The local stack fences a broker after 6 s (server.properties): 7 s cannot outlast a failover.
    assert timeout["settings"]["broker.broker.session.timeout.ms"] == "6000"
    assert timeout["sources"] == {
        "producer.delivery.timeout.ms": "set",
        "broker.broker.session.timeout.ms": "broker default",
    }
    [facts] = [ln for ln in res.stderr.splitlines() if ln.startswith("predict: read from the cluster: ")]
    assert "broker.min.insync.replicas=2 (broker default, dynamic)" in facts, facts
    assert "broker.unclean.leader.election.enable=false (broker default)" in facts, facts
    assert "cluster.eligible.leader.replicas.version=1 (cluster feature)" in facts, facts
    assert "cluster.metadata.version=" in facts and "cluster.transaction.version=2" in facts, facts


def test_predict_reads_a_running_connectors_settings_and_shows_none_of_its_secrets():
    """A team's sink, read through Connect's REST API: the settings the rules read, nothing else."""
    from delivery_semantics.plumbing.connect import ConnectCluster
    from delivery_semantics.plumbing.endpoints import database

    cluster, db, name = ConnectCluster(), database("outbox_app"), "semantics-predict-sink"
    dummy = "not-a-secret-but-shown-nowhere-7f3a"
    cluster.put(
        name,
        {
            "connector.class": catalog.SINK_CONNECTOR,
            "tasks.max": "1",
            "topics": "semantics-predict-nothing",
            "connection.url": db.jdbc_url,
            "connection.username": db.user,
            "connection.password": dummy,
            "insert.mode": "insert",
            "errors.tolerance": "all",
        },
    )
    try:
        res = run([SEMANTICS, "predict", "--connector", name, "--json"], timeout=120)
    finally:
        cluster.delete(name)
    assert res.returncode == 0, res.stderr
    found = {r["rule"]: r["settings"] for r in map(json.loads, res.stdout.splitlines())}
    assert found == {
        "errors_tolerated_without_a_dead_letter_queue": {"connector.errors.tolerance": "all"},
        "jdbc_sink_insert": {"connector.insert.mode": "insert"},
    }
    assert dummy not in res.stdout + res.stderr and db.jdbc_url not in res.stdout + res.stderr
    gone = run([SEMANTICS, "predict", "--connector", name], timeout=120)
    assert gone.returncode == 2 and f"Connector {name} not found" in gone.stderr and gone.stdout == ""


def test_the_prove_dag_reads_the_suites_pipeline_run_and_skips_the_checker(runs_the_suite_judged):
    """`semantics_prove` under `airflow dags test`, from its form: a pipeline's finding read from
    the run the suite judged, no run made, the checker skipped, the proof kept."""
    [before] = report.query("SELECT count(*) AS n FROM proofs")
    conf = {"subject": "debezium_outbox", "reuse": "only"}
    res = run(["airflow", "dags", "test", "semantics_prove", "-c", json.dumps(conf)], timeout=600)
    out = res.stdout + res.stderr
    (REPO / "artifacts" / "dags-test-prove.log").write_text(out)
    assert res.returncode == 0, out[-3000:]
    from test_audits import _airflow_tries

    state, tries = _airflow_tries("semantics_prove")
    assert state == "success" and tries["reconcile"][-1].endswith(":skipped"), tries
    assert tries["make_runs"][-1].endswith(":success") and tries["judge"][-1].endswith(":success"), tries
    rows = report.query(
        "SELECT rule, confirmed, reused, scenario FROM proofs WHERE subject = 'debezium_outbox' "
        "ORDER BY made_at DESC LIMIT 2"
    )
    assert {
        "rule": "source_without_exactly_once",
        "confirmed": True,
        "reused": True,
        "scenario": "connect_worker_kill",
    } in rows
    [after] = report.query("SELECT count(*) AS n FROM proofs")
    assert after["n"] == before["n"] + 2, "both findings kept: one proved, one with no judged run to read"
    # Bad input is refused by the form's schema before any task.
    bad = run(["airflow", "dags", "test", "semantics_prove", "-c", json.dumps({"settings": ["producer.acks=1\r\nx"]})])
    assert bad.returncode != 0 and "Invalid input for param settings" in bad.stdout + bad.stderr


@pytest.mark.slow  # a partitioned leader under a 5 s transaction timeout, and one Spark application: about two minutes
def test_a_transaction_timeout_shorter_than_a_partition_is_proved_by_the_transactions_the_coordinator_aborted():
    """A transaction timeout shorter than a partition, by an application that drops what failed:
    the coordinator aborts the open transaction, the producer goes fatal (or the commit fails
    abortably), and a new producer goes on without it. librdkafka wants its message timeout no
    longer than the transaction's, so both are set."""
    rows, err = _prove(
        "--mode",
        "transactional",
        *_sets(
            "consumer.isolation.level=read_committed",
            "consumer.app.dedup=true",
            "consumer.enable.auto.commit=false",
            "consumer.auto.offset.reset=earliest",
            "producer.transaction.timeout.ms=5000",
            "producer.message.timeout.ms=5000",
            "producer.app.resends_failed=false",
        ),
        "--messages",
        "3000",
    )
    assert {n: (r["scenario"], r["confirmed"]) for n, r in rows.items()} == {
        "transaction_timeout_shorter_than_a_stall": ("partitioned_leader", True),
        "delivery_timeout_shorter_than_failover": ("partitioned_leader", True),
    }, err[-3000:]
    # The transactions the coordinator aborted were not sent again: whole transactions lost, none
    # acked. (Where the producer went fatal ending one, as in two of three runs here, a second
    # session finished the slice: load.FATAL_RESTARTS.)
    [stalled] = report.query(
        "SELECT r.topic_config, s.lost_unacked, s.coordinator_aborted, s.lost_acked, s.duplicate_events FROM runs r "
        "JOIN reconcile_summary s ON s.reconciliation_id = r.run_id AND s.isolation = 'read_committed' "
        "WHERE r.run_id = %s",
        (rows["transaction_timeout_shorter_than_a_stall"]["run_id"],),
    )
    assert stalled["lost_unacked"] > 0 and stalled["lost_unacked"] % 100 == 0, stalled
    # Which of them the coordinator aborted depends on the race: librdkafka times a transaction's
    # records out no later than the transaction (its message.timeout.ms is bounded by it), so a
    # transaction may end for a timed-out record before the coordinator's abort. Every abort says
    # why, and the checker names exactly the lost events whose latest abort the ledger says was
    # the coordinator's.
    run_id = rows["transaction_timeout_shorter_than_a_stall"]["run_id"]
    assert report.query(
        "SELECT count(*) AS n FROM ledger_outcomes WHERE run_id = %s AND status = 'aborted' AND error IS NULL",
        (run_id,),
    ) == [{"n": 0}]
    [by_ledger] = report.query(
        "SELECT count(*) AS n FROM reconcile_discrepancies d JOIN ledger_event_status e "
        "ON e.run_id = %s AND e.event_id = d.event_id WHERE d.reconciliation_id = %s "
        "AND d.isolation = 'read_committed' AND d.kind = 'lost_unacked' AND e.status = 'aborted' "
        "AND e.error LIKE 'coordinator aborted:%%'",
        (run_id, run_id),
    )
    assert stalled["coordinator_aborted"] == by_ledger["n"] <= stalled["lost_unacked"], stalled
    assert (stalled["topic_config"], stalled["lost_acked"], stalled["duplicate_events"]) == ({}, 0, 0), stalled
