"""`prove`'s plan: each finding the rule catalog makes on a producer and its topic is put to the
fewest runs that can show it, and bad input is refused in one line before any run. (The runs
themselves, and what they confirm: tests/integration/test_prove.py.)"""

import json

import pytest
from conftest import cli

from delivery_semantics.entry import prove


def _plan(mode: str, *sets: str) -> dict[str, list[str]]:
    req = prove.request(mode, list(sets))
    planned, left = prove.plan(prove.predictions(req), req)
    out = {p.label: [x.rule.name for x in p.predictions] for p in planned}
    out.update({"left": [o.prediction.rule.name for o in left]} if left else {})
    return out


def test_a_leader_acked_producer_is_put_to_an_isolated_leader_lost_acks_and_a_rolling_restart():
    # Reordering is shown by a leader's move, not by lost acks: every first copy is written in order.
    assert _plan("at_least_once") == {
        "isolated_leader": ["acks_one", "acks_one_offsets"],
        "lost_ack": ["retries_without_idempotence"],
        "rolling_restart": ["in_flight_without_idempotence"],
    }


def test_findings_on_the_producer_and_the_topic_share_the_run_that_shows_them():
    plan = _plan(
        "at_least_once_all",
        "topic.min.insync.replicas=1",
        "producer.enable.idempotence=false",
        "producer.max.in.flight.requests.per.connection=5",
    )
    assert plan == {
        "lost_ack": ["retries_without_idempotence"],
        "shrunk_isr_leader_kill": ["min_insync_one"],
        "rolling_restart": ["in_flight_without_idempotence"],
    }


def test_a_consumers_findings_run_as_the_strategy_that_does_what_its_setting_does():
    assert _plan("idempotent", "consumer.enable.auto.commit=true") == {
        "producer_crash": ["idempotence_across_restarts"],
        "auto_commit x consumer_crash": ["auto_commit"],
        "process_then_commit x consumer_crash": ["commit_after_process_without_dedup"],
        "start_at_latest x none": ["auto_offset_reset_latest"],  # a new group at latest, no fault
    }
    slow = ["consumer.max.poll.interval.ms=7000", "consumer.app.processing.ms=9000", "consumer.app.dedup=true"]
    assert _plan("idempotent", "consumer.enable.auto.commit=false", "consumer.auto.offset.reset=earliest", *slow) == {
        "producer_crash": ["idempotence_across_restarts"],
        "slow_poll_loop x none": ["max_poll_interval_shorter_than_processing"],
    }
    # Nothing reads uncommitted here: that finding is left, with why.
    assert _plan("transactional", "consumer.isolation.level=read_uncommitted", "consumer.enable.auto.commit=false") == {
        "txn_abort": ["transactions_read_uncommitted"],
        "start_at_latest x none": ["auto_offset_reset_latest"],
        "process_then_commit x consumer_crash": ["commit_after_process_without_dedup"],
    }


def test_a_consumer_run_takes_the_settings_its_strategy_reads_and_no_other():
    req = prove.request(
        "idempotent",
        [
            "consumer.auto.commit.interval.ms=2000",
            "consumer.max.poll.interval.ms=8000",
            "consumer.app.processing.ms=9000",
        ],
    )
    assert prove._run_settings(req, "auto_commit") == {"auto.commit.interval.ms": "2000"}
    assert prove._run_settings(req, "slow_poll_loop") == {"max.poll.interval.ms": "8000", "app.processing.ms": "9000"}
    assert prove._run_settings(req, "commit_before_process") == {}


def test_a_mode_that_cannot_run_a_findings_scenario_leaves_it_out_and_says_why():
    # The preset's producer is idempotent: only a producer crash, which a run of it can take.
    assert _plan("idempotent") == {"producer_crash": ["idempotence_across_restarts"]}
    assert _plan("transactional") == {}
    req = prove.request("at_most_once", [])
    planned, left = prove.plan(prove.predictions(req), req)
    assert [(p.scenario, [x.rule.name for x in p.predictions]) for p in planned] == [("leader_kill", ["acks_zero"])]
    assert left == []


def test_a_pipelines_source_is_put_to_its_worker_kill_and_its_sink_to_the_sinks():
    def plan(name: str) -> dict[str, list[str]]:
        req = prove.request(None, [], pipeline=name)
        planned, left = prove.plan(prove.predictions(req), req)
        assert left == []
        return {p.label: [x.rule.name for x in p.predictions] for p in planned}

    assert plan("debezium_outbox") == {
        "connect_worker_kill": ["source_without_exactly_once"],
        "sink_worker_kill": ["jdbc_sink_insert"],
    }
    # Exactly-once support on the source: only the sink's insert mode is left to prove.
    assert plan("debezium_outbox_eos") == {"sink_worker_kill": ["jdbc_sink_insert"]}
    # A sink's finding is read in the sink table, a source's in the topic.
    roles = {p.rule.name: role for p, role in prove.PipelineProof.findings("debezium_outbox")}
    assert roles == {"source_without_exactly_once": "source", "jdbc_sink_insert": "sink"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "nope"], "prove: unknown mode 'nope'"),
        (
            ["--mode", "at_least_once", "--set", "producer.bootstrap.servers=evil:9092"],
            "bootstrap.servers cannot be set",
        ),
        (
            ["--mode", "at_least_once", "--set", "topic.cleanup.policy=shred"],
            "a topic here takes min.insync.replicas",
        ),
        (["--mode", "at_least_once", "--set", "topic.min.insync.replicas=0"], "a topic here takes"),
        (["--mode", "at_least_once", "--set", "consumer.group.id=x"], "a consumer here takes enable.auto.commit"),
        (["--mode", "at_least_once", "--set", "producer.app.dedup=true"], "a producer's app. key here is"),
        (
            ["--mode", "at_least_once", "--set", "consumer.max.poll.interval.ms=1000"],
            "consumer.max.poll.interval.ms=1000: a consumer run here takes 6000 to 300000",
        ),
        (
            ["--mode", "at_least_once", "--set", "connector.errors.tolerance=all"],
            "a mode proves producer, topic and consumer settings",
        ),
        (["--mode", "at_least_once", "--set", "producer.acks=1\r\nx=y"], "is not FAMILY.KEY=VALUE"),
        (["--mode", "at_least_once", "--client", "go"], "runs on librdkafka, java, not go"),
        (["--pipeline", "nope"], "prove: unknown pipeline 'nope'"),
        (["--pipeline", "debezium_outbox", "--set", "connector.insert.mode=upsert"], "no --set or --client"),
        (["--mode", "at_least_once", "--pipeline", "debezium_outbox"], "not allowed with argument"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_run(args, message):
    res = cli("prove", *args, "--dry-run", SEMANTICS_NEMESIS_BACKEND="docker")
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert res.stderr.strip().count("\n") == 0 and res.stdout == ""


def test_the_dry_run_prints_each_finding_with_the_run_planned_for_it():
    res = cli("prove", "--mode", "at_least_once", "--dry-run", SEMANTICS_NEMESIS_BACKEND="docker")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["finding", "settings", "predicted", "scenario", "run", "observed", "confirmed"]
    assert [ln.split()[0] for ln in lines[2:]] == [
        "acks_one",
        "acks_one_offsets",
        "retries_without_idempotence",
        "in_flight_without_idempotence",
    ]
    assert "prove: 4 findings, 0 runs; none refuted" in res.stderr


def test_a_proofs_runs_travel_between_tasks_as_json_and_come_back_whole():
    req = prove.request("at_least_once", ["consumer.enable.auto.commit=false"])
    planned, left = prove.plan(prove.predictions(req), req)
    made = prove.Made(planned, [(f"r{i}", i % 2 == 0) for i in range(len(planned))], left)
    back = prove.Made.from_json(req, json.loads(json.dumps(made.to_json())))
    assert back.to_json() == made.to_json()
    assert [p.label for p in back.planned] == [p.label for p in planned]
    assert back.fresh(req) == [r for r, reused in made.runs if not reused]
    assert prove.Made([], [("p1", False)], []).fresh(prove.request(None, [], pipeline="debezium_outbox")) == []


def test_a_run_that_fails_leaves_its_findings_with_why_and_the_proof_goes_on(monkeypatch):
    from confluent_kafka import KafkaError, KafkaException

    from delivery_semantics.history import schema
    from delivery_semantics.plumbing.endpoints import EndpointError
    from delivery_semantics.workload import scenarios

    failing = {"lost_ack": KafkaException(KafkaError(KafkaError._FATAL, "Fatal error: INVALID_TXN_STATE\nmore"))}

    def run(spec, scenario, topic_config=None):
        if scenario in failing:
            raise failing[scenario]
        return type("Summary", (), {"run_id": f"r_{scenario}"})()

    monkeypatch.setattr(schema, "migrate", lambda: None)
    monkeypatch.setattr(scenarios, "run", run)
    monkeypatch.setattr(prove, "_input_run", lambda messages, seed: "r_input")
    monkeypatch.setattr(prove, "_consumer_run", lambda strategy, scenario, settings, source: f"c_{strategy}_{source}")
    req = prove.request("at_least_once", ["consumer.enable.auto.commit=false"])
    made = prove.make_runs(req, messages=100)
    assert made.runs == [
        ("r_isolated_leader", False),
        ("r_rolling_restart", False),
        ("c_process_then_commit_r_input", False),
        ("c_start_at_latest_r_input", False),
    ]
    [lost] = made.left
    assert (lost.prediction.rule.name, lost.scenario, lost.run_id) == ("retries_without_idempotence", "lost_ack", None)
    assert (
        lost.why
        == 'its run failed: KafkaException: KafkaError{code=_FATAL,val=-150,str="Fatal error: INVALID_TXN_STATE'
    )
    # A failure that is not a run's (a bug, an endpoint that refuses) is not hidden as one.
    for error in (KeyError("acks"), EndpointError("connection 'kafka_default' refused its credentials")):
        failing["lost_ack"] = error
        with pytest.raises(type(error)):
            prove.make_runs(req, messages=100)


def test_only_the_run_that_proves_a_cleanup_finding_deletes_or_compacts():
    req = prove.request(
        "transactional",
        [
            "topic.cleanup.policy=compact",
            "topic.min.insync.replicas=1",
            "producer.transaction.timeout.ms=5000",
            "producer.message.timeout.ms=5000",
            "producer.app.resends_failed=false",
            "consumer.enable.auto.commit=false",
            "consumer.auto.offset.reset=earliest",
            "consumer.app.dedup=true",
            "consumer.isolation.level=read_committed",
        ],
    )
    planned, _ = prove.plan(prove.predictions(req), req)
    topics = {p.label: prove.topic_of_run(req, p) for p in planned}
    assert topics == {
        "partitioned_leader": {"min.insync.replicas": "1"},
        "none": {"min.insync.replicas": "1", "cleanup.policy": "compact", **prove.CLEANED_TOPIC},
        "shrunk_isr_leader_kill": {"min.insync.replicas": "1"},
    }
